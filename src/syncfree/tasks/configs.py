"""A task's configs: the one a run starts from (its preset, for the algorithm chosen), a stored one read back (a
checkpoint's, a run's `config.yaml`, of this layout or an earlier one), checked across its sections."""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

from syncfree.algo import algorithm_named, implied_algorithm
from syncfree.algo.configs import convert
from syncfree.algo.offpolicy import OffPolicyTrainConfig
from syncfree.config import EnvConfig, TrainConfig, from_dict, merge, section_types
from syncfree.core.imports import UserNames, allow_import, user_names
from syncfree.tasks.spec import Preset, TaskSpec

log = logging.getLogger("syncfree")


def _spec(task: str) -> TaskSpec | None:
    from syncfree.tasks import find_task  # the registry imports this module

    return find_task(task)


def config_type(task: str, algorithm: str | None = None) -> tuple[type[TrainConfig], dict[str, type]]:
    """The config type of `algorithm` (by default the task's own; `ppo` for a name no task has: a user's own env) and
    the types the task gives its sections (its `env`, ...)."""
    spec = _spec(task)
    name = algorithm or (spec.algorithm if spec is not None else "ppo")
    return algorithm_named(name).config_type, spec.section_types(name) if spec is not None else {}


def default_config(task: str, algorithm: str | None = None, **values: Any) -> TrainConfig:
    """A config of `task` trained by `algorithm` with the config type's defaults (no preset read), `values` set."""
    cls, sections = config_type(task, algorithm)
    return cls(task=task, **{name: kind() for name, kind in sections.items()}, **values)


def learner_config(algorithm: str, task: str, env: EnvConfig, iterations: int, **learner: Any) -> OffPolicyTrainConfig:
    """A preset of the off-policy `algorithm` (`sac`, `td3`) for `task`: its `env` section, `iterations`, and the
    settings `learner` of its own section (`gamma=0.95`, ...); everything else the config type's defaults."""
    cfg = algorithm_named(algorithm).config_type(task=task, env=env, iterations=iterations)
    assert isinstance(cfg, OffPolicyTrainConfig), algorithm
    name, section = cfg.SECTION, cfg.learner
    for key, value in learner.items():
        if not hasattr(section, key):
            raise ValueError(f"{algorithm} preset of {task}: {name}.{key} is no setting")
        setattr(section, key, value)
    return cfg


HUMANOID_RECIPE_ENVS = 4096
"""The env count FastSAC and FastTD3 train Isaac Lab's humanoids with, which `humanoid_recipe`'s batch (8
transitions per env) and replay ratio are set for."""


def humanoid_recipe(algorithm: str, task: str, env: EnvConfig, iterations: int, buffer_size: int,
                    gamma: float = 0.99) -> OffPolicyTrainConfig:
    """SAC or TD3 as FastSAC and FastTD3 train humanoids at thousands of envs (their Isaac Lab settings): 1 step of
    every env and 4 gradient steps of 32,768 per iteration, 3-step returns, targets moving by 0.1 per step, AdamW
    with weight decay 0.1 at 3e-4, ReLU critics of [1024, 512, 256] and actor of [512, 256, 128], 10 steps of every
    env at random first; SAC's temperature from 0.001 (its rate 3e-4), TD3's target smoothing noise 0.001. Not
    theirs: `pre_tanh_penalty` 0.01, which at a CPU's size lifted both learners from far below PPO's return to about
    PPO's on g1-track and far above it on mjlab's G1 velocity task (docs/learning.md)."""
    learner: dict[str, Any] = dict(
        steps_per_env=1, updates_per_iteration=4, batch_size=32_768, buffer_size=buffer_size, n_step=3, gamma=gamma,
        tau=0.1, actor_learning_rate=3e-4, critic_learning_rate=3e-4, optimizer="adamw", weight_decay=0.1,
        learning_starts=10 * env.num_envs, pre_tanh_penalty=0.01)
    learner.update(dict(init_alpha=0.001, alpha_learning_rate=3e-4) if algorithm == "sac" else
                   dict(policy_noise=0.001))
    cfg = learner_config(algorithm, task, env, iterations, **learner)
    cfg.policy.actor_hidden, cfg.policy.critic_hidden = [512, 256, 128], [1024, 512, 256]
    cfg.policy.activation = "relu"
    return cfg


