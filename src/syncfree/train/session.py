"""`syncfree train` on one process (one rank of several under torchrun): the run folder, a resume, the start-up
line, signal handling that stops after the current iteration and saves, and the closing line."""

from __future__ import annotations

import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from syncfree.algo.scope import warn_inert_switches
from syncfree.config import RUN_NAME_BYTES, TrainConfig
from syncfree.core.compile import compile_cache_dir
from syncfree.errors import INTERRUPTED, UserError
from syncfree.tasks import preset_or_none
from syncfree.train import checkpoint
from syncfree.train.distributed import Distributed
from syncfree.train.runner import Runner

log = logging.getLogger("syncfree")


def default_run_name(cfg: TrainConfig) -> str:
    """`<task>-<YYYYmmdd-HHMMSS>` for a new run, `<resumed run>-resumed-<YYYYmmdd-HHMMSS>` for a resume (a resume
    of a resume names the first run once), with `-2`, `-3`, ... when that folder is taken."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if cfg.resume:
        folder = checkpoint.run_folder_of(cfg.resume)
        source = RESUMED_SUFFIX.sub("", folder.resolve().name if folder is not None else Path(cfg.resume).stem)
        source = source.encode()[:RUN_NAME_BYTES - 40].decode(errors="ignore")  # room for the suffix
        name = f"{source}-resumed-{stamp}"
    else:
        name = f"{cfg.task.replace(':', '-')}-{stamp}"
    taken = Path(cfg.log.dir) / name
    count = 1
    while taken.exists():
        count += 1
        taken = Path(cfg.log.dir) / f"{name}-{count}"
    return taken.name


RESUMED_SUFFIX = re.compile(r"-resumed-\d{8}-\d{6}(-\d+)?$")


def run_dir_of(cfg: TrainConfig) -> Path:
    """Where a run of `cfg` writes: the resumed checkpoint's folder with `resume_in_place`, else
    `log.dir/log.run_name` (a new folder, for a resume too)."""
    if cfg.resume and cfg.resume_in_place:
        folder = Path(cfg.resume).parent
        if cfg.log.run_name and cfg.log.run_name != folder.name:
            raise UserError(f"log.run_name={cfg.log.run_name!r} with resume_in_place: the run continues in {folder}; "
                            "drop one of the two")
        return folder
    return Path(cfg.log.dir) / (cfg.log.run_name or default_run_name(cfg))


def resume_config(path: str | Path) -> TrainConfig:
    """The config a resume of the checkpoint at `path` starts from: the run's own, minus where it wrote. A resume
    writes a new run folder (unless told `resume_in_place`) beside the resumed run's folder."""
    cfg = checkpoint.read(path)[0]
    cfg.resume, cfg.resume_in_place, cfg.log.run_name = str(path), False, ""
    folder = checkpoint.run_folder_of(path)
    if folder is not None:
        cfg.log.dir = str(folder.parent)
    return cfg


def resume(runner: Runner, path: str | Path) -> None:
    """Continue the run of the checkpoint at `path` in `runner`: its state restored; in a new run folder, the
    metrics up to the checkpoint carried over and a new W&B run (unless `log.wandb_id` names one)."""
    try:
        runner.load_state_dict(checkpoint.load(path), source=f"checkpoint {path}")
    except BaseException:
        runner.abandon()
        raise
    runner.last_saved = runner.resumed_from = Path(path)
    if not runner.cfg.resume_in_place and not runner.cfg.log.wandb_id:
        runner.wandb_id = ""


def train(cfg: TrainConfig, dist: Distributed | None) -> int:
    """Train `cfg` on this process; returns the exit code (0, or `INTERRUPTED` after a second signal)."""
    run_dir = run_dir_of(cfg)
    main_rank = dist is None or dist.is_main
    info: Callable[..., None] = log.info if main_rank else (lambda *args: None)  # only rank 0 reports
    if not cfg.resume_in_place and main_rank:
        checkpoint.check_run_dir_unused(run_dir)
    trainer = Runner(cfg, run_dir=run_dir, dist=dist)
    if cfg.resume:
        resume(trainer, cfg.resume)
        info("resumed %s at iteration %d%s", cfg.resume, trainer.iteration, "" if cfg.resume_in_place else
             f" as a new run (--resume_in_place true writes on in {Path(cfg.resume).parent} instead)")
    cfg = trainer.cfg  # as it runs: perf.compile=auto resolved
    ranks = f"{dist.world_size} ranks x " if dist is not None else ""
    info("training %s with %s on %s: %s%s x %d steps per iteration, %d iterations -> %s", cfg.task,
         trainer.algorithm.label, trainer.execution(), ranks, cfg.env.describe(trainer.env.num_envs),
         trainer.algorithm.steps_per_env, cfg.iterations, run_dir)
    if main_rank:
        warn_inert_switches(cfg, trainer.switch_scope(), preset_or_none(cfg.task, cfg.algorithm))
    if trainer.compiles_first_iteration() and trainer.iteration < cfg.iterations:
        info("perf.compile=%s: the first iteration compiles the loop (seconds to minutes on a CPU; a later run of "
             "the same config reuses torch's compile caches in %s)", cfg.perf.compile, compile_cache_dir())

    def request_stop(signum: int, frame: FrameType | None) -> None:
        if trainer.stop_requested:
            raise KeyboardInterrupt
        trainer.stop_requested = True
        if main_rank:
            print(f"\n{signal.Signals(signum).name}: stopping after this iteration (a second signal aborts without "
                  "saving)", file=sys.stderr)

    previous = {signum: signal.signal(signum, request_stop) for signum in (signal.SIGINT, signal.SIGTERM)
                if threading.current_thread() is threading.main_thread()}
    try:
        record = trainer.learn()
    except KeyboardInterrupt:
        info("aborted; %s", saved_line(trainer.last_saved, trainer.iterations_run))
        return INTERRUPTED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        trainer.close()
    info("%s at iteration %d (%d env steps): %s; %s", "stopped" if trainer.stopping() else "done", trainer.iteration,
         trainer.env_steps, summary(record), saved_line(trainer.last_saved, trainer.iterations_run))
    return 0


def summary(record: dict[str, Any]) -> str:
    """The last iteration's learning figures in one phrase."""
    figures = ", ".join(f"{k}={record[k]:.{3 if k.startswith('reward') else 1}f}"
                        for k in ("mean_return", "mean_length", "reward_per_agent_step") if k in record)
    return figures or "no episode finished yet"


def saved_line(path: Path | None, iterations_run: int = 0) -> str:
    """Where the run's newest checkpoint is, or that there is none (and whether iterations finished unsaved)."""
    if path is not None:
        return f"checkpoint {path}"
    if iterations_run:
        return f"no checkpoint written ({iterations_run} iteration{'s' if iterations_run > 1 else ''} finished, none saved)"
    return "no checkpoint written (no iteration finished)"
