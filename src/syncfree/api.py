"""Training from Python: `syncfree.learn(...)`, the command line's `syncfree train` as a function (the name
`syncfree.train` is the package of the training loop)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from syncfree.config import TrainConfig, from_dict, merge, sections_of, to_dict
from syncfree.core.imports import UserNames, user_names
from syncfree.envs import VecEnv
from syncfree.errors import UserError
from syncfree.tasks import choose_algorithm, default_config, preset, validated, with_algorithm
from syncfree.tasks.configs import check_references, named_in_call
from syncfree.train.callbacks import IterationCallback
from syncfree.train.evaluate import LoadedPolicy, evaluate_task, load_policy
from syncfree.train.run import Run, visible_logs
from syncfree.train.run import start as start_run
from syncfree.train.session import check_resumed_algorithm, resume_config, run_dir_of, saved_line

if TYPE_CHECKING:
    import gymnasium

log = logging.getLogger("syncfree")

__all__ = ["LoadedPolicy", "TrainResult", "evaluate", "learn", "load", "load_policy"]


@dataclass
class TrainResult:
    """What `syncfree.learn` returns."""

    policy: nn.Module
    """The trained policy (a feed-forward one acts with `policy.act_deterministic(policy.actor_input(obs))`)."""
    run_dir: Path | None
    """Where metrics, `config.yaml` and checkpoints went (None with `run_dir=False`)."""
    record: dict[str, Any]
    """The last iteration's metrics (those of `metrics.jsonl`)."""
    run: Run
    """The run, closed: its config (`run.cfg`), its loop (`run.runner`: the algorithm, the iteration), its
    callbacks' state (`run.callbacks.best`)."""


def merged(start: TrainConfig, overrides: dict[str, Any]) -> dict[str, Any]:
    """`start` as a dict with `overrides` (keywords, section dicts or dotted keys) merged in."""
    base = to_dict(start)
    for key, value in overrides.items():
        merge(base, key.split("."), value)
    return base


def own_env(task: object, where: str = "learn") -> VecEnv | None:
    """`task` when it is an env of the user's: a `VecEnv`, or a Gymnasium vector env (wrapped in
    `GymnasiumVecEnv`); None for a task name. Anything else is a `UserError` saying what is accepted."""
    if isinstance(task, (str, VecEnv)):
        return task if isinstance(task, VecEnv) else None
    gymnasium = sys.modules.get("gymnasium")  # imported already where `task` is one of its envs
    if gymnasium is not None and isinstance(task, gymnasium.vector.VectorEnv):
        from syncfree.envs.adapters.gymnasium import GymnasiumVecEnv
        return GymnasiumVecEnv(task)
    what = type(task).__name__
    if gymnasium is not None and isinstance(task, gymnasium.Env):
        raise UserError(f"{where}: {type(task.unwrapped).__name__} is one Gymnasium env; pass a vector of them, "
                        "syncfree.envs.adapters.gymnasium.make_gymnasium(id, num_envs), or the task 'gym:<id>'")
    raise UserError(f"{where}: {what} is not an env; allowed: a task name, a syncfree VecEnv or a Gymnasium "
                    "vector env")


def configured(task: str | VecEnv, config: TrainConfig | None, overrides: dict[str, Any],
               trust: bool = False) -> TrainConfig:
    """The validated config `learn(task, config=config, **overrides)` trains (see `learn`)."""
    overrides = dict(overrides)
    resume = str(overrides.pop("resume", "") or (config.resume if config is not None else ""))
    if resume:
        start = resume_config(resume)
        check_resumed_algorithm(resume, start.algorithm, overrides.get("algorithm"))
    elif config is not None:
        start = config
    elif isinstance(task, str):
        start = preset(task)
    else:
        start = default_config(type(task).__name__, None, device=str(task.device))
        start.env.num_envs = task.num_envs
    base = merged(start, overrides)
    policy, distill = base.get("policy"), base.get("distill")
    algorithm = choose_algorithm(start.algorithm, overrides.get("algorithm"),
                                 policy.get("kind") if isinstance(policy, dict) else None,
                                 distill.get("teacher") if isinstance(distill, dict) else None)
    if algorithm != start.algorithm and not resume:  # another algorithm's config type: the task's preset for it,
        # or the settings shared with the config given
        start = preset(task, algorithm=algorithm) if config is None and isinstance(task, str) else \
            with_algorithm(start, algorithm)
        base = merged(start, overrides)
    cfg = validated(from_dict(type(start), base, sections=sections_of(start)))
    cfg.resume = resume
    if resume:
        check_references(cfg, UserNames(named_in_call(task, overrides), trust, source=f"checkpoint {resume}"))
    return cfg


