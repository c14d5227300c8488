"""Training progress on stderr: a tqdm bar on a terminal, or one short line every few iterations where stderr is a
file or a pipe (a bar there is one ever-growing line of carriage returns)."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from tqdm import tqdm

from syncfree.config import LogConfig

LINES_PER_RUN = 20
"""`log.progress_every=0` with line output: about this many lines over a run (and the first and last iteration)."""


def uses_bar(style: str, stream: TextIO) -> bool:
    """`log.progress_style`: `bar` and `lines` as asked; `auto` draws a bar only on a terminal with a width."""
    if style != "auto":
        return style == "bar"
    if not stream.isatty():
        return False
    try:
        columns = os.get_terminal_size(stream.fileno()).columns  # the stream's own terminal
    except (OSError, ValueError, AttributeError):
        columns = shutil.get_terminal_size(fallback=(0, 0)).columns
    return columns > 0


def learning_figure(record: dict[str, Any]) -> tuple[str, str]:
    """The iteration's learning figure: the mean return (`-` until an episode ended), or for multi-agent runs the
    reward per agent step."""
    if "reward_per_agent_step" in record:
        return "reward", f"{record['reward_per_agent_step']:.3f}"
    value = record.get("mean_return", float("nan"))
    return "mean_return", f"{value:.1f}" if math.isfinite(value) else "-"


def duration(seconds: float) -> str:
    """`1h02m`, `3m05s`, `42s`."""
    if not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def progress_line(record: dict[str, Any], until: int, seconds_left: float) -> str:
    """One iteration in under 120 characters: `it 20/100  env_steps 40,960  mean_return 21.8  10,322 steps/s
    left 8s`."""
    name, value = learning_figure(record)
    return (f"it {record['iteration']}/{until}  env_steps {record['env_steps']:,}  {name} {value}  "
            f"{record['steps_per_s']:,.0f} steps/s  left {duration(seconds_left)}")


class Progress:
    """What `Runner.learn` reports per iteration (`log.progress`, `log.progress_style`, `log.progress_every`).

    Args:
        cfg: the run's `log` section.
        start, until: the iteration training starts at and the one it ends at.
        show: False on ranks other than 0 (nothing is printed).
        stream: where to write (stderr).
    """

    def __init__(self, cfg: LogConfig, start: int, until: int, show: bool = True, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.until, self.start = until, start
        on = cfg.progress and show
        self.bar: tqdm[Any] | None = None
        self.lines = False
        with self.console():
            self.bar = tqdm(total=until, initial=start, unit="it", dynamic_ncols=True, file=self.stream) if (
                on and uses_bar(cfg.progress_style, self.stream)) else None
            self.lines = on and self.bar is None
        self.every = cfg.progress_every or max(1, round((until - start) / LINES_PER_RUN))
        self._paced: list[float] = []
        """Seconds of each iteration after this runner's first but the one that compiles: the pace of the rest."""
        self._first: float | None = None
        self._compiles_at: int | None = None

    def compiling(self, at: int | None = None) -> None:
        """Iteration `at` (default: the next) builds the compiled graphs (an off-policy learner's first with
        gradient steps may come later): the bar says so while it runs, and the time left leaves it out."""
        self._compiles_at = self.start + 1 if at is None else at
        self._label(self.start)

    def _label(self, done: int) -> None:
        """The bar's label once iteration `done` finished: `compiling` where the next one compiles."""
        if self.bar is not None:  # (the start line says so too, for line output)
            with self.console():
                self.bar.set_description_str("compiling" if self._compiles_at == done + 1 else "")

    def seconds_left(self, iteration: int) -> float:
        """The iterations still to run at the pace of those run so far (the first only when it is the only one)."""
        pace = self._paced or ([self._first] if self._first is not None else [])
        return (self.until - iteration) * (sum(pace) / len(pace)) if pace else float("nan")

    def update(self, record: dict[str, Any]) -> None:
        """An iteration finished with this record. A console that went away (a closed pipe, a hung-up terminal)
        ends the report, not the run: the run folder still gets every record and checkpoint."""
        with self.console():
            self._report(record)

    @contextlib.contextmanager
    def console(self) -> Iterator[None]:
        """Writes to the stream; once one fails (a closed pipe, a hung-up terminal), nothing more is written."""
        try:
            yield
        except OSError:
            self.bar, self.lines = None, False

    def _report(self, record: dict[str, Any]) -> None:
        seconds, iteration = record["iteration_seconds"], record["iteration"]
        if self._first is None:
            self._first = seconds
        elif iteration != self._compiles_at:
            self._paced.append(seconds)
        if self.bar is not None:
            name, value = learning_figure(record)
            self.bar.set_postfix({"steps_per_s": f"{record['steps_per_s']:.0f}", name: value}, refresh=False)
            self.bar.update(1)
            self._label(iteration)
        elif self.lines and (iteration == self.start + 1 or iteration == self.until
                             or (iteration - self.start) % self.every == 0):
            print(progress_line(record, self.until, self.seconds_left(iteration)), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            with self.console():
                self.bar.close()
