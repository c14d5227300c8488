"""A training run around the loop: its folder (created, locked, cleaned of what an interrupted save left), its
metrics, checkpoints, resume and callbacks, the signals that stop it, and the one sequence every entry point starts
it with (`syncfree train`, `syncfree.learn`, the rsl_rl drop-in). The loop itself is `syncfree.train.runner`.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from syncfree.algo.base import CheckpointReader
from syncfree.algo.scope import warn_inert_switches
from syncfree.config import TrainConfig, to_dict
from syncfree.core.compile import compile_cache_dir
from syncfree.envs import VecEnv
from syncfree.errors import NonFiniteError, UserError, stop_signals
from syncfree.tasks import make_task_env, preset_or_none
from syncfree.train import checkpoint
from syncfree.train.callbacks import Callbacks, IterationCallback
from syncfree.train.distributed import Distributed
from syncfree.train.logger import RunLogger, WandbRun, copy_records
from syncfree.train.progress import Progress
from syncfree.train.run_lock import RunLock
from syncfree.train.runner import Runner

log = logging.getLogger("syncfree")

Saver = Callable[["Run", bool], "Path | None"]
"""`save(run, last)`: write the run's checkpoint of its iteration if one is due (always when `last`); returns the
newest checkpoint. `Run.save_due` writes syncfree's every `save_every` iterations; the rsl_rl drop-in, rsl_rl's."""


class Run:
    """One run of `cfg`: `runner` (the loop, built here) and what surrounds it. Only rank 0 writes: with several
    processes the other ranks' runs have no folder."""

    def __init__(self, cfg: TrainConfig, run_dir: Path | None = None, env: VecEnv | None = None,
                 dist: Distributed | None = None, on_iteration: Sequence[IterationCallback] = (),
                 read_checkpoint: CheckpointReader | None = None, saver: Saver | None = None) -> None:
        dist = dist or Distributed.current()
        self.run_dir = run_dir if dist is None or dist.is_main else None
        self._lock: RunLock | None = None
        self._created: Path | None = None
        """The outermost folder of `run_dir` this run created (removed again if it never trains)."""
        if self.run_dir is not None:
            self._created = checkpoint.first_missing(self.run_dir)
            checkpoint.make_run_dir(self.run_dir)
            self._lock = RunLock(self.run_dir)
        try:
            if self._lock is not None and self.run_dir is not None:
                self._lock.acquire()  # the lock first: only its holder cleans the folder
                removed = checkpoint.remove_stale_files(self.run_dir)
                if removed:
                    log.info("removed %d temporary file(s) an interrupted save left in %s", len(removed),
                             self.run_dir)
            self.runner = Runner(cfg, env=env, dist=dist, read_checkpoint=read_checkpoint)
            runner = self.runner
            self.callbacks = Callbacks(runner.cfg, on_iteration, None if env is not None else (
                lambda num_envs, seed: make_task_env(runner.cfg, num_envs, runner.device, seed)))
            """Evaluation, the best checkpoint, early stopping, the API's functions (`callbacks.*`); rank 0 asks."""
        except BaseException:  # a run that never started leaves no folder behind (nor its lock)
            self.release()
            self._remove_created()
            raise
        self.saver: Saver = saver or Run.save_due
        self.logger: RunLogger | None = None
        """Opened when training starts, where it knows whether the run continues a checkpoint."""
        self.wandb_id = runner.cfg.log.wandb_id
        """The W&B run this run logs to (`log.wandb_id`, else the resumed checkpoint's, else W&B's new one)."""
        self.last_saved: Path | None = None
        """The run's newest checkpoint: `latest.pt` once this run saved, else the one it resumed, if any."""
        self.resumed_from: Path | None = None
        """The checkpoint this run continues: a run folder of its own starts with that run's metrics up to it."""
        self.interrupted = False
        """A signal stopped the last `learn` (as opposed to its end, or a callback)."""
        self._lost_records = 0
        """Records that could not be written (a full disk)."""

    @property
    def cfg(self) -> TrainConfig:
        """The config as it runs (`perf.compile=auto` resolved)."""
        return self.runner.cfg

    # -- training ---------------------------------------------------------------------------------------------

    def learn(self, until: int | None = None, signals: bool = True, report: bool = True) -> dict[str, Any]:
        """Train until iteration `until` (default: `cfg.iterations`), logging each record, asking the callbacks,
        saving as `saver` says and at the end; returns the last record. With `signals` (on the main thread), Ctrl-C,
        SIGTERM or SIGHUP stops after the current iteration, which is saved (`interrupted` says so), and a second
        one aborts it (`KeyboardInterrupt`). `report=False`: no progress report (`log.progress`), where the caller
        prints its own (the rsl_rl drop-in, rsl_rl's)."""
        runner = self.runner
        until = self.cfg.iterations if until is None else until
        runner.clear_stop()  # a callback or a signal ended the last call; training asked for again goes on
        self.interrupted = False
        self.open_logger()
        progress = Progress(self.cfg.log, runner.iteration, until, show=runner.is_main and report)
        if runner.compiles_first_iteration() and runner.iteration < until:
            # the first iteration of a compiled loop builds its graphs (a learner's: the first with gradient steps)
            progress.compiling(runner.iteration + 1 + runner.algorithm.iterations_before_update())
        try:
            with self._stop_on_signals(signals):
                return runner.learn(until, lambda record: self.after_iteration(record, until, progress))
        except NonFiniteError as e:
            raise NonFiniteError(f"{e}; {self.kept()}") from None
        finally:
            progress.close()

    def after_iteration(self, record: dict[str, Any], until: int, progress: Progress | None = None) -> None:
        """What follows each iteration: its evaluation, its record logged, the callbacks (which may stop the run),
        its checkpoint when one is due."""
        runner = self.runner
        if runner.is_main:
            self.callbacks.check_metrics(runner.metric_names)  # before the first record is written
            record.update(self.callbacks.evaluations(runner, runner.iteration))
        if self.logger is not None:
            self.log_record(record)
        if progress is not None:
            progress.update(record)
        stop = self.callbacks.after_iteration(self, record) if runner.is_main else None
        if stop is not None:
            log.info("iteration %d: stopping: %s", runner.iteration, stop)
            runner.request_stop()
        self.saver(self, runner.iteration == until or runner.stopping())

    @contextlib.contextmanager
    def _stop_on_signals(self, enabled: bool) -> Iterator[None]:
        """Ctrl-C, SIGTERM (from `timeout`, SLURM, Kubernetes) and SIGHUP (a closed terminal) stop after the current
        iteration; a second one raises `KeyboardInterrupt` where the loop is."""
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield
            return

        def request_stop(signum: int, frame: FrameType | None) -> None:
            if self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
            self.runner.request_stop()
            if self.runner.is_main:
                with contextlib.suppress(OSError):  # a hung-up terminal takes no more lines
                    print(f"\n{signal.Signals(signum).name}: stopping after this iteration (a second signal aborts "
                          "without saving)", file=sys.stderr)

        previous = {signum: signal.signal(signum, request_stop) for signum in stop_signals()}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    # -- metrics and checkpoints ------------------------------------------------------------------------------

    def open_logger(self, tensorboard_dir: Path | None = None, plot: bool = True) -> None:
        """Start the metrics of this run (with a run folder): a fresh run refuses a folder that holds another run;
        a resumed run drops the records past its checkpoint's iteration. Writes the run's config as `config.yaml`
        (a resume, with the options it overrides). `tensorboard_dir` and `plot`: as `RunLogger` takes them."""
        runner = self.runner
        if self.run_dir is None or self.logger is not None:
            return
        if runner.iteration == 0:
            checkpoint.check_run_dir_unused(self.run_dir)
        source = self.resumed_from.parent / "metrics.jsonl" if self.resumed_from is not None else None
        if source is not None and source.resolve() != (self.run_dir / "metrics.jsonl").resolve():
            copy_records(source, self.run_dir / "metrics.jsonl", runner.iteration)
        checkpoint.write_config(to_dict(self.cfg), self.run_dir, resolved=runner.execution())
        log_cfg = self.cfg.log
        wandb = WandbRun(log_cfg.wandb_project, log_cfg.wandb_entity, log_cfg.wandb_group,
                         self.wandb_id) if log_cfg.wandb else None
        self.logger = RunLogger(self.run_dir, log_cfg.tensorboard, wandb, to_dict(self.cfg),
                                start_iteration=runner.iteration, start_env_steps=runner.env_steps,
                                tensorboard_dir=tensorboard_dir, plot=plot)
        self.wandb_id = self.logger.wandb_id or self.wandb_id

    def close_logger(self) -> None:
        if self.logger is not None:
            self.logger.close()
            self.logger = None

    def log_record(self, record: dict[str, Any]) -> None:
        """Append the record to the run's metrics; a run folder that disappeared stops the run in one line, a
        write that fails (disk full) is a warning and training goes on (the checkpoint is tried as usual)."""
        assert self.logger is not None
        folder = self.logger.path.parent
        if not folder.is_dir():
            raise UserError(f"run folder {folder} disappeared during iteration {self.runner.iteration}; stopped "
                            "(nothing can be saved there)")
        try:
            self.logger.log(record)
        except OSError as e:
            self._lost_records += 1
            if self._lost_records == 1:
                log.warning("iteration %d: metrics not written to %s (%s); training goes on, checkpoints are still "
                            "tried", self.runner.iteration, self.logger.path, e.strerror or e)

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint: the trainer's state (`Runner.state_dict`), the W&B run and the callbacks' state."""
        return {**self.runner.state_dict(), "wandb_id": self.wandb_id, "callbacks": self.callbacks.state_dict()}

    def save_due(self, last: bool) -> Path | None:
        """syncfree's checkpoint every `save_every` iterations and at the end (`Saver`)."""
        if self.runner.iteration % self.cfg.save_every == 0 or last:
            return self.save(last)
        return self.last_saved

    def save(self, last: bool = True) -> Path | None:
        """Write this iteration's checkpoint (with a run folder). A write that fails (disk full, no permission)
        keeps the previous checkpoint and, unless it is the run's `last` save, lets training go on with a warning;
        the last save failing is an error naming the newest checkpoint that exists."""
        if self.run_dir is None:
            return None
        iteration = self.runner.iteration
        try:
            checkpoint.save_run(self.state_dict(), self.run_dir, iteration)
            self.last_saved = self.run_dir / "latest.pt"
        except OSError as e:
            reason = f"cannot write {e.filename or self.run_dir} ({e.strerror or e})"
            kept = f"newest checkpoint {self.last_saved}" if self.last_saved else "no checkpoint written by this run"
            if last:
                raise UserError(f"iteration {iteration}: checkpoint not saved: {reason}; {kept}") from None
            log.warning("iteration %d: checkpoint not saved: %s; %s; training goes on", iteration, reason, kept)
        return self.last_saved

    def kept(self) -> str:
        """What a run that stops on bad output keeps: its newest checkpoint, or that it has none."""
        return f"last good checkpoint {self.last_saved}" if self.last_saved else "no checkpoint written yet"

    def resume(self, path: str | Path) -> None:
        """Continue the run of the checkpoint at `path`: the trainer's state, the callbacks' and the W&B run restored
        (a new run folder starts a new W&B run unless `log.wandb_id` names one), the metrics up to it carried into
        a new run folder when training starts. A checkpoint refused leaves no folder behind."""
        source = f"checkpoint {path}"
        try:
            state = checkpoint.load(path)
            self.runner.load_state_dict(state, source=source, template=self.state_dict())
        except BaseException:
            self.abandon()
            raise
        self.callbacks.load_state_dict(state.get("callbacks"))
        if not self.cfg.log.wandb_id:  # in place the same W&B run continues; a new folder starts a new one
            self.wandb_id = (state.get("wandb_id") or "") if self.cfg.resume_in_place else ""
        self.last_saved = self.resumed_from = Path(path)

    # -- the folder -------------------------------------------------------------------------------------------

    def release(self) -> None:
        """Give the folder's lock up (the run may take it again: `acquire`)."""
        if self._lock is not None:
            self._lock.release()

    def acquire(self) -> None:
        if self._lock is not None and not self._lock.held:
            self._lock.acquire()

    def _remove_created(self) -> None:
        if self._created is not None and self.run_dir is not None:
            checkpoint.remove_unused(self.run_dir, self._created)

    def abandon(self) -> None:
        """Close a run that will not train (a checkpoint it was to resume was refused): the folder it created is
        removed again, as when building it fails."""
        self.close()
        self._remove_created()

    def close(self) -> None:
        """Close the evaluation envs, the metrics, the lock and the env (unless it was passed in)."""
        self.callbacks.close()
        self.close_logger()
        self.release()
        self.runner.close()


