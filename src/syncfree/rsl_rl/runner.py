"""`OnPolicyRunner`, constructed and driven as rsl_rl 5's, training with syncfree's loop.

What a script or a subclass of rsl_rl's runner reaches is here under rsl_rl's names: `learn`, `save`, `load`,
`get_inference_policy`, `export_policy_to_jit` / `_to_onnx`, `add_git_repo_to_log`, `current_learning_iteration`,
`cfg`, `env`, `device`, `alg` (`save()` / `load()` in rsl_rl's checkpoint layout, `get_policy()`,
`learning_rate`, `optimizer`) and `logger` (`log_dir`, `writer`, `logger_type`, `save_model`). The training
itself is syncfree's `Runner` on the env through `RslRlVecEnv`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from syncfree.algo.base import CheckpointReader
from syncfree.algo.distillation import Distillation
from syncfree.algo.rnd import RND
from syncfree.config import PolicyConfig, TrainConfig
from syncfree.core.device import set_deterministic
from syncfree.envs.adapters.from_rsl_rl import RslRlVecEnv
from syncfree.errors import UserError
from syncfree.policy.actor_critic import ActorCritic
from syncfree.policy.deploy import DeployedActor, OnnxRecurrentActor, restart
from syncfree.policy.heads import GaussianHead
from syncfree.policy.recurrent_mlp import RecurrentMLPPolicy
from syncfree.rsl_rl.checkpoint import (
    from_rsl_rl,
    load_optimizer_from_rsl_rl,
    optimizer_to_rsl_rl,
    rnd_from_rsl_rl,
    rnd_to_rsl_rl,
    to_rsl_rl,
)
from syncfree.tasks.rsl_rl_config import from_rsl_rl as config_from_rsl_rl
from syncfree.train import checkpoint
from syncfree.train.progress import Progress
from syncfree.train.runner import Runner
from syncfree.train.schema import check_optimizer_state


class OnPolicyRunner:
    """rsl_rl 5's `OnPolicyRunner(env, train_cfg, log_dir=None, device="cpu")`: `env` is any rsl_rl `VecEnv`
    (Isaac Lab's or mjlab's `RslRlVecEnvWrapper`), `train_cfg` rsl_rl's config dict (`syncfree.tasks.rsl_rl_config`
    says how each key maps, or why it is refused), `log_dir` where `model_<it>.pt`, `metrics.jsonl`, the mapped
    `config.yaml` and TensorBoard's files go (None: nothing is written)."""

    def __init__(self, env: Any, train_cfg: dict[str, Any], log_dir: str | None = None, device: str = "cpu") -> None:
        self.env = env
        self.cfg = train_cfg
        self.device = device
        self.is_distributed, self.gpu_world_size, self.gpu_global_rank = False, 1, 0
        if int(os.getenv("WORLD_SIZE", "1")) > 1:
            raise UserError(f"rsl_rl runner: WORLD_SIZE={os.getenv('WORLD_SIZE')}: this runner trains in one "
                            "process; train on several with `torchrun ... syncfree train`")
        step_dt = getattr(getattr(env, "unwrapped", env), "step_dt", None)
        mapped = config_from_rsl_rl(train_cfg, env.get_observations(), int(env.num_envs), device,
                                    None if step_dt is None else float(step_dt))
        self.cfg["obs_groups"] = mapped.obs_groups
        self.cfg["multi_gpu"] = None
        self.save_interval = mapped.save_interval
        self.config = mapped.config
        """The syncfree config the rsl_rl one maps to (written to `log_dir/config.yaml`)."""
        policy_groups, critic_groups = mapped.env_groups()
        vec_env = RslRlVecEnv(env, policy_groups, critic_groups, mapped.mirror_function)
        teacher = mapped.teacher
        self.runner = Runner(mapped.config, run_dir=Path(log_dir) if log_dir else None, env=vec_env,
                             read_checkpoint=None if teacher is None else fresh_teacher(teacher, vec_env))
        """syncfree's training loop on `env`."""
        self.alg: PPO | StudentTeacher = (PPO(self.runner, policy_groups) if teacher is None else
                                          StudentTeacher(self.runner, policy_groups, mapped.teacher_noise))
        self.logger = Logger(log_dir, self.runner, "wandb" if mapped.config.log.wandb else "tensorboard")
        self.current_learning_iteration = 0

    def learn(self, num_learning_iterations: int, init_at_random_ep_len: bool = False) -> None:
        """Train `num_learning_iterations` iterations from `current_learning_iteration`, saving
        `model_<it>.pt` every `save_interval` iterations and at the end (with a `log_dir`), as rsl_rl does."""
        env, runner = self.env, self.runner
        if init_at_random_ep_len and hasattr(env, "episode_length_buf"):
            env.episode_length_buf = torch.randint_like(env.episode_length_buf, high=int(env.max_episode_length))
        set_deterministic(runner.cfg.perf.deterministic)
        self.alg.train_mode()
        if runner.iteration == 0 and self.current_learning_iteration:  # a checkpoint's iteration (a subclass's load)
            runner.iteration = self.current_learning_iteration
            runner.env_steps = runner.iteration * runner.steps_per_iteration
        self.logger.init_logging_writer()
        start, total = self.current_learning_iteration, self.current_learning_iteration + num_learning_iterations
        progress = Progress(runner.cfg.log, start, total)
        try:
            for it in range(start, total):
                progress.update(runner.iterate())
                self.current_learning_iteration = it
                if self.logger.writer is not None and it % self.save_interval == 0:
                    self.save(os.path.join(cast(str, self.logger.log_dir), f"model_{it}.pt"))
        finally:
            progress.close()
        if self.logger.writer is not None:
            self.save(os.path.join(cast(str, self.logger.log_dir), f"model_{self.current_learning_iteration}.pt"))
            self.logger.stop_logging_writer()

    def save(self, path: str, infos: dict[str, Any] | None = None) -> None:
        """rsl_rl's checkpoint (`actor_state_dict`, `critic_state_dict`, `optimizer_state_dict`, `iter`, `infos`),
        written atomically: rsl_rl's runner, and so Isaac Lab's and mjlab's play and export scripts, load it."""
        saved = self.alg.save()
        saved["iter"] = self.current_learning_iteration
        saved["infos"] = infos
        checkpoint.save_plain(saved, path)
        self.logger.save_model(path, self.current_learning_iteration)

    def load(self, path: str, load_cfg: dict[str, bool] | None = None, strict: bool = True,
             map_location: str | None = None) -> Any:
        """An rsl_rl 5 checkpoint (rsl_rl's or this runner's), read as data: no code in the file runs. Returns its
        `infos`. One line naming the file when it is not such a checkpoint or does not fit this policy. The tensors
        are read on the CPU and copied into the policy and optimizer on the runner's device, whatever
        `map_location` says (rsl_rl's argument, kept for its callers)."""
        loaded = checkpoint.load_plain(path)
        if not isinstance(loaded, dict) or ("actor_state_dict" not in loaded and "student_state_dict" not in loaded):
            raise UserError(f"checkpoint {path}: not an rsl_rl 5 checkpoint (no actor_state_dict nor "
                            "student_state_dict)")
        self.alg.source = f"checkpoint {path}"
        if self.alg.load(loaded, load_cfg, strict):
            self.current_learning_iteration = int(loaded.get("iter", 0))
            self.runner.iteration = self.current_learning_iteration  # syncfree's metrics continue from it
            self.runner.env_steps = self.runner.iteration * self.runner.steps_per_iteration
        return loaded.get("infos")

    def get_inference_policy(self, device: str | None = None) -> InferencePolicy:
        """The actor in evaluation mode: `policy(obs)` -> deterministic actions (the Gaussian mean)."""
        self.alg.eval_mode()
        policy = self.alg.get_policy()
        return policy.to(device) if device is not None else policy

    def export_policy_to_jit(self, path: str, filename: str = "policy.pt") -> None:
        """TorchScript of the deterministic actor, normalizer inside: `obs [N, D] -> actions [N, A]`; a recurrent
        actor acts for one env and keeps its state inside (`reset()` zeroes it), as rsl_rl's."""
        model = self.alg.get_policy().as_jit().to("cpu")
        os.makedirs(path, exist_ok=True)
        torch.jit.script(model).save(os.path.join(path, filename))

    def export_policy_to_onnx(self, path: str, filename: str = "policy.onnx", verbose: bool = False) -> None:
        """ONNX of the deterministic actor as rsl_rl writes it: input `obs`, output `actions`, opset 18; a recurrent
        actor also takes and returns its state (`h_in`, `c_in` -> `h_out`, `c_out`)."""
        from syncfree.export import require_onnx

        require_onnx()
        model = self.alg.get_policy().as_onnx(verbose=verbose).to("cpu").eval()
        os.makedirs(path, exist_ok=True)
        torch.onnx.export(model, model.get_dummy_inputs(), os.path.join(path, filename), export_params=True,
                          opset_version=18, verbose=verbose, input_names=model.input_names,
                          output_names=model.output_names)

    def add_git_repo_to_log(self, repo_file_path: str) -> None:
        """Record the git state (commit, status, diff) of the repository holding `repo_file_path` in
        `log_dir/git/` when training starts."""
        self.logger.git_status_repos.append(repo_file_path)


