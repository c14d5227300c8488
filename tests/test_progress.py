"""What a run prints: progress as a bar on a terminal and as short lines in a log file, and the resolved device,
threads, compile mode and precision in the start line and `config.yaml`."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from syncfree.config import LogConfig
from syncfree.policy import actor_critic
from syncfree.policy.actor_critic import describe_precision, mlp, native_bf16, set_autocast
from syncfree.train.progress import Progress, progress_line

LINE = re.compile(r"^it (\d+)/(\d+)  env_steps [\d,]+  mean_return (-?[\d.]+|-)  [\d,]+ steps/s  left \d+s$")


def test_a_log_file_gets_short_lines_and_the_resolved_execution(tmp_path: Path) -> None:
    """stderr redirected to a file, as a user's `> train.log 2>&1` does: no carriage returns, one line at the first
    iteration, every `progress_every`-th and the last, each well under 200 bytes."""
    log_file = tmp_path / "train.log"
    with log_file.open("w") as f:
        done = subprocess.run([sys.executable, "-m", "syncfree", "train", "--task", "pendulum", "--iterations", "7",
                               "--env.num_envs", "16", "--ppo.steps_per_env", "8", "--perf.compile", "off",
                               "--log.progress_every", "3", "--log.dir", str(tmp_path), "--log.run_name", "run"],
                              stdout=f, stderr=subprocess.STDOUT, timeout=300, env={"OMP_NUM_THREADS": "1",
                                                                                  "PATH": "/usr/bin:/bin"})
    text = log_file.read_text()
    assert done.returncode == 0, text[-2000:]
    assert "\r" not in text
    progress = [line for line in text.splitlines() if line.startswith("it ")]
    assert [int(LINE.match(line).group(1)) for line in progress] == [1, 3, 6, 7], progress  # type: ignore[union-attr]
    assert max(len(line.encode()) + 1 for line in progress) < 200
    start = next(line for line in text.splitlines() if line.startswith("training pendulum"))
    precision = "bfloat16 hidden layers" if native_bf16(torch.device("cpu")) else "float32, "  # autocast=auto
    execution = f"on cpu, 1 thread (OMP_NUM_THREADS), {precision}"
    assert execution in start and "perf.compile=off" in start
    assert len(start.split(" -> ")[0]) < 200, start  # one short line before the run folder
    assert (tmp_path / "run" / "config.yaml").read_text().splitlines()[0].startswith(f"# ran {execution}")


def progress_records(seconds: list[float]) -> list[dict[str, float]]:
    return [{"iteration": i + 1, "env_steps": 100 * (i + 1), "steps_per_s": 100 / s, "iteration_seconds": s,
             "mean_return": 1.0} for i, s in enumerate(seconds)]


def test_time_left_leaves_out_the_compiling_iteration() -> None:
    stream = io.StringIO()
    progress = Progress(LogConfig(progress_style="lines", progress_every=1), 0, 10, stream=stream)
    for record in progress_records([90.0, 2.0, 4.0]):
        progress.update(record)
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("left 13m30s")  # 9 iterations at the only pace known, the first's
    assert lines[1].endswith("left 16s") and lines[2].endswith("left 21s")  # 8 x 2 s, then 7 x 3 s


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_later_compiling_iteration_is_labelled_and_left_out_of_the_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    """An off-policy learner compiles its gradient step in its first iteration with gradient steps (here the
    third): the bar says `compiling` while that one runs, and the time left leaves it out (with it, the third line
    would say 5m18s)."""
    stream = io.StringIO()
    progress = Progress(LogConfig(progress_style="lines", progress_every=1), 0, 10, stream=stream)
    progress.compiling(at=3)
    for record in progress_records([1.0, 1.0, 90.0, 3.0]):
        progress.update(record)
    lines = stream.getvalue().splitlines()
    assert [line.rsplit("left ", 1)[1] for line in lines] == ["9s", "8s", "7s", "12s"]
    monkeypatch.setattr("shutil.get_terminal_size", lambda fallback=None: os.terminal_size((100, 24)))
    for at in (None, 3):
        terminal = Terminal()
        bar = Progress(LogConfig(progress_style="bar"), 0, 10, stream=terminal)
        bar.compiling(at)
        for record in progress_records([1.0, 1.0, 90.0]):
            bar.update(record)
        drawn = [part for part in terminal.getvalue().split("\r") if "/10" in part]
        labelled = {re.search(r"(\d+)/10", part).group(1) for part in drawn if "compiling" in part}  # type: ignore[union-attr]
        assert labelled == {str((at or 1) - 1)}, drawn  # drawn while that iteration runs
        assert "compiling" not in drawn[-1]


@pytest.mark.parametrize(("style", "progress", "terminal", "expected"), [
    ("auto", True, True, "bar"), ("auto", True, False, "lines"), ("bar", True, False, "bar"),
    ("lines", True, True, "lines"), ("auto", False, True, "nothing"), ("lines", False, False, "nothing")])
def test_the_style_follows_the_stream_and_the_settings(style: str, progress: bool, terminal: bool, expected: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    stream = Terminal() if terminal else io.StringIO()
    reporter = Progress(LogConfig(progress=progress, progress_style=style, progress_every=1), 0, 2, stream=stream)  # type: ignore[arg-type]
    for record in progress_records([1.0, 1.0]):
        reporter.update(record)
    reporter.close()
    out = stream.getvalue()
    found = "bar" if "\r" in out else "lines" if out.count("\n") == 2 and out.startswith("it 1/2") else (
        "nothing" if out == "" else out)
    assert found == expected


def test_the_precision_is_stated_as_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    net, cpu = mlp(8, [64, 64], 2, "elu"), torch.device("cpu")
    monkeypatch.setattr(actor_critic, "native_bf16", lambda device: False)
    set_autocast(net, "auto", cpu)
    assert describe_precision(net, "auto", cpu) == "float32"
    set_autocast(net, "off", cpu)
    assert describe_precision(net, "off", cpu) == "float32"
    set_autocast(net, "bf16", cpu)
    assert describe_precision(net, "bf16", cpu) == "bfloat16 hidden layers"
    monkeypatch.setattr(actor_critic, "native_bf16", lambda device: True)
    set_autocast(net, "auto", cpu)
    assert describe_precision(net, "auto", cpu) == "bfloat16 hidden layers from 65,536 rows x width"


def test_the_line_says_no_mean_return_until_an_episode_ended() -> None:
    record = {"iteration": 3, "env_steps": 3072, "steps_per_s": 1000.0}
    assert progress_line(record, 10, 7.0) == "it 3/10  env_steps 3,072  mean_return -  1,000 steps/s  left 7s"
    assert "mean_return -  " in progress_line({**record, "mean_return": float("nan")}, 10, 7.0)
    assert "mean_return -12.5  " in progress_line({**record, "mean_return": -12.5}, 10, 7.0)
