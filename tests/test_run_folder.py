"""A run folder has one writer, is not left behind by a run that never started, and its loss or a full disk is
said in one line (or a warning) rather than a traceback or silence."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import syncfree
from syncfree.cli import main
from syncfree.errors import UserError
from syncfree.train.logger import RunLogger

SMALL = dict(env={"num_envs": 8}, ppo={"steps_per_env": 4, "num_minibatches": 2}, log={"progress": False},
             perf={"compile": "off"})


def small_run(folder: Path, iterations: int = 1, **extra) -> syncfree.api.TrainResult:
    return syncfree.learn("pendulum", run_dir=folder, iterations=iterations, **SMALL, **extra)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_run_that_never_starts_leaves_no_folder(tmp_path: Path, capsys) -> None:
    log_dir = tmp_path / "runs" / "nested"
    assert main(["train", "--task", "pendulum", "--device", "cuda", "--log.dir", str(log_dir),
                 "--log.run_name", "run"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == []  # neither the run folder nor the folders made for it


def test_the_lock_is_held_while_training_and_released_after(tmp_path: Path) -> None:
    seen = []

    def look(runner, record) -> None:
        seen.append(json.loads((tmp_path / "run" / ".lock").read_text()))

    small_run(tmp_path / "run", iterations=2, on_iteration=[look])
    assert [entry["pid"] for entry in seen] == [os.getpid()] * 2 and seen[0]["host"] == socket.gethostname()
    assert not (tmp_path / "run" / ".lock").exists()


def test_a_folder_another_live_process_writes_is_refused_and_a_stale_lock_taken_over(tmp_path: Path, capsys,
                                                                                     caplog) -> None:
    small_run(tmp_path / "run")
    latest = tmp_path / "run" / "latest.pt"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = {"pid": other.pid, "host": socket.gethostname(), "since": 0.0}
        (tmp_path / "run" / ".lock").write_text(json.dumps(lock))
        capsys.readouterr()
        assert main(["train", "--resume", str(latest), "--resume_in_place", "true", "--iterations", "2", "--log.progress", "false"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"in use by process {other.pid}" in err, err
        records = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        assert len(records) == 1  # nothing of the refused resume was written
    finally:
        other.kill()
        other.wait()
    with caplog.at_level(logging.INFO, logger="syncfree"):  # the holder is gone: its lock is stale
        assert main(["train", "--resume", str(latest), "--resume_in_place", "true", "--iterations", "2", "--log.progress", "false"]) == 0
    assert f"taking over the lock of process {other.pid}, which is gone" in caplog.text
    assert not (tmp_path / "run" / ".lock").exists()

    (tmp_path / "run" / ".lock").write_text(json.dumps({**lock, "host": "elsewhere"}))
    capsys.readouterr()
    assert main(["train", "--resume", str(latest), "--resume_in_place", "true", "--iterations", "3", "--log.progress", "false"]) == 2
    err = capsys.readouterr().err.strip()
    assert "on host elsewhere" in err and f"delete {tmp_path / 'run' / '.lock'}" in err


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc/<pid>/cmdline")
def test_a_lock_naming_a_live_process_that_is_not_its_run_is_said_to_be_probably_stale(tmp_path: Path,
                                                                                      capsys) -> None:
    """A pid reused by another program since the run that took the lock ended: the lock's recorded command line is
    not that process's (or, for a lock that records none, it runs no Python)."""
    small_run(tmp_path / "run")
    latest = tmp_path / "run" / "latest.pt"
    lock = tmp_path / "run" / ".lock"
    other = subprocess.Popen(["sleep", "60"])
    try:
        for recorded in ({"command": f"{sys.executable} -m syncfree train --log.run_name run"}, {}):
            lock.write_text(json.dumps({"pid": other.pid, "host": socket.gethostname(), "since": 0.0, **recorded}))
            capsys.readouterr()
            assert main(["train", "--resume", str(latest), "--resume_in_place", "true", "--iterations", "2",
                         "--log.progress", "false"]) == 2
            err = capsys.readouterr().err.strip()
            assert err.count("\n") == 0 and f"its lock names process {other.pid}" in err, err
            assert "which is now `sleep 60`" in err and "probably stale" in err and f"delete {lock}" in err, err
            assert "stop it" not in err and lock.exists()
    finally:
        other.kill()
        other.wait()