class DistillationRunner(OnPolicyRunner):
    """rsl_rl 5's `DistillationRunner(env, train_cfg, log_dir=None, device="cpu")`: `train_cfg` with
    `algorithm.class_name` Distillation, `student` and `teacher` model sections and `obs_groups` with `student`
    and `teacher` sets. The teacher's weights come from `load()` (an RL checkpoint's actor, or a distillation
    checkpoint); `learn` refuses to start before, as rsl_rl's does."""

    alg: StudentTeacher

    def learn(self, num_learning_iterations: int, init_at_random_ep_len: bool = False) -> None:
        if not isinstance(self.alg, StudentTeacher):
            raise UserError("rsl_rl distillation runner: algorithm.class_name is not Distillation (train PPO with "
                            "OnPolicyRunner)")
        if not self.alg.teacher_loaded:
            raise UserError("rsl_rl distillation runner: the teacher's weights are not loaded: load() a teacher "
                            "checkpoint first (an RL checkpoint's actor, or a distillation checkpoint)")
        super().learn(num_learning_iterations, init_at_random_ep_len)


def fresh_teacher(teacher: PolicyConfig, env: RslRlVecEnv) -> CheckpointReader:
    """A checkpoint reader that gives the distillation algorithm a teacher of the config's `teacher` section with
    fresh weights (the runner's `load()` replaces them), reading the env's `critic` group (the teacher's groups)."""
    def read(path: str) -> tuple[TrainConfig, dict[str, Any]]:
        width = int(env.obs_shapes["critic"][0])
        policy = ActorCritic(width, width, env.action_spec, teacher)
        return TrainConfig(task="rsl_rl", policy=teacher), {
            "action_spec": (env.action_spec.kind, env.action_spec.size), "obs_dims": {"policy": width, "critic": width},
            "policy": policy.state_dict()}
    return read


