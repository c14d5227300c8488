"""A study on Optuna: its storage (a SQLite file in the study folder, or any database URL Optuna takes, which every
machine running the same study joins), the sampler and pruner, and the workers: each asks the study for a trial,
trains it (`syncfree.tuning.trial`) and tells the study its score, until the study holds `trials` trials."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import multiprocessing
import multiprocessing.connection
import os
import socket
import sys
import threading
import time
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
    # the heartbeat outside `Study.optimize`: the workers beat and fail silent trials themselves (`work`)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used", category=UserWarning)
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


HEARTBEAT = 10
"""Seconds between a running trial's heartbeats (written to the study's database by a thread of its worker)."""
GRACE = 60
"""Seconds without a heartbeat after which another worker marks a running trial failed and queues its retry."""
RETRIES = 3
"""How many times a trial whose worker stopped is retried (a trial that kills its worker each time ends failed)."""


def open_storage(url: str, heartbeat: int = 0, grace: int = 0) -> Any:
    """Optuna's storage at `url`, with heartbeats every `heartbeat` seconds (0: none) and a trial silent for `grace`
    seconds failed and retried; a database that cannot be reached (or a URL that names none) is one line."""
    optuna = optuna_module()
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:"):  # several workers write one file: wait for each other's writes
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    if heartbeat:
        kwargs.update(heartbeat_interval=heartbeat, grace_period=grace)
        if hasattr(optuna.storages, "RetryHeartbeatStaleTrialCallback"):  # Optuna >= 4.9
            kwargs["heartbeat_stale_trial_callback"] = optuna.storages.RetryHeartbeatStaleTrialCallback(RETRIES)
        else:
            kwargs["failed_trial_callback"] = optuna.storages.RetryFailedTrialCallback(RETRIES)
    try:
        storage = optuna.storages.RDBStorage(driver(url), **kwargs)
        if url.startswith("sqlite:"):
            write_ahead(storage.engine)
        return storage
    except Exception as e:
        text = " ".join(str(e).split()) or type(e).__name__
        text = text.split(" (Background on this error")[0].split(" [SQL:")[0]
        if isinstance(e, ImportError):  # SQLAlchemy knows the database, Python lacks its driver
            scheme = url.split("://")[0]
            text = f"no driver for {scheme} installed" + (
                "; pip install 'syncfree[tune]' (or pip install 'psycopg[binary]')"
                if scheme in ("postgresql", "postgresql+psycopg") else "")
        raise UserError(f"tune: cannot open the study's storage {hidden(url)} ({type(e).__name__}: "
                        f"{text[:300]})") from None


def write_ahead(engine: Any) -> None:
    """A SQLite study in write-ahead-log mode, synced at checkpoints rather than at every commit (a commit costs about
    5 ms instead of 25 here, and readers do not wait for writers): each setting drawn, report and attribute is one.
    A crash of the machine may lose the last commits, never the file's consistency. WAL needs a local file system
    (several machines share a study through a database server)."""
    from sqlalchemy import event

    def on_connect(connection: Any, record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # the connection that made the tables goes; every later one takes the pragmas


def driver(url: str) -> str:
    """`url` with the PostgreSQL driver the `tune` extra installs (psycopg 3) where it names none and SQLAlchemy's
    default for `postgresql://` (psycopg2 before SQLAlchemy 2.1) is not installed."""
    if not url.startswith("postgresql://") or importlib.util.find_spec("psycopg2") is not None \
            or importlib.util.find_spec("psycopg") is None:
        return url
    return "postgresql+psycopg://" + url.removeprefix("postgresql://")


def make_sampler(settings: StudySettings) -> Any:
    """The study's sampler; with `sampler_seed`, trial n draws from a sampler seeded `sampler_seed + n`, whichever
    worker or machine runs it (`TrialSeeded`)."""
    if settings.sampler_object is not None:
        return settings.sampler_object
    if settings.sampler_seed is None:
        return named_sampler(settings, None)
    return TrialSeeded(lambda seed: named_sampler(settings, seed), settings.sampler_seed)


def named_sampler(settings: StudySettings, seed: int | None) -> Any:
    optuna = optuna_module()
    name = settings.sampler
    if name == "cmaes":
        if len(settings.objectives) > 1:
            raise UserError("tune: --sampler cmaes takes one objective; use tpe or nsga2 with --objective return,seconds")
        if importlib.util.find_spec("cmaes") is None:
            raise UserError("tune: --sampler cmaes needs the cmaes package (pip install cmaes)")
        return optuna.samplers.CmaEsSampler(warn_independent_sampling=False, seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


class TrialSeeded:
    """A sampler whose draws for trial n come from a fresh sampler seeded `seed + n`: the same trial number gets the
    same draw given the same finished trials, whichever worker asks and in whatever order the workers ask (one seeded
    sampler per worker would draw the same settings in every worker). With `random`, two studies of one seed try the
    same settings trial by trial, whatever they scored: a pruner compared with and without on equal ground. The
    samplers named here keep their state in the study's storage, so a fresh one per trial loses nothing."""

    def __init__(self, factory: Any, seed: int) -> None:
        self.factory, self.seed = factory, seed
        self.current = factory(seed)

    def before_trial(self, study: Any, trial: Any) -> None:
        self.current = self.factory(self.seed + trial.number)
        self.current.before_trial(study, trial)

    def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
        return self.current.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
        return self.current.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
        return self.current.sample_independent(study, trial, name, distribution)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self.current.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.current.reseed_rng()


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
    if settings.sampler_seed is not None:
        if settings.sampler_object is not None:
            raise UserError("tune: sampler_seed seeds the named samplers; an Optuna sampler given as an object takes "
                            "its own seed")
        if not 0 <= settings.sampler_seed <= 2**32 - 1 - settings.trials:
            raise UserError(f"tune: --sampler-seed {settings.sampler_seed} is invalid; allowed: an integer from 0 "
                            f"to {2**32 - 1 - settings.trials:,} (trial n draws from seed + n)")
    if settings.budget_steps < 0 or settings.budget_seconds < 0:
        raise UserError("tune: a budget is a number > 0")
    if settings.heartbeat < 0:
        raise UserError(f"tune: --heartbeat {settings.heartbeat} is invalid; allowed: seconds >= 0 (0: none)")
    if settings.heartbeat and settings.grace <= settings.heartbeat:
        raise UserError(f"tune: --grace {settings.grace} is invalid with --heartbeat {settings.heartbeat}; allowed: "
                        "more seconds than --heartbeat")