def off_policy_presets(preset_of: Callable[[str], Preset]) -> dict[str, Preset]:
    """A task's SAC and TD3 presets (`TaskSpec.algorithm_presets`), `preset_of(algorithm)` each."""
    return {algorithm: preset_of(algorithm) for algorithm in ("sac", "td3")}


def with_algorithm(cfg: TrainConfig, algorithm: str) -> TrainConfig:
    """`cfg` trained by `algorithm` instead: the settings both algorithms have kept (`convert`)."""
    if algorithm == cfg.algorithm:
        return cfg
    spec = _spec(cfg.task)
    sections = spec.section_types(algorithm) if spec is not None else {}
    return convert(cfg, algorithm_named(algorithm).config_type, sections)


def choose_algorithm(default: str, named: Any, policy_kind: Any, teacher: Any) -> str:
    """The algorithm a run trains with: the one the user `named`, else `default` unless the policy kind or the
    teacher the user gave implies another of its family (said in one line)."""
    if isinstance(named, str) and named:
        algorithm_named(named)
        return named
    chosen, reason = implied_algorithm(default, policy_kind if isinstance(policy_kind, str) else None,
                                       isinstance(teacher, str) and teacher != "")
    if reason:
        log.info("%s: training with --algorithm %s", reason, chosen)
    return chosen


def validated(cfg: TrainConfig) -> TrainConfig:
    """`cfg` checked: each section by itself, then the task's checks across them; returns `cfg`."""
    cfg.validate()
    spec = _spec(cfg.task)
    if spec is not None and spec.check is not None:
        spec.check(cfg)
    return cfg


# -- the code a config names ---------------------------------------------------------------------------------------

def check_references(cfg: TrainConfig, names: UserNames) -> None:
    """Refuse, before anything is imported, a module of the user's choosing that `cfg` names (its task's, its
    `symmetry.mirror`'s) and `names` does not allow: what a run of `cfg` would import, checked up front."""
    spec = _spec(cfg.task)
    symmetry = getattr(cfg, "symmetry", None)
    mirror = symmetry.mirror if symmetry is not None and symmetry.active() else ""
    with user_names(names):
        if spec is not None and spec.imports:
            allow_import(cfg.task, "task", spec.imports)
        if mirror:
            allow_import(mirror, "symmetry.mirror", mirror.partition(":")[0])


def named_in_call(task: Any, overrides: Mapping[str, Any]) -> frozenset[str]:
    """The references a call of `syncfree.learn` gives itself: its task's name, a `symmetry.mirror` among its
    overrides (a dotted key, a section dict or a section object)."""
    tree: dict[str, Any] = {}
    for key, value in overrides.items():
        merge(tree, str(key).split("."), value)
    section = tree.get("symmetry")
    mirror = section.get("mirror") if isinstance(section, dict) else getattr(section, "mirror", None)
    return frozenset(name for name in (task, mirror) if isinstance(name, str) and name)


# -- stored configs ------------------------------------------------------------------------------------------------

def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """A config stored as a dict (a checkpoint's, a run's `config.yaml`) as its algorithm's config type with its task's
    section types; one of an earlier layout is read too (`upgrade_config`)."""
    task = str(data.get("task", TrainConfig.task))
    algorithm = stored_algorithm(data)
    cls, sections = config_type(task, algorithm)
    return cast(TrainConfig, from_dict(cls, upgrade_config(data, cls, sections), sections=sections))


LAYOUT_SECTIONS = ("policy", "ppo", "losses", "rnd", "symmetry", "distill")
"""The algorithm sections every config held before a config's type was its algorithm's (its `algorithm` key then
missing): each type keeps those it has."""