class PPO:
    """What rsl_rl's runner and its subclasses reach through `runner.alg`, over syncfree's algorithm."""

    def __init__(self, runner: Runner, actor_groups: list[str]) -> None:
        self._runner = runner
        self.policy = cast(ActorCritic | RecurrentMLPPolicy, runner.policy)
        self.optim = runner.algorithm.optim
        self.optimizer = self.optim.optimizer
        self.inference = InferencePolicy(self.policy, actor_groups)
        self.rnd = runner.algorithm.rnd
        """Random network distillation (rsl_rl's `alg.rnd`), when the config has `rnd_cfg`."""
        self.source = "checkpoint"
        """Named in load errors (the runner sets the file's path)."""

    @property
    def learning_rate(self) -> float:
        return self.optim.current_learning_rate()

    def load_rnd(self, loaded_dict: dict[str, Any]) -> None:
        """rsl_rl's `rnd_state_dict` and `rnd_optimizer_state_dict` into this run's RND (checked first)."""
        rnd = cast(RND, self.rnd)
        if "rnd_state_dict" not in loaded_dict:
            raise UserError(f"{self.source}: no rnd_state_dict (trained without RND; load it with "
                            "load_cfg={..., 'rnd': False} to start the predictor new)")
        state = rnd_from_rsl_rl(loaded_dict["rnd_state_dict"], rnd.module.state_dict(), self.source)
        optimizer = loaded_dict.get("rnd_optimizer_state_dict")
        try:
            check_optimizer_state(optimizer, rnd.params, "rnd_optimizer_state_dict")
        except UserError as e:
            raise UserError(f"{self.source}: {e}") from None
        rnd.load_state_dict({"module": state, "optimizer": optimizer})

    def train_mode(self) -> None:
        self.policy.train()

    def eval_mode(self) -> None:
        self.policy.eval()

    def get_policy(self) -> InferencePolicy:
        return self.inference

    def save(self) -> dict[str, Any]:
        actor, critic = to_rsl_rl(self.policy.state_dict())
        saved = {"actor_state_dict": actor, "critic_state_dict": critic,
                 "optimizer_state_dict": optimizer_to_rsl_rl(self.optim)}
        if self.rnd is not None:  # rsl_rl's names: its runner loads them into its RandomNetworkDistillation
            saved["rnd_state_dict"] = rnd_to_rsl_rl(self.rnd.module.state_dict())
            saved["rnd_optimizer_state_dict"] = self.rnd.optimizer.state_dict()
        return saved

    def load(self, loaded_dict: dict[str, Any], load_cfg: dict[str, bool] | None = None, strict: bool = True) -> bool:
        """rsl_rl's `PPO.load`: the parts `load_cfg` names (all by default); returns whether the caller takes the
        checkpoint's iteration."""
        load_cfg = load_cfg or {"actor": True, "critic": True, "optimizer": True, "iteration": True, "rnd": True}
        nets = [net for net in ("actor", "critic") if load_cfg.get(net)]
        for net in nets:
            if f"{net}_state_dict" not in loaded_dict:
                raise UserError(f"{self.source}: no {net}_state_dict")
        actor = loaded_dict["actor_state_dict"] if "actor" in nets else None
        critic = loaded_dict["critic_state_dict"] if "critic" in nets else None
        load_networks(self.policy, actor, critic, nets, self.source, strict)
        if load_cfg.get("optimizer"):
            load_optimizer_from_rsl_rl(self.optim, loaded_dict.get("optimizer_state_dict"), self.source)
        if load_cfg.get("rnd") and self.rnd is not None:  # as rsl_rl: a load_cfg without "rnd" leaves it new
            self.load_rnd(loaded_dict)
        return bool(load_cfg.get("iteration", False))


