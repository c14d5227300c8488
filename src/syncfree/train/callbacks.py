"""Between iterations, outside the hot loop: evaluation on fresh envs, the best checkpoint, early stopping
(`callbacks.*`), and Python functions called with each record (`syncfree.learn(on_iteration=...)`)."""

from __future__ import annotations

import copy
import difflib
import logging
import operator
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from syncfree.config import TrainConfig
from syncfree.envs.api import VecEnv
from syncfree.errors import EVAL_MEMORY, UserError, allocating


class Runner(Protocol):
    """What an evaluation reads of `syncfree.train.runner.Runner`."""

    device: torch.device
    algorithm: Any
    policy: Any


class Run(Protocol):
    """What the callbacks read of `syncfree.train.run.Run`."""

    run_dir: Path | None

    @property
    def runner(self) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

log = logging.getLogger("syncfree")

IterationCallback = Callable[[Any, dict[str, Any]], Any]
"""`fn(run, record)` after each iteration (rank 0; `run`: the `syncfree.train.run.Run`); a true return stops training
after this iteration (saved)."""

COMPARE = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


class Callbacks:
    """The run's `callbacks` section and the API's functions, asked by the run after each iteration."""

    def __init__(self, cfg: TrainConfig, functions: Sequence[IterationCallback] = (),
                 make_env: Callable[[int, int], VecEnv] | None = None) -> None:
        self.cfg, self.functions = cfg.callbacks, list(functions)
        self.make_env = make_env
        """`make_env(num_envs, seed)`: fresh envs of the task; None on a user's env passed in (no evaluation)."""
        self.env: VecEnv | None = None
        self.env_start: dict[str, Any] | None = None
        """The evaluation envs' state when made (a saveable env's), restored before each evaluation."""
        self.best: float | None = None
        """The highest `save_best` metric seen (carried by checkpoints)."""
        self.since_best = 0
        """Records reporting the metric since its last new high."""
        self.metrics_checked = False
        """Whether `save_best` and `stop_when` were found among the metrics the records hold (at the first)."""
        if self.cfg.eval_every and make_env is None:
            raise UserError(f"config: callbacks.eval_every={self.cfg.eval_every} needs a task that makes its envs "
                            "(a registered task or --task module:factory), not an env passed in")

    def evaluations(self, runner: Runner, iteration: int) -> dict[str, float]:
        """`eval_return` and `eval_return_std` when an evaluation is due at `iteration`, else nothing. torch's
        random state is left as it was, so training draws what it would have drawn."""
        every = self.cfg.eval_every
        if not every or iteration % every or self.make_env is None:
            return {}
        returns = self.evaluate(runner)
        return {"eval_return": float(returns.mean()), "eval_return_std": float(returns.std())}

    def evaluate(self, runner: Runner) -> np.ndarray:
        """The first-episode return of each of `eval_envs` envs (seeded `eval_seed`, made once) under the policy's
        most likely actions, torch's random state left as it was (a task that makes its envs). Each evaluation
        starts from the envs' state when made (saveable envs), so each plays the same episodes: evaluations compare
        policies, not draws, and a score does not depend on how many evaluations came before it."""
        if self.make_env is None:
            raise UserError("evaluation needs a task that makes its envs (a registered task or --task "
                            "module:factory), not an env passed in")
        cuda = [runner.device.index or 0] if runner.device.type == "cuda" else []
        with allocating(EVAL_MEMORY):
            if self.env is None:
                self.env = self.make_env(self.cfg.eval_envs, self.cfg.eval_seed)
                self.env_start = self.start_state(self.env)
            elif self.env_start is not None:
                self.env.load_state_dict(self.env_start)
            with torch.random.fork_rng(devices=cuda), runner.algorithm.average_weights():
                return np.asarray(runner.algorithm.evaluate(runner.policy, self.env, True), dtype=np.float64)

    @staticmethod
    def start_state(env: VecEnv) -> dict[str, Any] | None:
        """A copy of a saveable env's state, restored before each evaluation; None where it cannot be copied (the
        evaluations then go on from where the last one left the envs, and a line says so)."""
        if not env.saveable:
            return None
        try:
            return copy.deepcopy(env.state_dict())
        except Exception as e:  # a user's env whose state holds something that does not copy
            log.info("evaluation: %s's state could not be copied (%s: %s); each evaluation goes on from the last "
                     "one's episodes", type(env).__name__, type(e).__name__, str(e).splitlines()[0][:120] if str(e)
                     else "")
            return None

    def after_iteration(self, run: Run, record: dict[str, Any]) -> str | None:
        """Write `best.pt` on a new high, run the functions; the reason to stop now, or None."""
        reason = None
        metric = self.cfg.save_best
        if metric and metric in record and np.isfinite(record[metric]):
            if self.best is None or record[metric] > self.best:
                self.best, self.since_best = float(record[metric]), 0
                self.save_best(run)
            else:
                self.since_best += 1
                if self.cfg.patience and self.since_best >= self.cfg.patience:
                    reason = (f"{metric} has not passed its best ({self.best:.4g}) in {self.since_best} records "
                              f"(callbacks.patience={self.cfg.patience})")
        condition = self.cfg.stop_condition()
        if condition is not None:
            name, op, value = condition
            if name in record and COMPARE[op](record[name], value):
                reason = reason or f"{name}={record[name]:.4g} meets callbacks.stop_when '{self.cfg.stop_when}'"
        for fn in self.functions:
            if fn(run, record):
                reason = reason or f"{getattr(fn, '__name__', 'a callback')} asked to stop"
        return reason

    def check_metrics(self, names: set[str]) -> None:
        """One line naming the nearest metric when `save_best` or `stop_when` names one that no record will hold
        (`names`: what the records hold, `Runner.metric_names`; the evaluation's with `eval_every`). Checked once, at
        the first record, before it is written."""
        if self.metrics_checked:
            return
        known = names | ({"eval_return", "eval_return_std"} if self.cfg.eval_every else set())
        condition = self.cfg.stop_condition()
        for key, metric in (("save_best", self.cfg.save_best), ("stop_when", condition[0] if condition else "")):
            if metric and metric not in known:
                near = difflib.get_close_matches(metric, sorted(known), n=1)
                hint = f"did you mean {near[0]}?" if near else f"the records hold {', '.join(sorted(known))}"
                raise UserError(f"config: callbacks.{key}={getattr(self.cfg, key)!r} names a metric no record of "
                                f"this run holds; {hint}")
        self.metrics_checked = True

    def save_best(self, run: Run) -> Path | None:
        """The current state as `best.pt` (atomically), where the run has a folder."""
        if run.run_dir is None:
            return None
        from syncfree.train import checkpoint

        try:
            return checkpoint.save_atomic(run.state_dict(), run.run_dir / "best.pt")
        except OSError as e:
            log.warning("iteration %d: best.pt not saved: %s; training goes on", run.runner.iteration,
                        e.strerror or e)
            return None

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "since_best": self.since_best}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if isinstance(state, dict):
            best = state.get("best")
            self.best = float(best) if isinstance(best, (int, float)) else None
            since = state.get("since_best")
            self.since_best = since if isinstance(since, int) and since >= 0 else 0

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