def start(cfg: TrainConfig, run_dir: Path | None, env: VecEnv | None = None, dist: Distributed | None = None,
          on_iteration: Sequence[IterationCallback] = (), read_checkpoint: CheckpointReader | None = None,
          saver: Saver | None = None) -> Run:
    """The one way a run starts, for every entry point: a new run's folder checked unused, the run built, the
    checkpoint of `cfg.resume` continued, and the start-up lines said (rank 0): what trains where and how, the
    switches and settings that change nothing here, a first iteration that compiles."""
    main = dist is None or dist.is_main
    if run_dir is not None and not cfg.resume_in_place and main:
        checkpoint.check_run_dir_unused(run_dir)
    run = Run(cfg, run_dir, env, dist, on_iteration, read_checkpoint, saver)
    runner, say = run.runner, log.info if main else (lambda *args: None)
    if cfg.resume:
        run.resume(cfg.resume)
        if runner.iteration >= cfg.iterations:
            run.abandon()
            raise UserError(f"resume: {cfg.resume} is at iteration {runner.iteration}; iterations={cfg.iterations} is "
                            f"the total to reach, not how many more (--iterations {runner.iteration + cfg.iterations} "
                            f"trains {cfg.iterations} more)")
        say("resumed %s at iteration %d%s", cfg.resume, runner.iteration, "" if cfg.resume_in_place else
            f" as a new run (--resume_in_place true writes on in {Path(cfg.resume).parent} instead)")
    cfg = run.cfg  # as it runs: perf.compile=auto resolved
    ranks = f"{runner.world_size} ranks x " if runner.world_size > 1 else ""
    say("training %s with %s: %s%s x %d steps per iteration, %d iteration%s; on %s -> %s", cfg.task,
        runner.algorithm.label, ranks, cfg.env.describe(runner.env.num_envs), runner.algorithm.steps_per_env,
        cfg.iterations, "s" if cfg.iterations != 1 else "", runner.execution(),
        run_dir if run_dir is not None else "no run folder")
    if main:
        warn_inert_switches(cfg, runner.switch_scope(), preset_or_none(cfg.task, cfg.algorithm))
        runner.algorithm.warn_idle(cfg.iterations - runner.iteration)
    if runner.compiles_first_iteration() and runner.iteration < cfg.iterations:
        which = ("the first iteration compiles the loop, the first with gradient steps compiles them"
                 if runner.algorithm.iterations_before_update() else "the first iteration compiles the loop")
        say("perf.compile=%s: %s (seconds to minutes on a CPU; a later run of the same config reuses torch's compile "
            "caches in %s)", cfg.perf.compile, which, compile_cache_dir())
    return run


@contextlib.contextmanager
def visible_logs() -> Iterator[None]:
    """syncfree's lines (the start line, warnings, the closing line) on stderr for a program that set up no logging
    of its own (a script calling `syncfree.learn` or the rsl_rl drop-in), as the command line shows them."""
    logger = logging.getLogger("syncfree")
    if logger.hasHandlers():
        yield
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("syncfree: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