def load_networks(policy: nn.Module, actor: dict[str, Tensor] | None, critic: dict[str, Tensor] | None,
                  nets: list[str], source: str, strict: bool, named: str = "", optional: tuple[str, ...] = ()) -> None:
    """rsl_rl's actor and/or critic state dicts (`nets` says which are read) into `policy`, checked: with `strict`
    every key must have its counterpart (those under `optional` may be missing), and shapes and values must fit.
    `named`: how rsl_rl's file names the actor's dict, when not `actor_state_dict` (a student, a teacher)."""
    converted, unknown = from_rsl_rl(actor, critic, source)
    own = policy.state_dict()
    wanted = {key for key in own if _net_of(key) in nets and not key.startswith(optional)}

    def name(key: str) -> str:
        return _rsl_rl_name(key).replace("actor_state_dict", named) if named else _rsl_rl_name(key)

    if named:
        unknown = [key.replace("actor_state_dict", named) for key in unknown]
    problems = [f"{key} has no counterpart in this policy" for key in unknown]
    problems += [f"{name(key)} is not in this policy" for key in converted if key not in own]
    problems += [f"{name(key)} is missing" for key in sorted(wanted - set(converted))]
    if strict and problems:
        raise UserError(f"{source}: {problems[0]} ({_hint(problems[0])})")
    for key, value in converted.items():
        if key not in own:
            continue
        if value.shape != own[key].shape:
            raise UserError(f"{source}: {name(key)} has shape {tuple(value.shape)}; this policy's "
                            f"is {tuple(own[key].shape)}")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise UserError(f"{source}: {name(key)} holds NaN or infinite values")
        own[key] = value
    policy.load_state_dict(own)


