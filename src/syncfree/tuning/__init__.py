"""`syncfree tune` and `syncfree.tune(...)`: a hyperparameter search on Optuna. Each trial is a normal training run
of the task's config with the trial's settings (`trial`), the study lives in a database (`study`: a SQLite file in
the study folder, or any URL Optuna takes), the space is plain data (`space`), the results are a table, `best.yaml`
and plots (`results`)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from syncfree.algo import algorithm_for
from syncfree.config import TrainConfig
from syncfree.core.imports import active
from syncfree.errors import UserError
from syncfree.outputs import check_output_dir
from syncfree.tuning import results
from syncfree.tuning.space import Parameter, default_space, describe, parse_space, read_space
from syncfree.tuning.study import (
    GRACE,
    HEARTBEAT,
    OBJECTIVES,
    PRUNERS,
    SAMPLERS,
    StorageLost,
    check_settings,
    cores,
    counted,
    default_storage,
    hidden,
    open_study,
    parse_objectives,
    run_workers,
)
from syncfree.tuning.trial import StudySettings, steps_per_iteration

log = logging.getLogger("syncfree")

__all__ = ["TuneResult", "parse_arguments", "run_study", "tune"]


@dataclass
class TuneResult:
    """What `syncfree.tune` returns."""

    study: Any
    """The Optuna study (`study.trials`, `study.best_trial`; with two objectives `study.best_trials`)."""
    folder: Path
    """The study folder: each trial's run folder (`trial-NNNN`), `best.yaml`, the plots, the SQLite file."""
    table: str
    """The best trials as a text table (with two objectives: the Pareto front)."""
    best_config: Path | None = None
    """`best.yaml`, the best trial's config (`syncfree train --config best.yaml`); None while no trial finished."""
    plots: list[Path] = field(default_factory=list)


def study_name(base: TrainConfig) -> str:
    return f"tune-{re.sub(r'[^A-Za-z0-9_.-]', '-', base.task)}-{base.algorithm}"


