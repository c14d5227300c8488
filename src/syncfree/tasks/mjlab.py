"""`mjlab:<task id>`: mjlab's own tasks (`mjlab.tasks.registry`), its env and wrapper, with the runner config it ships
mapped key by key (`syncfree.tasks.rsl_rl_config`).

mjlab pins mujoco 3.11, mujoco-warp 3.11 and rsl-rl-lib 5.4.2, so it lives in a virtual environment of its own:
`pip install torch==2.13.0 mjlab==1.6.0` there (with torch pinned: a newer torchvision would pull another torch),
then `pip install -e <syncfree>`. On a CPU, Warp compiles its kernels on first use (a minute or two for G1) and
keeps them in `~/.cache/warp`.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import torch

from syncfree.config import EnvConfig, LogConfig, TrainConfig
from syncfree.envs.api import VecEnv
from syncfree.errors import UserError, check
from syncfree.tasks.configs import HUMANOID_RECIPE_ENVS, humanoid_recipe, off_policy_presets
from syncfree.tasks.rsl_rl_config import from_rsl_rl, resolve_obs_groups
from syncfree.tasks.spec import Preset, TaskSource, TaskSpec

PREFIX = "mjlab:"

BENCH_PROFILES: dict[str, Any] = {
    "quick": dict(num_envs=[64, 256], scaling=[], ablations=False, repeats=3, iterations=1),
    "full": dict(num_envs=[64, 1024], scaling=[64, 256, 1024], ablations=True, repeats=3, iterations=1),
    "gpu-smoke": dict(num_envs=[1024, 4096], scaling=[], ablations=False, repeats=3, iterations=2),
}
"""Sizes in mjlab envs (MuJoCo Warp; on a CPU a G1 step costs milliseconds per env)."""


@dataclass
class MjlabEnvConfig(EnvConfig):
    """mjlab's env, at `num_envs` envs, as its task registers it."""

    motion_file: str = ""
    """A motion `.npz` for mjlab's tracking tasks (their `commands.motion.motion_file`); empty for other tasks."""


def registry() -> ModuleType:
    """mjlab's task registry, with every task of mjlab registered; one line when mjlab is not installed."""
    try:
        import mjlab.tasks  # noqa: F401 - registers mjlab's tasks
        from mjlab.tasks import registry as mjlab_registry
    except ImportError as e:
        raise UserError(f"{PREFIX}<id>: mjlab is not installed ({e.name or e}): install it in a virtual environment "
                        "of its own (pip install torch==2.13.0 mjlab==1.6.0; see docs/rsl_rl.md)") from None
    return cast(ModuleType, mjlab_registry)


def task_ids() -> list[str]:
    """mjlab's task ids (`syncfree tasks`)."""
    return list(registry().list_tasks())


def _task_id(task: str) -> str:
    task_id = task[len(PREFIX):]
    known = task_ids()
    if task_id not in known:
        near = difflib.get_close_matches(task_id, known, n=1)
        hint = f"; did you mean {PREFIX}{near[0]}?" if near else f" (has {', '.join(known)})"
        raise UserError(f"task {task!r}: mjlab has no task {task_id!r}{hint}")
    return task_id


def preset(task: str) -> TrainConfig:
    """The runner config mjlab ships for the task, mapped (its algorithm's config type); its env count."""
    mjlab = registry()
    task_id = _task_id(task)
    rl_cfg = dataclasses.asdict(mjlab.load_rl_cfg(task_id))
    mapped = from_rsl_rl(rl_cfg, None, int(mjlab.load_env_cfg(task_id).scene.num_envs), "auto")
    cfg = dataclasses.replace(mapped.config, task=task, env=MjlabEnvConfig(num_envs=mapped.config.env.num_envs))
    cfg.save_every = mapped.save_interval
    cfg.log = LogConfig()  # where a run logs is the command line's choice (mjlab's script defaults to W&B)
    return cfg


def off_policy(algorithm: str) -> Preset:
    """An mjlab task trained by SAC or TD3: FastSAC's and FastTD3's recipe (`humanoid_recipe`) at its 4,096 envs
    (mjlab's tasks register 1 env, its train script's default, and its README trains them at 4,096) or mjlab's env
    count where that is larger, with a buffer of 1,024 steps of every env, mjlab's discount and as many env steps as
    its PPO's iterations take at that count."""
    def make(task: str) -> TrainConfig:
        ppo = preset(task)
        num_envs = max(ppo.env.num_envs, HUMANOID_RECIPE_ENVS)
        gamma = float(getattr(getattr(ppo, "ppo", None), "gamma", 0.99))
        return humanoid_recipe(algorithm, task, MjlabEnvConfig(num_envs=num_envs), ppo.iterations * ppo.rollout_steps(),
                               1024 * num_envs, gamma)

    return make