def learn(task: str | VecEnv | gymnasium.vector.VectorEnv = "cartpole", *, config: TrainConfig | None = None,
          run_dir: str | Path | bool = True, on_iteration: Sequence[IterationCallback] = (), trust: bool = False,
          **overrides: Any) -> TrainResult:
    """Train on a built-in task (its name, see `syncfree tasks`) or on your own env (any `VecEnv`), with the task's
    algorithm (PPO for your own env) or the one `algorithm=` names (`syncfree.algo.ALGORITHMS`). A Gymnasium vector env
    (`gymnasium.make_vec(id, n, vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})`) is your own env too,
    wrapped in `GymnasiumVecEnv`.

    The config starts from `config`, else the task's preset (your own env: the defaults, `num_envs` and `device`
    taken from the env, `task` its class name), and `overrides` change it: top-level fields as keywords
    (`iterations=50`, `algorithm="recurrent-ppo"`), sections as dicts (`ppo={"learning_rate": 3e-4}`), or dotted keys
    (`**{"ppo.learning_rate": 3e-4}`). A misspelt key is a `UserError` naming the nearest one.

    Metrics, `config.yaml` and checkpoints go to `runs/<task>-<time>/` (printed at start), or to `run_dir` if it is
    a path; `run_dir=False` writes nothing.

    `on_iteration`: functions `fn(run, record)` called after each iteration with its record (the metrics of
    `metrics.jsonl`, `eval_return` included on evaluation iterations); one that returns a true value stops training
    after that iteration, which is saved. Evaluation, the best checkpoint and stopping on a condition are settings
    too (`callbacks={"eval_every": 10, "save_best": "eval_return", "stop_when": "eval_return >= 450"}`).

    `resume=<checkpoint>` continues that run as `syncfree train --resume` does: the config is the checkpoint's
    (`config` and a task name are not read; pass your env again if the run trained on yours), `overrides` change
    it (`iterations=` is the total to reach), and the run writes a new run folder that starts with the metrics up to
    the checkpoint (`resume_in_place=True`: on in the checkpoint's folder), beside the checkpoint's run folder or,
    for a checkpoint kept alone, in the current folder's `runs/` (`log={"dir": ...}` chooses another). The
    checkpoint is data: the code its task or `symmetry.mirror` names (`module:name`) is imported only when this call
    names it too (`learn("my_envs:make", resume=...)`, `**{"symmetry.mirror": ...}`) or with `trust=True`.
    """
    env = own_env(task)
    cfg = configured(env if env is not None else cast(str, task), config, overrides, trust)
    folder = (run_dir_of(cfg) if run_dir is True else Path(run_dir)) if run_dir else None
    with visible_logs():
        run = start_run(cfg, folder, env=env, on_iteration=on_iteration)
        try:
            record = run.learn()
        except KeyboardInterrupt:
            run.close()
            log.info("aborted; %s", saved_line(run.last_saved, run.runner.iterations_run))
            raise
        except BaseException:  # the folder's lock released and the envs closed, whatever stopped the run
            run.close()
            raise
        run.close()
        if run.interrupted:  # stopped by a signal after an iteration it saved: the script stops too
            log.info("interrupted at iteration %d; %s", run.runner.iteration,
                     saved_line(run.last_saved, run.runner.iterations_run))
            raise KeyboardInterrupt
    run.runner.algorithm.keep_average_weights()
    return TrainResult(run.runner.policy, folder, record, run)


def load(checkpoint_path: str | Path, device: str | torch.device = "cpu", trust: bool = False) -> LoadedPolicy:
    """A checkpoint's policy, ready to act, with its config and iteration: `loaded.policy` (in evaluation mode),
    `loaded.cfg`, `loaded.make_env(num_envs, seed)` (fresh envs of the run's task), `loaded.evaluate(env)`. Bad
    input is one `UserError` line naming the file; the file is read as data (no code in it runs, and the code its
    task names, `module:factory` or `gym:<module>:<id>`, is imported by `make_env` only with `trust`)."""
    return load_policy(checkpoint_path, device, trust=trust)


def evaluate(policy: str | Path | LoadedPolicy, num_envs: int = 20, seed: int = 12345, sample: bool = False,
             env: VecEnv | gymnasium.vector.VectorEnv | None = None, trust: bool = False) -> np.ndarray:
    """The return of each env's first episode under a checkpoint's policy (a path, or what `load` returned), as
    `syncfree eval` plays it: the most likely actions, or with `sample` actions drawn from the policy (seeded with
    `seed`; torch's random state outside the call is left as it was). On `num_envs` fresh envs of the run's task,
    or on `env` (your own, for a run on it: a `VecEnv` or a Gymnasium vector env). A run on code its task names (`module:factory`, `gym:<module>:<id>`)
    is evaluated on `env`, or on fresh envs with `trust` (as `load` says)."""
    loaded = policy if isinstance(policy, LoadedPolicy) else load_policy(policy, trust=trust)
    if num_envs < 1:
        raise UserError(f"evaluate: num_envs={num_envs} is invalid; allowed: an integer >= 1")
    if env is None and loaded.task is None:
        raise UserError(f"evaluate: {loaded.path} was trained on an env of your own ({loaded.cfg.task}); pass it as "
                        "env= (no registered task makes its envs)")
    env = own_env(env, "evaluate") if env is not None else None
    if env is None:
        with user_names(loaded.names):
            return evaluate_task(loaded.cfg, loaded.policy, num_envs, loaded.device, seed, not sample, loaded)
    with torch.random.fork_rng(devices=[], enabled=sample):
        if sample:
            torch.manual_seed(seed)
        return loaded.evaluate(env, greedy=not sample)
