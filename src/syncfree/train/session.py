"""`syncfree train` on one process (one rank of several under torchrun): the run folder, a resume, the start-up
line, signal handling that stops after the current iteration and saves, and the closing line."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from syncfree.algo.scope import warn_inert_switches
from syncfree.config import TrainConfig
from syncfree.core.compile import compile_cache_dir
from syncfree.errors import INTERRUPTED
from syncfree.train import checkpoint
from syncfree.train.distributed import Distributed
from syncfree.train.runner import Runner

log = logging.getLogger("syncfree")



def default_run_name(cfg: TrainConfig) -> str:
    """`<task>-<YYYYmmdd-HHMMSS>`, as runs are named when `log.run_name` is empty."""
    return f"{cfg.task.replace(':', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"


def run_dir_of(cfg: TrainConfig) -> Path:
    """Where a run of `cfg` writes: the resumed checkpoint's folder, else `log.dir/log.run_name`."""
    if cfg.resume:
        return Path(cfg.resume).parent
    return Path(cfg.log.dir) / (cfg.log.run_name or default_run_name(cfg))


def train(cfg: TrainConfig, dist: Distributed | None) -> int:
    """Train `cfg` on this process; returns the exit code (0, or `INTERRUPTED` after a second signal)."""
    run_dir = run_dir_of(cfg)
    main_rank = dist is None or dist.is_main
    info: Callable[..., None] = log.info if main_rank else (lambda *args: None)  # only rank 0 reports
    if not cfg.resume and main_rank:
        checkpoint.check_run_dir_unused(run_dir)
    trainer = Runner(cfg, run_dir=run_dir, dist=dist)
    if cfg.resume:
        trainer.load_state_dict(checkpoint.load(cfg.resume), source=f"checkpoint {cfg.resume}")
        trainer.last_saved = Path(cfg.resume)
        info("resumed %s at iteration %d", cfg.resume, trainer.iteration)
    cfg = trainer.cfg  # as it runs: perf.compile=auto resolved
    ranks = f"{dist.world_size} ranks x " if dist is not None else ""
    info("training %s on %s: %s%s x %d steps per iteration, %d iterations -> %s", cfg.task, trainer.execution(), ranks,
         cfg.env.describe(trainer.env.num_envs), cfg.ppo.steps_per_env, cfg.iterations, run_dir)
    if main_rank:
        warn_inert_switches(cfg, trainer.switch_scope())
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
        info("aborted; %s", saved_line(trainer.last_saved))
        return INTERRUPTED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        trainer.close()
    info("%s at iteration %d (%d env steps): %s; %s", "stopped" if trainer.stopping() else "done", trainer.iteration,
         trainer.env_steps, summary(record), saved_line(trainer.last_saved))
    return 0


def summary(record: dict[str, Any]) -> str:
    """The last iteration's learning figures in one phrase."""
    figures = ", ".join(f"{k}={record[k]:.{3 if k.startswith('reward') else 1}f}"
                        for k in ("mean_return", "mean_length", "reward_per_agent_step") if k in record)
    return figures or "no episode finished yet"


def saved_line(path: Path | None) -> str:
    """Where the run's newest checkpoint is, or that there is none."""
    return f"checkpoint {path}" if path is not None else "no checkpoint written (no iteration finished)"