class StudentTeacher:
    """What rsl_rl's distillation runner reaches through `runner.alg` (its `Distillation`), over syncfree's
    distillation: `save()` / `load()` in rsl_rl's layout (`student_state_dict`, `teacher_state_dict`,
    `optimizer_state_dict`), `teacher_loaded`, `get_policy()` (the student), `learning_rate`, `optimizer`."""

    def __init__(self, runner: Runner, student_groups: list[str], teacher_noise: bool) -> None:
        algorithm = cast(Distillation, runner.algorithm)
        self._runner = runner
        self.policy = cast(ActorCritic | RecurrentMLPPolicy, runner.policy)
        self.student, self.teacher = self.policy, algorithm.teacher
        self.optim = algorithm.optim
        self.optimizer = self.optim.optimizer
        self.inference = InferencePolicy(self.policy, student_groups)
        self.teacher_noise = teacher_noise
        """The teacher's section has a distribution: its noise parameter is saved and loaded."""
        self.teacher_loaded = False
        """Whether `load()` has given the teacher its weights (rsl_rl's runner refuses to learn before)."""
        self.rnd = None
        self.source = "checkpoint"

    @property
    def learning_rate(self) -> float:
        return self.optim.current_learning_rate()

    def train_mode(self) -> None:
        self.policy.train()
        self.teacher.eval()

    def eval_mode(self) -> None:
        self.policy.eval()
        self.teacher.eval()

    def get_policy(self) -> InferencePolicy:
        return self.inference

    def save(self) -> dict[str, Any]:
        teacher = to_rsl_rl(self.teacher.state_dict())[0]
        if not self.teacher_noise:
            teacher = {k: v for k, v in teacher.items() if not k.startswith("distribution.")}
        return {"student_state_dict": to_rsl_rl(self.policy.state_dict())[0], "teacher_state_dict": teacher,
                "optimizer_state_dict": optimizer_to_rsl_rl(self.optim)}

    def load(self, loaded_dict: dict[str, Any], load_cfg: dict[str, bool] | None = None, strict: bool = True) -> bool:
        """rsl_rl's `Distillation.load`: from an RL checkpoint (`actor_state_dict`) the teacher only, by default;
        from a distillation checkpoint the student, the teacher, the optimizer and the iteration."""
        if load_cfg is None:
            load_cfg = ({"teacher": True, "iteration": False} if "actor_state_dict" in loaded_dict else
                        {"student": True, "teacher": True, "optimizer": True, "iteration": True})
        if load_cfg.get("student"):
            if "student_state_dict" not in loaded_dict:
                raise UserError(f"{self.source}: no student_state_dict (an RL checkpoint: load its actor as the "
                                "teacher with load_cfg={'teacher': True})")
            load_networks(self.policy, loaded_dict["student_state_dict"], None, ["actor"], self.source, strict,
                          "student_state_dict")
        if load_cfg.get("teacher"):
            name = "teacher_state_dict" if "teacher_state_dict" in loaded_dict else "actor_state_dict"
            if name not in loaded_dict:
                raise UserError(f"{self.source}: no teacher_state_dict nor actor_state_dict")
            load_networks(self.teacher, loaded_dict[name], None, ["actor"], self.source, strict, name,
                          optional=() if self.teacher_noise else ("head.",))
            self.teacher_loaded = True
        if load_cfg.get("optimizer"):
            load_optimizer_from_rsl_rl(self.optim, loaded_dict.get("optimizer_state_dict"), self.source)
        return bool(load_cfg.get("iteration", False))


def _net_of(key: str) -> str:
    part = key.split(".", 1)[0]
    return "critic" if part.startswith("critic") else "actor"


def _rsl_rl_name(key: str) -> str:
    """A syncfree policy key as rsl_rl names it."""
    actor, critic = to_rsl_rl({key: torch.zeros(1)})
    return f"{'actor' if actor else 'critic'}_state_dict.{next(iter(actor or critic))}"


