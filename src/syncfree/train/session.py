"""`syncfree train` on one process (one rank of several under torchrun): the run folder's name, the config a resume
starts from, the run (`syncfree.train.run.start`, which resumes and says the start-up lines; it stops on a signal
after the current iteration and saves), and the closing line."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from syncfree.config import RUN_NAME_BYTES, LogConfig, TrainConfig
from syncfree.errors import INTERRUPTED, UserError
from syncfree.outputs import task_file_name
from syncfree.train import checkpoint
from syncfree.train.distributed import Distributed
from syncfree.train.run import start

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
        name = f"{task_file_name(cfg.task)}-{stamp}"
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


def check_resumed_algorithm(path: str | Path, trained: str, named: str | None) -> None:
    """One line when a resume names another algorithm than the one its checkpoint trained with."""
    if named is not None and named != trained:
        raise UserError(f"resume: {path} was trained with {trained}; a resumed run keeps its algorithm (drop "
                        f"algorithm={named!r}, or train a new run with it)")


def resume_config(path: str | Path) -> TrainConfig:
    """The config a resume of the checkpoint at `path` starts from: the run's own, minus where it wrote. A resume
    writes a new run folder (unless told `resume_in_place`) beside the resumed run's folder, or for a checkpoint kept
    alone in the current folder's `runs/`; never in the file's own `log.dir` (a file is data: it does not choose where
    this machine writes), and it logs to W&B only when told so again (`--log.wandb true`), under the entity the
    command names or the login's own: nor does a file choose where this machine sends a run's data."""
    cfg = checkpoint.read(path)[0]
    cfg.resume, cfg.resume_in_place, cfg.log.run_name = str(path), False, ""
    cfg.log.wandb, cfg.log.wandb_entity = False, ""
    folder = checkpoint.run_folder_of(path)
    cfg.log.dir = str(folder.parent) if folder is not None else LogConfig.dir
    return cfg


def train(cfg: TrainConfig, dist: Distributed | None) -> int:
    """Train `cfg` on this process (`syncfree train`); returns the exit code (0, or `INTERRUPTED` after a second
    signal)."""
    main_rank = dist is None or dist.is_main
    info: Callable[..., None] = log.info if main_rank else (lambda *args: None)  # only rank 0 reports
    run = start(cfg, run_dir_of(cfg), dist=dist)
    aborted, record = False, {}
    try:
        record = run.learn()
    except KeyboardInterrupt:
        aborted = True
    finally:
        run.close()
    runner = run.runner
    if aborted:
        info("aborted; %s", saved_line(run.last_saved, runner.iterations_run))
        return INTERRUPTED
    info("%s at iteration %d (%d env steps): %s; %s", "stopped" if runner.stopping() else "done", runner.iteration,
         runner.env_steps, summary(record), saved_line(run.last_saved, runner.iterations_run))
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