def env_config(cfg: TrainConfig) -> MjlabEnvConfig:
    """The env section, of a `mjlab:` task's type (`make_task_env` checks it)."""
    return cast(MjlabEnvConfig, cfg.env)


def make_env(cfg: TrainConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
    """mjlab's env of the task and its `RslRlVecEnvWrapper` (actions clipped as its runner config says), seen
    through `RslRlVecEnv` with the observation groups of that config."""
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper

    from syncfree.envs.adapters.from_rsl_rl import RslRlVecEnv

    mjlab = registry()
    task_id = _task_id(cfg.task)
    env_cfg = mjlab.load_env_cfg(task_id)
    env_cfg.scene.num_envs, env_cfg.seed = num_envs, seed
    motion, motion_file = env_cfg.commands.get("motion"), env_config(cfg).motion_file
    if motion_file:
        check(motion is not None, "env.motion_file", f"empty ({task_id} has no motion command)", motion_file)
        check(Path(motion_file).is_file(), "env.motion_file", "an existing motion .npz file", motion_file)
        motion.motion_file = motion_file
    elif motion is not None and not motion.motion_file:
        raise UserError(f"env.motion_file: {task_id} tracks a motion: give its .npz (mjlab's csv_to_npz.py makes one)")
    rl_cfg = mjlab.load_rl_cfg(task_id)
    env = RslRlVecEnvWrapper(ManagerBasedRlEnv(cfg=env_cfg, device=str(device)), clip_actions=rl_cfg.clip_actions)
    groups = resolve_obs_groups(dict(rl_cfg.obs_groups), env.get_observations())
    vec = RslRlVecEnv(env, groups["actor"], groups["critic"])
    vec.action_bounds = action_bounds(env.unwrapped, rl_cfg.clip_actions)
    return vec


def action_bounds(env: Any, clip: float | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The actions whose joint-position targets (`offset + scale * action`) span each joint's limits, in the action
    manager's order, within `clip` (the wrapper's clipping) where set: the bounds SAC and TD3 map their [-1, 1]
    onto (`VecEnv.action_bounds`). None unless every action term is a joint-position one (mjlab's
    `JointPositionAction`); an unlimited joint keeps [-1, 1]."""
    from mjlab.envs.mdp.actions.actions import JointPositionAction

    from syncfree.envs.managers.env import joint_limit_bounds

    manager = env.action_manager
    lows, highs = [], []
    for name in manager.active_terms:
        term = manager.get_term(name)
        if not isinstance(term, JointPositionAction):
            return None
        limits = getattr(getattr(getattr(term, "_entity", None), "data", None), "joint_pos_limits", None)
        if limits is None:  # another mjlab's layout: no bounds rather than no env
            return None
        limits = limits[0, term.target_ids].float()  # [joints, 2], env 0's
        scale, offset = (torch.as_tensor(v, dtype=torch.float32, device=limits.device) for v in (term.scale,
                                                                                                   term.offset))
        scale, offset = (v[0] if v.dim() == 2 else v.expand(len(term.target_ids)) for v in (scale, offset))
        low, high = joint_limit_bounds(limits[:, 0], limits[:, 1], offset, scale)
        lows.append(low)
        highs.append(high)
    low, high = torch.cat(lows), torch.cat(highs)
    if clip is not None:
        low, high = low.clamp(-clip, clip), high.clamp(-clip, clip)
    return low.cpu(), high.cpu()


def resolve(task: str) -> TaskSpec:
    _task_id(task)
    return TaskSpec(task, f"mjlab's {task[len(PREFIX):]}", MjlabEnvConfig, {"default": preset}, make_env, "ppo",
                    cannot_render="mjlab's envs draw with mjlab's own viewer (mjlab's play script)",
                    bench_profiles=BENCH_PROFILES, algorithm_presets=off_policy_presets(off_policy))


SOURCES = (TaskSource(PREFIX, f"{PREFIX}<id>", "mjlab's tasks (its env, wrapper and runner config), where mjlab is "
                      "installed", resolve, listing=task_ids),)