def _hint(problem: str) -> str:
    if "std_param" in problem:
        return "the checkpoint's distribution_cfg.std_type differs from this config's"
    if "obs_normalizer" in problem:
        return "the checkpoint's obs_normalization differs from this config's"
    return "the checkpoint was trained with other model settings"


class InferencePolicy(nn.Module):
    """The live actor as rsl_rl's `get_policy()` returns it: `policy(obs)` with obs the env's observation
    TensorDict (or the actor's groups already concatenated) -> the deterministic action. A recurrent policy carries
    its actor's state from call to call; `reset(dones)` zeroes it where `dones` is set (all of it without
    `dones`), as rsl_rl's recurrent models do."""

    def __init__(self, policy: ActorCritic | RecurrentMLPPolicy, groups: list[str]) -> None:
        super().__init__()
        self.policy = policy
        self.groups = list(groups)
        self.is_recurrent = policy.is_recurrent
        self.state: tuple[Tensor, ...] | None = None
        """The actor's state (None: zero, at the next call's batch size; a feed-forward actor's is empty)."""

    def forward(self, obs: Any) -> Tensor:
        if isinstance(obs, Tensor):
            actor_obs = obs
        elif len(self.groups) == 1:
            actor_obs = obs[self.groups[0]]
        else:
            actor_obs = torch.cat([obs[g] for g in self.groups], dim=-1)
        if self.state is None or any(s.shape[0] != actor_obs.shape[0] for s in self.state):
            self.state = self.policy.initial_actor_state(actor_obs.shape[0], actor_obs.device)
        actions, state = self.policy.act_carrying(actor_obs, self.state)
        self.state = tuple(s.detach() for s in state)  # a graph through every past call would grow without end
        return actions

    def reset(self, dones: Tensor | None = None, hidden_state: Any = None) -> None:
        if hidden_state is not None:
            raise UserError("rsl_rl runner: reset(hidden_state=...) is not supported; reset(dones) zeroes the state "
                            "of the envs whose episode ended")
        self.state = None if dones is None or self.state is None else restart(self.state, dones)

    @property
    def output_std(self) -> Tensor:
        return cast(GaussianHead, self.policy.head).std()

    def as_jit(self) -> nn.Module:
        return self.policy.torchscript_actor()

    def as_onnx(self, verbose: bool = False) -> DeployedActor | OnnxRecurrentActor:
        """rsl_rl's signature; `verbose` changes nothing here."""
        return self.policy.onnx_actor()


class Logger:
    """What rsl_rl's runner and its subclasses reach through `runner.logger`: `log_dir`, `writer` (set while
    training writes, None without a `log_dir`), `logger_type`, `git_status_repos` and `save_model`."""

    def __init__(self, log_dir: str | None, runner: Runner, logger_type: str) -> None:
        self.log_dir = log_dir
        self.logger_type = logger_type
        self.git_status_repos: list[str] = []
        self._runner = runner

    @property
    def writer(self) -> Any:
        return self._runner.logger

    def init_logging_writer(self) -> None:
        if self.log_dir is None:
            return
        self._runner.open_logger()
        for repo in self.git_status_repos:
            write_git_state(repo, Path(self.log_dir) / "git")

    def stop_logging_writer(self) -> None:
        if self._runner.logger is not None:
            self._runner.logger.close()
            self._runner.logger = None

    def save_model(self, path: str, iteration: int) -> None:
        """Upload the checkpoint to W&B when it is the logger (as rsl_rl's W&B writer does)."""
        if self.logger_type == "wandb":
            import wandb

            if wandb.run is not None:
                wandb.save(path, base_path=os.path.dirname(path))


def write_git_state(repo_file_path: str, out_dir: Path) -> None:
    """`<out_dir>/<repository>.diff`: the commit, `git status` and `git diff` of the repository holding
    `repo_file_path` (nothing when it is in none, or git is missing)."""
    where = Path(repo_file_path)
    where = where if where.is_dir() else where.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=True).stdout

    try:
        top = Path(git("rev-parse", "--show-toplevel").strip())
        text = f"commit {git('rev-parse', 'HEAD').strip()}\n\n{git('status', '--short')}\n{git('diff')}"
    except (OSError, subprocess.CalledProcessError):
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{top.name}.diff").write_text(text)