def run_study(base: TrainConfig, space: str | Path | Mapping[str, Any] | None = None, trials: int = 20,
              workers: int = 1, study: str | None = None, storage: str | None = None, budget_steps: int = 0,
              budget_seconds: float = 0.0, objective: str = "return", pruner: Any = None, sampler: Any = "tpe",
              reports: int = 4, folder: str | Path = "runs", heartbeat: int = HEARTBEAT,
              grace: int = GRACE, sampler_seed: int | None = None) -> TuneResult:
    """The study of `base` (a validated config), as `syncfree tune` and `syncfree.tune` run it."""
    objectives = parse_objectives(objective)
    if budget_steps and budget_seconds:
        raise UserError("tune: give one budget, --budget-steps or --budget-seconds")
    if not budget_steps and not budget_seconds:  # the preset's own budget
        budget_steps = base.iterations * steps_per_iteration(base)
    name = study or study_name(base)
    if not name or "/" in name or name in (".", ".."):
        raise UserError(f"tune: --study {name!r} is invalid; allowed: a name usable as a folder name")
    study_folder = check_output_dir(Path(folder) / name, "tune: --dir")
    if pruner is None:
        pruner = "median" if len(objectives) == 1 else "none"
    threads = base.threads or (max(1, cores() // workers) if workers > 1 else 0)
    settings = StudySettings(
        base=base, parameters=[], trials=trials, workers=workers, name=name,
        storage=storage or default_storage(study_folder), folder=study_folder, objectives=objectives,
        budget_steps=int(budget_steps), budget_seconds=float(budget_seconds),
        pruner=pruner if isinstance(pruner, str) else "given", sampler=sampler if isinstance(sampler, str) else "tpe",
        reports=reports, threads=threads, heartbeat=int(heartbeat), grace=int(grace), names=active(),
        pruner_object=None if isinstance(pruner, str) else pruner,
        sampler_object=None if isinstance(sampler, str) else sampler, sampler_seed=sampler_seed)
    check_settings(settings)
    parameters: list[Parameter]
    if space is None:
        parameters = default_space(base)
    elif isinstance(space, Mapping):
        parameters = parse_space(space, base, "space")
    else:
        parameters = read_space(str(space), base)
    settings.parameters = parameters
    if storage is None:  # the SQLite file goes in the study folder
        study_folder.mkdir(parents=True, exist_ok=True)
    opened = open_study(settings, create=True)
    study_folder.mkdir(parents=True, exist_ok=True)
    budget = (f"{budget_seconds:g} s" if budget_seconds else f"{settings.budget_steps:,} env steps")
    per = f"{threads} thread{'s' if threads > 1 else ''}" if threads else "threads as syncfree train chooses"
    goals = ", ".join(f"{name} ({OBJECTIVES[name]})" for name in objectives)
    log.info("tune: study %s in %s: %d trials (%d there already) of %s by %s, %s each, on %d worker%s x %s (%d "
             "cores); objective %s; %s sampler, %s pruner (%d reports a trial) -> %s", name,
             hidden(settings.storage), trials, counted(opened), base.task, algorithm_for(base).label, budget, workers,
             "s" if workers > 1 else "", per, cores(), goals,
             type(settings.sampler_object).__name__ if settings.sampler_object is not None else settings.sampler
             + (f" (seed {sampler_seed} + trial number)" if sampler_seed is not None else ""),
             pruner_label(settings), reports, study_folder)
    if settings.heartbeat:
        log.info("tune: heartbeat every %d s; a trial silent for %d s (its worker stopped) is failed and retried",
                 settings.heartbeat, settings.grace)
    log.info("tune: searching %s", describe(parameters))
    run_workers(settings)
    try:
        finished = open_study(settings)
    except UserError as e:  # it opened before the trials ran
        raise StorageLost(f"{e}; it was lost while the study ran: rerun the command once it is back to go on") from None
    best = results.write_best(finished, settings)
    plots = results.write_plots(finished, study_folder, objectives)
    for path in [*([best] if best else []), *plots]:
        log.info("tune: wrote %s", path)
    return TuneResult(finished, study_folder, results.table(finished, objectives), best, plots)


def pruner_label(settings: StudySettings) -> str:
    if settings.pruner_object is not None:
        return type(settings.pruner_object).__name__
    return "no" if settings.pruner == "none" else settings.pruner


def tune(task: str = "cartpole", *, trials: int = 20, workers: int = 1,
         space: str | Path | Mapping[str, Any] | None = None, study: str | None = None, storage: str | None = None,
         budget_steps: int = 0, budget_seconds: float = 0.0, objective: str = "return", pruner: Any = None,
         sampler: Any = "tpe", reports: int = 4, folder: str | Path = "runs", heartbeat: int = HEARTBEAT,
         grace: int = GRACE, sampler_seed: int | None = None, config: TrainConfig | None = None,
         **overrides: Any) -> TuneResult:
    """Search a task's settings with Optuna, as `syncfree tune` does: `trials` training runs of the task's preset (or
    `config`, changed by `overrides` as `syncfree.learn` takes them), each with settings drawn from `space` (a YAML
    file or a dict `{dotted key: {type: float|int|categorical, low, high, log, step, choices}}`; None: the
    algorithm's default space, docs/tune.md), scored by the deterministic evaluation return at the end of a budget
    of `budget_steps` env steps or `budget_seconds` seconds (neither: the preset's own env steps).

    The study is named `study` (default `tune-<task>-<algorithm>`) and kept in `storage` (any database URL Optuna
    takes; default a SQLite file in the study folder `folder/<study>/`): calling again goes on with it, the trials
    there counting toward `trials`. `workers` processes run trials side by side, the cores split between them.
    `objective="return,seconds"`: the Pareto front of return against training time. `pruner`: `median`, `halving`,
    `hyperband`, `none` (default `median` with one objective) or an Optuna pruner; `sampler`: `tpe`, `cmaes`,
    `random`, `nsga2` or an Optuna sampler; `sampler_seed`: trial n's draws seeded `sampler_seed + n`, whichever
    worker runs it (two studies of one seed and the `random` sampler try the same settings trial by trial; default
    unseeded). A pruned trial stops after the report it was pruned at (`reports` a
    trial, at even fractions of its budget), its run folder kept.

    A running trial writes a heartbeat to the database every `heartbeat` seconds (0: none); one silent for `grace`
    seconds (its worker killed, its machine gone) is marked failed by another worker and retried with its settings
    (up to 3 times), in a run folder of its own.
    """
    from syncfree.api import configured
    from syncfree.train.run import visible_logs

    base = configured(task, config, overrides)
    with visible_logs():
        result = run_study(base, space, trials, workers, study, storage, budget_steps, budget_seconds, objective,
                           pruner, sampler, reports, folder, heartbeat, grace, sampler_seed)
        log.info("tune: best trials of %s:\n%s", result.study.study_name, result.table)
    return result


DESCRIPTION = ("Search a task's settings with Optuna: each trial trains the task's preset (with any train option "
               "given here, e.g. --env.num_envs 64) with settings drawn from the search space, scored by the "
               "deterministic evaluation return at the end of its budget. Rerunning the command goes on with the "
               "study. See docs/tune.md.")


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are a `UserError` (one line, exit code 2) instead of usage and exit."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"tune: {message}")


TRAIN_TOP_LEVEL = {f.name for f in dataclasses.fields(TrainConfig)} | {"config", "help", "trust"}
"""The options of `syncfree train` outside any section (a near tune option is not a typo of theirs)."""


def parse_arguments(argv: Sequence[str]) -> tuple[argparse.Namespace, TrainConfig]:
    """`syncfree tune`'s options, and the base config the rest of the command line makes (as `syncfree train`'s)."""
    from syncfree.train.arguments import parse_train_config

    parser = OneLineParser(prog="syncfree tune", description=DESCRIPTION, allow_abbrev=False,
                                     epilog="Any other option is a training option (syncfree train --task T --help "
                                     "lists them); it sets the base config every trial starts from.")
    parser.add_argument("--task", default="cartpole", help="the task (default cartpole; see syncfree tasks)")
    parser.add_argument("--algorithm", help="the algorithm (default: the task's)")
    parser.add_argument("--trials", type=int, default=20, help="trials the study holds when done, those of earlier "
                        "runs of the command and of other machines counted (default 20)")
    parser.add_argument("--workers", type=int, default=1, help="trial processes on this machine, the cores split "
                        "between them (default 1)")
    parser.add_argument("--space", help="search space YAML: {dotted.key: {type: float|int|categorical, low, high, "
                        "log, step, choices}} (default: the algorithm's, see docs/tune.md)")
    parser.add_argument("--study", help="study name (default tune-<task>-<algorithm>); its folder is <dir>/<study>")
    parser.add_argument("--storage", help="Optuna storage URL, e.g. postgresql://user@host/db, which every machine "
                        "of the study names (default: sqlite in the study folder)")
    parser.add_argument("--dir", default="runs", help="where the study folder goes (default runs)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget-steps", type=int, default=0, help="env steps each trial trains (default: the "
                        "preset's iterations x steps)")
    budget.add_argument("--budget-seconds", type=float, default=0.0, help="seconds each trial trains")
    parser.add_argument("--objective", default="return", help="return (the final evaluation return) or "
                        "return,seconds (the Pareto front of return against training time)")
    parser.add_argument("--pruner", help=f"{', '.join(PRUNERS)} (default median; none with two objectives)")
    parser.add_argument("--sampler", default="tpe", help=f"{', '.join(SAMPLERS)} (default tpe)")
    parser.add_argument("--sampler-seed", type=int, help="seed trial n's draws with this + n, whichever worker "
                        "runs it (default: unseeded)")
    parser.add_argument("--heartbeat", type=int, default=HEARTBEAT, help="seconds between a running trial's "
                        f"heartbeats in the database; 0: none (default {HEARTBEAT})")
    parser.add_argument("--grace", type=int, default=GRACE, help="seconds without a heartbeat after which another "
                        f"worker marks a trial failed and retries it (default {GRACE})")
    parser.add_argument("--reports", type=int, default=4, help="evaluations a trial reports for pruning, at even "
                        "fractions of its budget (default 4)")
    args, rest = parser.parse_known_args(list(argv))
    own = [option for action in parser._actions for option in action.option_strings if option.startswith("--")]
    for arg in rest:
        name = arg.split("=", 1)[0]
        near = difflib.get_close_matches(name, own, n=1, cutoff=0.8) if name.startswith("--") and "." not in name \
            else []
        if near and name.replace("-", "_").removeprefix("__") not in TRAIN_TOP_LEVEL:
            raise UserError(f"tune: unknown option {name}; did you mean {near[0]}?")
    train_argv = ["--task", args.task, *(["--algorithm", args.algorithm] if args.algorithm else []), *rest]
    return args, parse_train_config(train_argv)


def main(argv: Sequence[str]) -> int:
    """`syncfree tune`."""
    args, base = parse_arguments(argv)
    result = run_study(base, args.space, args.trials, args.workers, args.study, args.storage, args.budget_steps,
                       args.budget_seconds, args.objective, args.pruner, args.sampler, args.reports, args.dir,
                       args.heartbeat, args.grace, args.sampler_seed)
    print(f"best trials of study {result.study.study_name}:\n{result.table}")
    return 0
