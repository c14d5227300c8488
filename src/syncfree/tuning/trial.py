"""One trial of a study: a normal training run (`syncfree.learn`) of the base config with the trial's settings, in
its own run folder, reporting the deterministic evaluation return a few times on the way (pruning stops it there,
saved) and scored by that return at the end of its budget."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncfree.api import learn
from syncfree.config import TrainConfig, with_values
from syncfree.core.imports import UserNames
from syncfree.tasks import validated
from syncfree.train.evaluate import evaluate_task
from syncfree.tuning.space import Parameter

log = logging.getLogger("syncfree")

NO_END = 10**9
"""The iterations of a trial that a budget of seconds ends."""


@dataclass
class StudySettings:
    """A study as every worker runs it (sent to worker processes as is)."""

    base: TrainConfig
    """The config every trial starts from (the task's preset and the command's options)."""
    parameters: list[Parameter]
    trials: int
    workers: int
    name: str
    storage: str
    folder: Path
    objectives: tuple[str, ...] = ("return",)
    budget_steps: int = 0
    budget_seconds: float = 0.0
    pruner: str = "median"
    sampler: str = "tpe"
    sampler_seed: int | None = None
    """Trial n's draws seeded `sampler_seed + n` (`study.TrialSeeded`); None: unseeded."""
    reports: int = 4
    """Intermediate evaluations a trial reports for pruning, at even fractions of its budget."""
    threads: int = 0
    """torch threads per trial; 0: each run chooses as `syncfree train` does."""
    heartbeat: int = 0
    """Seconds between a running trial's heartbeats in the database; 0: none (a trial whose worker dies stays
    running)."""
    grace: int = 0
    """Seconds without a heartbeat after which a running trial is failed and retried (by any worker of the study)."""
    names: UserNames | None = None
    """The code the command named (a `module:factory` task), allowed in the workers too."""
    pruner_object: Any = field(default=None, repr=False)
    """A pruner given as an object (the Python API), used in place of `pruner`'s."""
    sampler_object: Any = field(default=None, repr=False)


def steps_per_iteration(cfg: TrainConfig) -> int:
    return cfg.rollout_steps() * cfg.env.rows()


def trial_config(settings: StudySettings, values: dict[str, Any], folder: Path | None = None,
                 threads: int | None = None) -> TrainConfig:
    """The base config with a trial's `values`, run for the budget: its iterations cover `budget_steps` env steps
    (a budget of seconds: until stopped), saving at the end only, without a progress report."""
    base = settings.base
    cfg = with_values(base, values)
    if settings.budget_seconds:
        cfg.iterations = NO_END
    else:
        cfg.iterations = max(1, math.ceil(settings.budget_steps / steps_per_iteration(cfg)))
    cfg.save_every = cfg.iterations
    cfg.threads = settings.threads if threads is None else threads
    if folder is not None:
        cfg.log.dir, cfg.log.run_name, cfg.log.progress = str(folder.parent), folder.name, False
    return validated(cfg)


class Pruned(Exception):
    """The pruner stopped the trial at a report."""

    def __init__(self, report: int, value: float) -> None:
        super().__init__(f"pruned at report {report}")
        self.report, self.value = report, value


class Reporter:
    """After each iteration: the reports due at this point of the budget (the evaluation return, which the pruner
    may stop the trial on), and at the budget's end the final evaluation, the trial's score."""

    def __init__(self, trial: Any, settings: StudySettings, prune: bool) -> None:
        self.trial, self.settings, self.prune = trial, settings, prune
        self.started = time.perf_counter()
        self.reported = 0
        self.pruned: Pruned | None = None
        self.final: float | None = None

    def fraction(self, run: Any) -> float:
        """How much of the budget the run has spent."""
        if self.settings.budget_seconds:
            return (time.perf_counter() - self.started) / self.settings.budget_seconds
        return float(run.runner.env_steps) / self.settings.budget_steps

    def __call__(self, run: Any, record: dict[str, Any]) -> bool:
        done = self.fraction(run) >= 1 or run.runner.iteration >= run.cfg.iterations
        if done:
            self.final = float(run.callbacks.evaluate(run.runner).mean())
            return True
        due = min(int(self.fraction(run) * self.settings.reports), self.settings.reports - 1)
        if self.prune and due > self.reported:
            self.reported = due
            value = float(run.callbacks.evaluate(run.runner).mean())
            self.trial.report(value, due)
            if self.trial.should_prune():
                self.pruned = Pruned(due, value)
                return True
        return False

    __name__ = "the study's reporter"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """A trial's run says only its warnings (the study says one line per trial)."""
    logger = logging.getLogger("syncfree")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_trial(trial: Any, settings: StudySettings, prune: bool) -> tuple[float, ...]:
    """Train the trial's config in `folder/trial-NNNN`; its objectives (the final evaluation return, and the
    training's wall time in seconds where the study asks for it). `Pruned` when the pruner stopped it."""
    values = {p.key: p.suggest(trial) for p in settings.parameters}
    folder = settings.folder / f"trial-{trial.number:04d}"
    trial.set_user_attr("run_dir", str(folder))
    cfg = trial_config(settings, values, folder)
    reporter = Reporter(trial, settings, prune)
    started = time.perf_counter()
    with quiet():
        result = learn(cfg.task, config=cfg, run_dir=folder, on_iteration=[reporter])
    seconds = time.perf_counter() - started
    trial.set_user_attr("seconds", seconds)
    trial.set_user_attr("iterations", result.run.runner.iteration)
    if reporter.pruned is not None:
        raise reporter.pruned
    if reporter.final is None:  # the base config's own callbacks stopped it early (`callbacks.stop_when`)
        run = result.run
        reporter.final = float(evaluate_task(run.cfg, result.policy, run.cfg.callbacks.eval_envs, run.runner.device,
                                             run.cfg.callbacks.eval_seed).mean())
    scores = {"return": reporter.final, "seconds": seconds}
    return tuple(scores[name] for name in settings.objectives)