def stored_algorithm(data: dict[str, Any]) -> str:
    """The algorithm a stored config names; for one of an earlier layout (no `algorithm` key), the one that trained
    it: its task's, of the family its teacher (`distill.teacher`) and policy kind (`policy.kind`) say."""
    named = data.get("algorithm")
    if isinstance(named, str) and named:
        return named
    spec = _spec(str(data.get("task", TrainConfig.task)))
    policy, distill = data.get("policy"), data.get("distill")
    kind = policy.get("kind") if isinstance(policy, dict) else None
    teacher = distill.get("teacher") if isinstance(distill, dict) else None
    default = spec.algorithm if spec is not None else "ppo"
    return implied_algorithm(default, kind if isinstance(kind, str) else None,
                             isinstance(teacher, str) and teacher != "")[0]


def upgrade_config(data: dict[str, Any], cls: type[TrainConfig], sections: dict[str, type]) -> dict[str, Any]:
    """`data` in the layout of `cls` (with the task's `sections`) when it is of an earlier one, else as it is: the
    `env.g1`/`env.grid` layout's options moved to where `cls` keeps them (`upgrade_env_layout`); a config without
    `algorithm` gets the one that trained it and loses the sections of other algorithms (which it did not read), a
    distillation's rollout length moving from `ppo.steps_per_env` to `distill.steps_per_env`."""
    out = upgrade_env_layout(data, cls, sections)
    if isinstance(data.get("algorithm"), str) and data["algorithm"]:
        return out
    out = copy.deepcopy(out) if out is data else out
    own = {f.name for f in dataclasses.fields(cls)}
    ppo, distill = out.get("ppo"), out.get("distill")
    if "distill" in own and isinstance(ppo, dict) and isinstance(distill, dict) and "steps_per_env" in ppo:
        distill.setdefault("steps_per_env", ppo["steps_per_env"])
    for name in LAYOUT_SECTIONS:
        if name not in own:
            out.pop(name, None)
    out["algorithm"] = cls.ALGORITHM
    return out


_EARLIER_ENV_SECTIONS = ("g1", "grid")
"""Sections of the earlier `env` layout, each the options of one task, held by every config."""


def upgrade_env_layout(data: dict[str, Any], cls: type[TrainConfig], sections: dict[str, type]) -> dict[str, Any]:
    """`data` in the layout of `cls` when it is of the earlier one (recognised by its `env.g1` and `env.grid`
    sections): each option moved to where `cls` keeps it (`env.g1.history` -> `env.history`, `env.grid.map` ->
    `env.map`, a set `env.max_episode_length` -> a grid's `env.max_steps`), and the options of other tasks and
    algorithms, which this task never read, dropped. Any other dict is returned as it is."""
    env = data.get("env")
    if not isinstance(env, dict) or not all(isinstance(env.get(s), dict) for s in _EARLIER_ENV_SECTIONS):
        return data
    out = copy.deepcopy(data)
    env = out["env"]
    flat = {k: v for k, v in env.items() if k not in _EARLIER_ENV_SECTIONS}
    for section in _EARLIER_ENV_SECTIONS:
        flat.update(env[section])
    if flat.get("backend") == "":
        flat["backend"] = "torch"
    if env.get("max_episode_length"):
        flat["max_steps"] = env["max_episode_length"]
    types = section_types(cls, sections)
    env_fields = {f.name for f in dataclasses.fields(types["env"])}
    if "max_steps" in env_fields:
        flat.pop("max_episode_length", None)
    out["env"] = {k: v for k, v in flat.items() if k in env_fields}
    for section in ("policy", "ppo"):
        if isinstance(out.get(section), dict) and section in types:
            names = ({f.name for f in dataclasses.fields(types[section])}
                     - set(getattr(types[section], "UNREAD", ())))
            out[section] = {k: v for k, v in out[section].items() if k in names}
    if "losses" in out and "losses" not in types:
        del out["losses"]
    return out


def config_file_arguments(argv: list[str], path: str, data: dict[str, Any], cls: type[TrainConfig],
                          sections: dict[str, type]) -> list[str]:
    """`argv` with the config file at `path` (read as `data`) given as its content in the layout of `cls` when it
    is of an earlier layout (a run's `config.yaml` of an earlier version), else `argv` as it is."""
    upgraded = upgrade_config(data, cls, sections)
    if upgraded is data:
        return argv
    import yaml

    content = yaml.safe_dump(upgraded, sort_keys=False)
    return [content if a == path else f"--config={content}" if a == f"--config={path}" else a for a in argv]
