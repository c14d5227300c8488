"""Per-iteration metrics: JSONL always, TensorBoard and Weights & Biases on request."""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from syncfree.errors import UserError

log = logging.getLogger("syncfree")


class RunLogger:
    """Appends one record per iteration. `start_iteration` and `start_env_steps`: where the run continues from (a
    resume); the records of later iterations, written before by the run that is resumed, are dropped from
    `metrics.jsonl` and TensorBoard, so that both read as one run. TensorBoard's x-axis is env steps (all ranks);
    the iteration is a series of its own.

    `tensorboard_dir`: where TensorBoard's files go (default `run_dir/tensorboard`). `plot=False`: records go to
    `metrics.jsonl` only and the caller plots what it chooses against its own x-axis (`add_scalar`), as the rsl_rl
    drop-in plots rsl_rl's tags against rsl_rl's iteration."""

    def __init__(self, run_dir: Path, tensorboard: bool = False, wandb: WandbRun | None = None,
                 config: dict[str, Any] | None = None, start_iteration: int = 0, start_env_steps: int = 0,
                 tensorboard_dir: Path | None = None, plot: bool = True) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
        truncate_records(self.path, start_iteration)
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self._plot = plot
        self.tensorboard_dir = tensorboard_dir or run_dir / "tensorboard"
        self._tb = None
        self._wandb = None
        self.wandb_id: str | None = None
        """The W&B run's id (None without W&B)."""
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise UserError("log.tensorboard: the tensorboard package is not installed "
                                "(pip install 'syncfree[tensorboard]')") from None
            self._tb = SummaryWriter(log_dir=str(self.tensorboard_dir),
                                     purge_step=start_env_steps + 1 if plot else None)
        if wandb is not None:
            try:
                import wandb as wandb_module
            except ImportError:
                raise UserError("log.wandb: the wandb package is not installed (pip install 'syncfree[wandb]')") from None
            try:
                self._wandb = wandb_module.init(project=wandb.project, entity=wandb.entity or None,
                                                group=wandb.group or None, id=wandb.id or None, resume="allow",
                                                name=run_dir.name, config=config, dir=str(run_dir))
            except Exception as e:  # no login, no network, an entity this login may not write to
                self.close()
                reason = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
                raise UserError(f"log.wandb: W&B did not start a run: {reason} (`wandb login`, WANDB_MODE=offline, "
                                "or leave --log.wandb off)") from None
            self.wandb_id = self._wandb.id

    def log(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        if not self._plot:
            return
        step = record["iteration"]
        scalars = {k: v for k, v in record.items() if isinstance(v, int | float) and k != "iteration"}
        if self._tb is not None:
            for key, value in {**scalars, "iteration": step}.items():
                if key != "env_steps":
                    self._tb.add_scalar(key, value, record["env_steps"])
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def add_scalar(self, tag: str, value: float, step: int, wandb: bool = True) -> None:
        """One point in TensorBoard and (with `wandb`) W&B, as rsl_rl's writers take it."""
        if self._tb is not None:
            self._tb.add_scalar(tag, value, step)
        if wandb and self._wandb is not None:
            self._wandb.log({tag: value}, step=step)

    def close(self) -> None:
        """Close every writer, even when one fails to write what it still holds (a full disk): its last records are
        lost, which one warning says; the run ends as it would, its checkpoints being written apart from its logs."""
        closers = [(str(self.path), self._file.close)]
        if self._tb is not None:
            closers.append((f"TensorBoard's {self.tensorboard_dir}", self._tb.close))
        if self._wandb is not None:
            closers.append(("W&B", self._wandb.finish))
        failed = []
        for name, close in closers:
            try:
                close()
            except OSError as e:
                failed.append(f"{name} ({e.strerror or e})")
        if failed:
            log.warning("closing the run's logs: %s not written in full; their last records may be missing",
                        ", ".join(failed))


@dataclass(frozen=True)
class WandbRun:
    """Where a run logs in Weights & Biases. `id`: continue that W&B run (a resume), or empty for a new one.
    W&B keeps a run's steps increasing: iterations a resume repeats (those logged after its checkpoint) are
    dropped there with a warning, as TensorBoard and `metrics.jsonl` drop the old ones instead."""

    project: str = "syncfree"
    entity: str = ""
    group: str = ""
    id: str = ""


def truncate_records(path: Path, last_iteration: int) -> int:
    """Drop the records of iterations after `last_iteration` from the JSONL file at `path` (rewritten atomically);
    returns how many were dropped."""
    if not path.is_file():
        return 0
    lines = path.read_text().splitlines(keepends=True)
    kept = _records_until(lines, last_iteration)
    if len(kept) < len(lines):
        _write_lines(kept, path)
    return len(lines) - len(kept)


def copy_records(source: Path, path: Path, last_iteration: int) -> int:
    """Start the JSONL file at `path` with the records of `source` up to `last_iteration` (a resume in a new run
    folder reads as the whole run); returns how many. A source that is missing or unreadable gives none."""
    try:
        lines = source.read_text().splitlines(keepends=True)
    except (OSError, UnicodeDecodeError):
        return 0
    kept = _records_until(lines, last_iteration)
    _write_lines(kept, path)
    return len(kept)


def _records_until(lines: list[str], last_iteration: int) -> list[str]:
    return [line for line in lines if _iteration(line) <= last_iteration]


def _write_lines(lines: list[str], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(lines))
    os.replace(tmp, path)


def _iteration(line: str) -> float:
    try:
        return cast(float, json.loads(line)["iteration"])  # a record's iteration is a number
    except (ValueError, KeyError, TypeError):
        return math.inf  # a line cut by a kill, or not a record: dropped