def open_study(settings: StudySettings, create: bool = False) -> Any:
    """The study in its storage (made by the first command that runs it: `create`); one line when the study there
    was started for another task, algorithm or objective."""
    optuna = optuna_module()
    storage = open_storage(settings.storage, settings.heartbeat, settings.grace)
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
"""The trials that count toward a study's `trials`: finished, failed, and those running now (on any machine); a
trial failed because its worker stopped counts through its retry instead, one asked for beyond the study's
`trials` (`SURPLUS`) not at all."""
SURPLUS = "surplus"
"""The user attribute of a trial that was asked for while other workers' trials filled the study: it is failed at
once, without training, and counts toward nothing."""


def retried(trials: list[Any]) -> set[int]:
    """The numbers of the trials that a later trial retries (their worker stopped: no heartbeat)."""
    return {number for t in trials for number in t.system_attrs.get("retry_history", ())}


def counting(trials: list[Any], below: int | None = None) -> list[Any]:
    """The trials of the study's `trials` (numbered below `below`, where given) that count toward its `trials`
    (`COUNTED`)."""
    again = retried(trials)
    return [t for t in trials if t.state.name in COUNTED and not t.user_attrs.get(SURPLUS)
            and not (t.state.name == "FAIL" and t.number in again) and (below is None or t.number < below)]


def counted(study: Any) -> int:
    return len(counting(study.get_trials(deepcopy=False)))


def surplus(study: Any, trial: Any, settings: StudySettings) -> bool:
    """Whether the trial just asked for is one too many: the trials numbered before it (running, finished, or a
    retry waiting to run) already fill the study. Workers that ask at the same moment each get a trial; the order of
    their numbers, which the database gives, decides which run, so that no more than `trials` ever do."""
    trials = study.get_trials(deepcopy=False)
    waiting = sum(t.state.name == "WAITING" and t.number < trial.number for t in trials)
    return len(counting(trials, below=trial.number)) + waiting >= settings.trials


def values_line(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
                     for key, value in values.items())


def next_step(study: Any, settings: StudySettings) -> tuple[str, list[int]]:
    """What a worker does next: `ask` for a trial (the study is short, or holds a retry), `wait` for the trials that
    other workers run (they end, or go silent and are retried here), or `stop`. Trials silent for the grace period are
    failed first, their retries queued."""
    optuna = optuna_module()
    if settings.heartbeat:
        optuna.storages.fail_stale_trials(study)
    trials = study.get_trials(deepcopy=False)
    if len(counting(trials)) < settings.trials or any(t.state.name == "WAITING" for t in trials):
        return "ask", []
    running = [t.number for t in trials if t.state.name == "RUNNING" and "heartbeat" in t.user_attrs]
    return ("wait", running) if settings.heartbeat and running else ("stop", [])