def test_two_runs_of_one_name_started_together_leave_one_training_and_the_other_one_line(tmp_path: Path, capsys,
                                                                                        monkeypatch) -> None:
    """The interleavings of two processes starting `--log.run_name run` at once, each set up as it happens: the first
    has created the lock and not yet written its name into it (the second took that for a stale lock, removed it and
    trained too, both writing one folder); the first, holding the lock, cleans the folder while the second probes
    that it can write there (its probe file removed under it)."""
    from syncfree.train import checkpoint

    argv = ["train", "--task", "pendulum", "--env.num_envs", "8", "--ppo.steps_per_env", "4", "--iterations", "1",
            "--perf.compile", "off", "--log.progress", "false", "--log.dir", str(tmp_path), "--log.run_name", "run"]
    lock = tmp_path / "run" / ".lock"
    lock.parent.mkdir()
    lock.write_text("")  # created by the first, its content on the way
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "another process is taking its lock now" in err, err
    assert sorted(p.name for p in lock.parent.iterdir()) == [".lock"] and lock.read_text() == ""
    old = lock.stat().st_mtime - 60  # left by a process killed as it wrote it: stale
    os.utime(lock, (old, old))
    assert main(argv) == 0 and not lock.exists()

    real_fsync = os.fsync

    def holder_cleans(fd: int) -> None:  # between the probe's write and its removal
        real_fsync(fd)
        checkpoint.remove_stale_files(tmp_path / "other")

    monkeypatch.setattr(os, "fsync", holder_cleans)
    checkpoint.make_run_dir(tmp_path / "other")  # no error: the folder is writable


def test_a_run_folder_that_disappears_stops_the_run_in_one_line(tmp_path: Path) -> None:
    def remove(runner, record) -> None:
        if record["iteration"] == 1:
            shutil.rmtree(tmp_path / "run")

    with pytest.raises(UserError, match=r"run folder .*run disappeared during iteration 2; stopped"):
        small_run(tmp_path / "run", iterations=3, on_iteration=[remove])


def full_disk_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk is full when the run's logs close: the metrics file is /dev/full (every write, and the flush at
    close, fails with ENOSPC) and TensorBoard's writer cannot flush or close."""
    from torch.utils.tensorboard import SummaryWriter

    from syncfree.train import logger

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real_open = open
    monkeypatch.setattr(logger, "open", lambda path, *args, **kwargs: real_open("/dev/full", *args, **kwargs),
                        raising=False)
    monkeypatch.setattr(SummaryWriter, "flush", full)
    monkeypatch.setattr(SummaryWriter, "close", full)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_logs_that_cannot_be_written_as_the_run_closes_are_one_warning(tmp_path: Path, monkeypatch, caplog,
                                                                       capsys) -> None:
    """Closing the logs on a full disk: one warning names each log that lost records, no traceback (it was three
    chained ones), and the run's last line still says where its checkpoint is."""
    pytest.importorskip("tensorboard")
    full_disk_at_the_end(monkeypatch)
    with caplog.at_level(logging.INFO, logger="syncfree"):
        assert main(["train", "--task", "pendulum", "--iterations", "2", "--env.num_envs", "8", "--ppo.steps_per_env",
                     "4", "--perf.compile", "off", "--log.progress", "false", "--log.tensorboard", "true",
                     "--log.dir", str(tmp_path), "--log.run_name", "run"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    closing = [r.getMessage() for r in caplog.records if r.getMessage().startswith("closing the run's logs")]
    run = tmp_path / "run"
    assert closing == [f"closing the run's logs: {run / 'metrics.jsonl'} (No space left on device), TensorBoard's "
                       f"{run / 'tensorboard'} (No space left on device) not written in full; their last records "
                       "may be missing"], caplog.text
    assert re.fullmatch(rf"done at iteration 2 .*; checkpoint {re.escape(str(run / 'latest.pt'))}",
                        caplog.records[-1].getMessage()), caplog.text


def test_a_metrics_write_that_fails_is_a_warning_and_training_goes_on(tmp_path: Path, monkeypatch, caplog) -> None:
    def full_disk(self, record) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RunLogger, "log", full_disk)
    with caplog.at_level(logging.WARNING, logger="syncfree"):
        result = small_run(tmp_path / "run", iterations=3)
    assert result.record["iteration"] == 3
    assert caplog.text.count("metrics not written") == 1 and "No space left on device" in caplog.text
    assert syncfree.load(tmp_path / "run" / "latest.pt").iteration == 3
