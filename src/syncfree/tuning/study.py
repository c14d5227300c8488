"""A study on Optuna: its storage (a SQLite file in the study folder, or any database URL Optuna takes, which every
machine running the same study joins), the sampler and pruner, and the workers: each asks the study for a trial,
trains it (`syncfree.tuning.trial`) and tells the study its score, until the study holds `trials` trials."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import multiprocessing
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from syncfree.core.imports import user_names
from syncfree.errors import NonFiniteError, UserError, out_of_memory
from syncfree.tuning.trial import Pruned, StudySettings, run_trial

log = logging.getLogger("syncfree")

OBJECTIVES = {"return": "maximize", "seconds": "minimize"}
"""What a trial can be scored by, and which way is better: its final evaluation return, its training's wall time."""
SAMPLERS = ("tpe", "cmaes", "random", "nsga2")
PRUNERS = ("median", "halving", "hyperband", "none")


def optuna_module() -> Any:
    """Optuna, quiet (the study says its own lines), or one line saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise UserError("tune: needs Optuna; pip install 'syncfree[tune]' (or pip install optuna)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def parse_objectives(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(","))
    if names not in (("return",), ("return", "seconds")):
        raise UserError(f"tune: --objective {text!r} is invalid; allowed: return, return,seconds")
    return names


def hidden(url: str) -> str:
    """A storage URL as it may be printed: its password replaced by `***`."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a database URL: printed as given, without what follows a `:` before an `@`
        head, at, tail = url.rpartition("@")
        return f"{head.split(':')[0]}:***@{tail}" if at else url


def default_storage(folder: Path) -> str:
    return f"sqlite:///{(folder / 'study.db').resolve()}"


def open_storage(url: str) -> Any:
    """Optuna's storage at `url`; a database that cannot be reached (or a URL that names none) is one line."""
    optuna = optuna_module()
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:"):  # several workers write one file: wait for each other's writes
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    try:
        return optuna.storages.RDBStorage(url, **kwargs)
    except Exception as e:
        text = " ".join(str(e).split()) or type(e).__name__
        text = text.split(" (Background on this error")[0].split(" [SQL:")[0]
        raise UserError(f"tune: cannot open the study's storage {hidden(url)} ({type(e).__name__}: "
                        f"{text[:200]})") from None


def make_sampler(settings: StudySettings) -> Any:
    optuna = optuna_module()
    if settings.sampler_object is not None:
        return settings.sampler_object
    name = settings.sampler
    if name == "cmaes":
        if len(settings.objectives) > 1:
            raise UserError("tune: --sampler cmaes takes one objective; use tpe or nsga2 with --objective return,seconds")
        if importlib.util.find_spec("cmaes") is None:
            raise UserError("tune: --sampler cmaes needs the cmaes package (pip install cmaes)")
        return optuna.samplers.CmaEsSampler(warn_independent_sampling=False)
    if name == "random":
        return optuna.samplers.RandomSampler()
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler()
    return optuna.samplers.TPESampler()


def make_pruner(settings: StudySettings) -> Any:
    optuna = optuna_module()
    if settings.pruner_object is not None:
        return settings.pruner_object
    name = settings.pruner
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=max(1, min(5, settings.trials // 4)))
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=settings.reports)
    return optuna.pruners.NopPruner()


def check_settings(settings: StudySettings) -> None:
    """Choices that cannot work together, each one line."""
    if settings.pruner == "given" and len(settings.objectives) > 1:
        raise UserError("tune: a pruner needs one objective (Optuna prunes no study of several)")
    if settings.sampler not in SAMPLERS:
        raise UserError(f"tune: --sampler {settings.sampler!r} is invalid; allowed: {', '.join(SAMPLERS)}")
    if settings.pruner not in (*PRUNERS, "given"):
        raise UserError(f"tune: --pruner {settings.pruner!r} is invalid; allowed: {', '.join(PRUNERS)}")
    if len(settings.objectives) > 1 and settings.pruner != "none":
        raise UserError(f"tune: --pruner {settings.pruner} needs one objective (Optuna prunes no study of several); "
                        "use --pruner none with --objective return,seconds")
    for name, value in (("--trials", settings.trials), ("--workers", settings.workers),
                        ("--reports", settings.reports)):
        if value < 1:
            raise UserError(f"tune: {name} {value} is invalid; allowed: an integer >= 1")
    if settings.budget_steps < 0 or settings.budget_seconds < 0:
        raise UserError("tune: a budget is a number > 0")


def open_study(settings: StudySettings, create: bool = False) -> Any:
    """The study in its storage (made by the first command that runs it: `create`); one line when the study there
    was started for another task, algorithm or objective."""
    optuna = optuna_module()
    storage = open_storage(settings.storage)
    directions = [OBJECTIVES[name] for name in settings.objectives]
    try:
        if create:
            study = optuna.create_study(study_name=settings.name, storage=storage, directions=directions,
                                        sampler=make_sampler(settings), pruner=make_pruner(settings),
                                        load_if_exists=True)
        else:
            study = optuna.load_study(study_name=settings.name, storage=storage, sampler=make_sampler(settings),
                                      pruner=make_pruner(settings))
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"tune: cannot open study {settings.name!r} in {hidden(settings.storage)} "
                        f"({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    if create:
        attrs = study.user_attrs
        ours = {"task": settings.base.task, "algorithm": settings.base.algorithm,
                "objectives": ",".join(settings.objectives)}
        if not attrs:
            for key, value in ours.items():
                study.set_user_attr(key, value)
        else:
            for key, value in ours.items():
                if attrs.get(key, value) != value:
                    raise UserError(f"tune: study {settings.name!r} in {hidden(settings.storage)} was started with "
                                    f"{key} {attrs[key]}, not {value}; name another --study")
    return study


COUNTED = ("COMPLETE", "PRUNED", "FAIL", "RUNNING")
"""The trials that count toward a study's `trials`: finished, failed, and those running now (on any machine)."""


def counted(study: Any) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=tuple(TrialState[name] for name in COUNTED)))


