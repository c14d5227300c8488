"""`OnPolicyRunner`, constructed and driven as rsl_rl 5's, training with syncfree's loop.

What a script or a subclass of rsl_rl's runner reaches is here under rsl_rl's names: `learn`, `save`, `load`,
`get_inference_policy` (`syncfree.rsl_rl.inference`), `export_policy_to_jit` / `_to_onnx`, `add_git_repo_to_log`,
`current_learning_iteration`, `cfg`, `env`, `device`, `alg` (`syncfree.rsl_rl.algorithms`: `save()` / `load()` in
rsl_rl's checkpoint layout, `get_policy()`, `learning_rate`, `optimizer`) and `logger` (`syncfree.rsl_rl.logger`:
`log_dir`, `writer`, `logger_type`, `save_model`). The training itself is syncfree's `Runner` on the env through
`RslRlVecEnv`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, cast

import torch

from syncfree.algo.base import CheckpointReader
from syncfree.algo.configs import PPOTrainConfig
from syncfree.config import TrainConfig
from syncfree.envs.adapters.from_rsl_rl import RslRlVecEnv
from syncfree.errors import UserError
from syncfree.policy.actor_critic import ActorCritic
from syncfree.policy.settings import PolicyConfig
from syncfree.rsl_rl.algorithms import PPO, StudentTeacher
from syncfree.rsl_rl.checkpoint import iteration_of
from syncfree.rsl_rl.inference import InferencePolicy
from syncfree.rsl_rl.logger import Logger
from syncfree.tasks.rsl_rl_config import from_rsl_rl as config_from_rsl_rl
from syncfree.train import checkpoint
from syncfree.train.run import Run, start, visible_logs
from syncfree.train.runner import Runner
from syncfree.train.session import saved_line

log = logging.getLogger("syncfree")


class OnPolicyRunner:
    """rsl_rl 5's `OnPolicyRunner(env, train_cfg, log_dir=None, device="cpu")`: `env` is any rsl_rl `VecEnv`
    (Isaac Lab's or mjlab's `RslRlVecEnvWrapper`), `train_cfg` rsl_rl's config dict (`syncfree.tasks.rsl_rl_config`
    says how each key maps, or why it is refused), `log_dir` where `model_<it>.pt`, TensorBoard's files (rsl_rl's
    tags, `syncfree.rsl_rl.logger`), `metrics.jsonl` and the mapped `config.yaml` go (None: nothing is written)."""

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
        if "log.tensorboard" not in (train_cfg.get("syncfree") or {}):
            mapped.config.log.tensorboard = True  # rsl_rl writes TensorBoard's files with W&B too
        policy_groups, critic_groups = mapped.env_groups()
        vec_env = RslRlVecEnv(env, policy_groups, critic_groups, mapped.mirror_function)
        teacher = mapped.teacher
        with visible_logs():
            self.run = start(mapped.config, Path(log_dir) if log_dir else None, env=vec_env,
                             read_checkpoint=None if teacher is None else fresh_teacher(teacher, vec_env),
                             on_iteration=(self.log_iteration,), saver=self.save_due)
        """syncfree's run on `env`: its loop (`run.runner`), metrics and TensorBoard files; the checkpoints are
        rsl_rl's (`save`)."""
        self.run.release()  # the folder is locked while `learn` trains (a script may make several runners)
        runner = self.run.runner
        self.alg: PPO | StudentTeacher = (PPO(runner, policy_groups) if teacher is None else
                                          StudentTeacher(runner, policy_groups, mapped.teacher_noise))
        runner.record_part("action_std", lambda: self.alg.get_policy().output_std.mean())
        self.logger = Logger(log_dir, self.run, "wandb" if mapped.config.log.wandb else "tensorboard", train_cfg,
                             vec_env.log_names)
        self.current_learning_iteration = 0
        self._span = (0, 0, 0)
        """Where the current `learn` started (syncfree's iteration, rsl_rl's) and rsl_rl's iteration it ends at."""

    @property
    def runner(self) -> Runner:
        """syncfree's training loop on `env`."""
        return self.run.runner

    def learn(self, num_learning_iterations: int, init_at_random_ep_len: bool = False) -> None:
        """Train `num_learning_iterations` iterations from `current_learning_iteration`, saving
        `model_<it>.pt` every `save_interval` iterations and at the end (with a `log_dir`), as rsl_rl does. Ctrl-C,
        SIGTERM or SIGHUP stops after the current iteration, which is saved, then raises `KeyboardInterrupt` (a second
        one: at once); the run folder's lock is released either way."""
        env, run = self.env, self.run
        runner = run.runner
        if init_at_random_ep_len and hasattr(env, "episode_length_buf"):
            env.episode_length_buf = torch.randint_like(env.episode_length_buf, high=int(env.max_episode_length))
        self.alg.train_mode()
        if runner.iteration == 0 and self.current_learning_iteration:  # a checkpoint's iteration (a subclass's load)
            runner.continue_from(self.current_learning_iteration)
        start_it = self.current_learning_iteration
        self._span = (runner.iteration, start_it, start_it + num_learning_iterations)
        with visible_logs():
            run.acquire()
            try:
                self.logger.init_logging_writer()
                run.learn(until=runner.iteration + num_learning_iterations, report=self.logger.log_dir is None)
            finally:
                self.logger.stop_logging_writer()
                run.release()
            if run.interrupted:
                log.info("interrupted at iteration %d; %s", self.current_learning_iteration,
                         saved_line(run.last_saved, runner.iterations_run))
                raise KeyboardInterrupt

    def log_iteration(self, run: Run, record: dict[str, Any]) -> None:
        """After each iteration (an `IterationCallback`): rsl_rl's index of it (`it`, from `current_learning_iteration`
        on, as rsl_rl counts a `learn`), and rsl_rl's logs of it (`Logger.log`)."""
        first, start_it, total_it = self._span
        self.current_learning_iteration = start_it + run.runner.iteration - first - 1
        self.logger.log(record, self.current_learning_iteration, start_it, total_it)

    def save_due(self, run: Run, last: bool) -> Path | None:
        """rsl_rl's schedule (`Saver`): `model_<it>.pt` every `save_interval` iterations and at the end."""
        it = self.current_learning_iteration
        if self.logger.writer is None or not (it % self.save_interval == 0 or last):
            return run.last_saved
        path = os.path.join(cast(str, self.logger.log_dir), f"model_{it}.pt")
        self.save(path)
        run.last_saved = Path(path)
        return run.last_saved

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
        `infos`. One line naming the file and the field when it is not such a checkpoint or does not fit this policy
        (a tensor's dtype, shape or values, the optimizer's state, the learning rate, `iter`), and then nothing of
        it has been loaded. The tensors are read on the CPU and copied into the policy and optimizer on the runner's
        device, whatever `map_location` says (rsl_rl's argument, kept for its callers)."""
        loaded = checkpoint.load_plain(path)
        if not isinstance(loaded, dict) or ("actor_state_dict" not in loaded and "student_state_dict" not in loaded):
            raise UserError(f"checkpoint {path}: not an rsl_rl 5 checkpoint (no actor_state_dict nor "
                            "student_state_dict)")
        self.alg.source = f"checkpoint {path}"
        if self.alg.load(loaded, load_cfg, strict):  # checked every part it reads before copying any
            self.current_learning_iteration = iteration_of(loaded, self.alg.source)
            self.run.runner.continue_from(self.current_learning_iteration)  # syncfree's metrics continue from it
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
        return PPOTrainConfig(task="rsl_rl", policy=teacher), {
            "action_spec": (env.action_spec.kind, env.action_spec.size), "obs_dims": {"policy": width, "critic": width},
            "policy": policy.state_dict()}
    return read