@contextlib.contextmanager
def beating(storage: Any, trial: Any, interval: int) -> Iterator[None]:
    """The trial's heartbeat every `interval` seconds while it runs (0: none), by a thread of this process: when the
    process dies the beats stop, and after the grace period another worker fails the trial and queues its retry."""
    if not interval:
        yield
        return
    trial_id = trial._trial_id  # private: Optuna's own heartbeat thread takes the same id
    storage.record_heartbeat(trial_id)  # before the attribute that makes other workers wait for it
    trial.set_user_attr("heartbeat", interval)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            with contextlib.suppress(Exception):  # a database hiccup: the next beat tries again
                storage.record_heartbeat(trial_id)

    thread = threading.Thread(target=beat, name=f"heartbeat of trial {trial.number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def work(settings: StudySettings, worker: int = 0) -> None:
    """One worker: trials until the study holds `trials` (those of earlier runs of the command and of other
    machines count), then waits for the trials other workers run, so that every command of the study ends on the
    same trials. A trial whose settings cannot train (an invalid combination, more memory than there is) fails
    with its line, one that diverges counts as pruned; the study goes on. A trial whose worker died (no heartbeat
    for `grace` seconds) is failed and retried with its settings, in a run folder of its own."""
    from optuna.trial import TrialState

    study = open_study(settings)
    prune = len(settings.objectives) == 1 and not isinstance(study.pruner, optuna_module().pruners.NopPruner)
    host = socket.gethostname()
    waited: list[int] = []
    identity = file_identity(sqlite_file(settings))
    with user_names(settings.names), storage_kept(settings):
        while True:
            check_file(settings, identity)
            step, running = next_step(study, settings)
            if step == "stop":
                break
            if step == "wait":
                if running != waited:
                    log.info("tune: the study holds its trials; waiting for trial%s %s on other workers",
                             "s" if len(running) > 1 else "", ", ".join(map(str, running)))
                    waited = running
                time.sleep(min(settings.heartbeat, 1))
                continue
            trial = study.ask()
            who = f"trial {trial.number}" + (f" (worker {worker})" if settings.workers > 1 else "")
            if surplus(study, trial, settings):
                trial.set_user_attr(SURPLUS, True)
                study.tell(trial, state=TrialState.FAIL)
                log.info("tune: %s not run: other workers' trials fill the study's %d", who, settings.trials)
                continue
            history = study._storage.get_trial_system_attrs(trial._trial_id).get("retry_history")
            if history:
                log.warning("tune: %s retries trial %d, whose worker stopped (no heartbeat for %d s)", who,
                            history[-1], settings.grace)
            trial.set_user_attr("host", host)
            try:
                with beating(study._storage, trial, settings.heartbeat):
                    values = run_trial(trial, settings, prune)
                check_file(settings, identity)
            except Pruned as e:
                if not tell(study, trial, who, state=TrialState.PRUNED):
                    break
                log.info("tune: %s pruned at report %d of %d (return %.4g); %s; run kept in %s", who, e.report,
                         settings.reports, e.value, values_line(trial.params), trial.user_attrs["run_dir"])
                continue
            except NonFiniteError as e:  # settings that diverge score as badly as those pruned (RL Zoo's choice)
                trial.set_user_attr("error", str(e))
                if not tell(study, trial, who, state=TrialState.PRUNED):
                    break
                log.warning("tune: %s diverged, counted as pruned: %s; %s", who, e, values_line(trial.params))
                continue
            except (UserError, MemoryError, RuntimeError) as e:  # settings that cannot train here
                message = str(e) if isinstance(e, UserError) else out_of_memory(e)
                if message is None:
                    tell(study, trial, who, state=TrialState.FAIL)
                    raise
                trial.set_user_attr("error", message)
                if not tell(study, trial, who, state=TrialState.FAIL):
                    break
                log.warning("tune: %s failed: %s; %s", who, message, values_line(trial.params))
                continue
            except BaseException as e:  # interrupted, or a fault of the program: the trial is not left running
                if not storage_error(e):
                    tell(study, trial, who, state=TrialState.FAIL)
                raise
            if not tell(study, trial, who, list(values)):
                break
            scores = ", ".join(f"{name} {value:.4g}" for name, value in zip(settings.objectives, values, strict=True))
            log.info("tune: %s: %s; %s", who, scores, values_line(trial.params))


class StorageLost(UserError):
    """The study's database went away while the study ran (its file deleted, its server down or out of reach)."""


def storage_error(e: BaseException) -> bool:
    """Whether `e` is the study's database failing (SQLAlchemy's errors, Optuna's wrapping of them)."""
    optuna = optuna_module()
    try:
        from sqlalchemy.exc import SQLAlchemyError
    except ImportError:  # Optuna's RDB storage needs SQLAlchemy: without it no storage opened
        return False
    return isinstance(e, (SQLAlchemyError, optuna.exceptions.StorageInternalError))


def sqlite_file(settings: StudySettings) -> Path | None:
    url = settings.storage
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def file_identity(path: Path | None) -> tuple[int, int] | None:
    """The SQLite file's device and inode (None: not a file, or gone)."""
    try:
        stat = os.stat(path) if path is not None else None
    except OSError:
        return None
    return None if stat is None else (stat.st_dev, stat.st_ino)


def check_file(settings: StudySettings, identity: tuple[int, int] | None) -> None:
    """A SQLite study whose file was deleted or replaced since the worker opened it ends here: the open connections
    would write on into the deleted file (its log beside it) without an error."""
    if identity is not None and file_identity(sqlite_file(settings)) != identity:
        raise lost_storage(settings, FileNotFoundError(str(sqlite_file(settings))))


def lost_storage(settings: StudySettings, e: BaseException) -> StorageLost:
    """The one line for a database lost mid-study: a SQLite file that is gone, or the database's own error."""
    url, path = settings.storage, sqlite_file(settings)
    if path is not None and not path.exists():
        return StorageLost(f"tune: the study's database {path} is gone (deleted while the study ran): its trials "
                           f"are lost; their run folders stay in {settings.folder}")
    if isinstance(e, FileNotFoundError):
        return StorageLost(f"tune: the study's database {path} was replaced while the study ran: its trials are no "
                           f"longer there; their run folders stay in {settings.folder}")
    wrapped = isinstance(e, optuna_module().exceptions.StorageInternalError) and e.__cause__ is not None
    cause = e.__cause__ if wrapped and e.__cause__ is not None else e  # Optuna's wrapper says nothing of its own
    text = " ".join(str(cause).split()).split(" (Background on this error")[0].split(" [SQL:")[0]
    return StorageLost(f"tune: lost the study's storage {hidden(url)} while the study ran ({type(cause).__name__}: "
                       f"{text[:300]}); the trials it recorded stay there: rerun the command once it is back to go on")


@contextlib.contextmanager
def storage_kept(settings: StudySettings) -> Iterator[None]:
    """Inside the block, the study's database failing ends the worker with one line (`StorageLost`)."""
    try:
        yield
    except Exception as e:
        if storage_error(e):
            raise lost_storage(settings, e) from None
        raise


def tell(study: Any, trial: Any, who: str, values: list[float] | None = None, state: Any = None) -> bool:
    """Tell the study a trial's end; False when the sampler asked the study to stop (a grid it has been through:
    Optuna stores the trial, then the sampler's `study.stop()` raises outside `optimize`). A trial another worker
    has failed meanwhile (its heartbeats late by more than the grace period) keeps that end: its retry counts."""
    try:
        study.tell(trial, values, state=state)
    except RuntimeError as e:
        if "Study.stop" not in str(e):
            raise
        return False
    except ValueError:
        ended = study._storage.get_trial(trial._trial_id).state
        if not ended.is_finished():
            raise
        log.warning("tune: %s was marked %s by another worker (its heartbeats came too late); its result is "
                    "dropped and its retry counts", who, ended.name.lower())
    return True


STORAGE_LOST = 3
"""A worker's exit code when the study's database went away (its line goes to the command, which says it once)."""


def worker_main(settings: StudySettings, worker: int, lost: Any = None) -> None:
    """A worker process (spawned): its lines as the command's, a user's mistake one line and exit code 2; a lost
    database's line is put on `lost` for the command to say (exit code `STORAGE_LOST`)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        work(settings, worker)
    except StorageLost as e:
        if lost is not None:
            lost.put(str(e))
        raise SystemExit(STORAGE_LOST) from None
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
    lost = context.SimpleQueue()
    processes = [context.Process(target=worker_main, args=(settings, index, lost), name=f"tune-worker-{index}")
                 for index in range(settings.workers)]
    with stopping(processes):
        for process in processes:
            process.start()
        running = list(processes)
        while running:
            multiprocessing.connection.wait([p.sentinel for p in running])
            for process in [p for p in running if not p.is_alive()]:
                process.join()
                running.remove(process)
                if process.exitcode == STORAGE_LOST:  # the others cannot record their trials either: stopped
                    raise StorageLost(lost.get() if not lost.empty() else
                                      f"tune: lost the study's storage {hidden(settings.storage)} while the study ran")
    codes = [p.exitcode or 0 for p in processes]  # joined: each has its code
    killed = [f"worker {i} (signal {-code})" for i, code in enumerate(codes) if code < 0]
    failed = [f"worker {i} exit code {code}" for i, code in enumerate(codes) if code]
    if killed and settings.heartbeat and 0 in codes and max(codes) == 0:
        # the others waited for its trial to go silent, retried it and ended the study
        log.warning("tune: %s killed; the other workers retried its trial and finished the study", ", ".join(killed))
    elif failed:
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