def values_line(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
                     for key, value in values.items())


def work(settings: StudySettings, worker: int = 0) -> None:
    """One worker: trials until the study holds `trials` (those of earlier runs of the command and of other
    machines count). A trial whose settings cannot train (an invalid combination, more memory than there is) fails
    with its line, one that diverges counts as pruned; the study goes on."""
    from optuna.trial import TrialState

    study = open_study(settings)
    prune = len(settings.objectives) == 1 and not isinstance(study.pruner, optuna_module().pruners.NopPruner)
    with user_names(settings.names):
        stopped = False
        while not stopped and counted(study) < settings.trials:
            trial = study.ask()
            who = f"trial {trial.number}" + (f" (worker {worker})" if settings.workers > 1 else "")
            try:
                values = run_trial(trial, settings, prune)
            except Pruned as e:
                stopped = not tell(study, trial, state=TrialState.PRUNED)
                log.info("tune: %s pruned at report %d of %d (return %.4g); %s; run kept in %s", who, e.report,
                         settings.reports, e.value, values_line(trial.params), trial.user_attrs["run_dir"])
                continue
            except NonFiniteError as e:  # settings that diverge score as badly as those pruned (RL Zoo's choice)
                trial.set_user_attr("error", str(e))
                stopped = not tell(study, trial, state=TrialState.PRUNED)
                log.warning("tune: %s diverged, counted as pruned: %s; %s", who, e, values_line(trial.params))
                continue
            except (UserError, MemoryError, RuntimeError) as e:  # settings that cannot train here
                message = str(e) if isinstance(e, UserError) else out_of_memory(e)
                if message is None:
                    study.tell(trial, state=TrialState.FAIL)
                    raise
                trial.set_user_attr("error", message)
                stopped = not tell(study, trial, state=TrialState.FAIL)
                log.warning("tune: %s failed: %s; %s", who, message, values_line(trial.params))
                continue
            except BaseException:  # interrupted, or a fault of the program: the trial is not left running
                study.tell(trial, state=TrialState.FAIL)
                raise
            stopped = not tell(study, trial, list(values))
            scores = ", ".join(f"{name} {value:.4g}" for name, value in zip(settings.objectives, values, strict=True))
            log.info("tune: %s: %s; %s", who, scores, values_line(trial.params))


def tell(study: Any, trial: Any, values: list[float] | None = None, state: Any = None) -> bool:
    """Tell the study a trial's end; False when the sampler asked the study to stop (a grid it has been through:
    Optuna stores the trial, then the sampler's `study.stop()` raises outside `optimize`)."""
    try:
        study.tell(trial, values, state=state)
    except RuntimeError as e:
        if "Study.stop" not in str(e):
            raise
        return False
    return True


def worker_main(settings: StudySettings, worker: int) -> None:
    """A worker process (spawned): its lines as the command's, a user's mistake one line and exit code 2."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        work(settings, worker)
    except UserError as e:
        for line in str(e).splitlines():
            print(f"syncfree: error: {line}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def run_workers(settings: StudySettings) -> None:
    """`workers` processes (one: this one) run the study's trials."""
    if settings.workers == 1:
        work(settings)
        return
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each: no torch state forked
    processes = [context.Process(target=worker_main, args=(settings, index), name=f"tune-worker-{index}")
                 for index in range(settings.workers)]
    with stopping(processes):
        for process in processes:
            process.start()
        for process in processes:
            process.join()
    failed = [f"worker {i} exit code {p.exitcode}" for i, p in enumerate(processes) if p.exitcode]
    if failed:
        raise UserError(f"tune: {', '.join(failed)}; the study keeps every trial they finished (rerun the command to "
                        "go on)")


@contextlib.contextmanager
def stopping(processes: list[Any]) -> Iterator[None]:
    """Workers still running when this process stops (an exception, Ctrl-C) are asked to stop and waited for."""
    try:
        yield
    except BaseException:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=30)
        raise
