"""A host simulator's worker process that stops answering (its simulator hangs): one warning names it, a second
Ctrl-C ends the wait, `close` kills it after the grace period, and it does not outlive the trainer's process."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncfree.envs.adapters import host_worker
from syncfree.envs.adapters.host_worker import HostWorker, SharedArrays

GRACE = 1.0
"""The grace period of these tests (`GRACE_SECONDS` is longer)."""


class Stalling:
    """A worker's part whose `step` never returns, as a simulator that hangs; `pid` answers."""

    def __init__(self, arrays: SharedArrays) -> None:
        self.arrays = arrays

    def pid(self) -> int:
        return os.getpid()

    def step(self) -> None:
        while True:
            time.sleep(3600)


def importable_here() -> str:
    """`PYTHONPATH` for a process that imports this module (the worker unpickles `Stalling` by its name)."""
    return os.pathsep.join([str(Path(__file__).parent), *filter(None, [os.environ.get("PYTHONPATH")])])


@pytest.fixture
def stalling(monkeypatch: pytest.MonkeyPatch) -> Iterator[HostWorker]:
    monkeypatch.setenv("PYTHONPATH", importable_here())
    monkeypatch.setattr(host_worker, "GRACE_SECONDS", GRACE)
    arrays = SharedArrays({"x": ((1,), "<f4")})
    worker = HostWorker("stalling envs 2-3", arrays, Stalling)
    yield worker
    worker.close()
    arrays.close()


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (an orphan's reaper may be slow, or absent in a container)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_close_kills_a_worker_that_does_not_answer_within_the_grace_period(stalling: HostWorker,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    stalling.call("step")
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="syncfree"):
        stalling.close()
    took = time.monotonic() - start
    assert GRACE <= took < GRACE + 1.0, took
    assert stalling.process.returncode == -signal.SIGKILL and not running(stalling.process.pid)
    assert [r.getMessage() for r in caplog.records] == [
        f"stalling envs 2-3 (worker process): not stopped within {GRACE:g} s of closing (its last call: step(...)); "
        "killed it"]


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler (KeyboardInterrupt), which a process started as a shell's background job lacks
    (it starts with SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_sigint")
def test_a_silent_worker_is_named_once_and_a_second_ctrl_c_ends_the_run(stalling: HostWorker,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A call unanswered for `SILENT_SECONDS` is named in one warning and the wait goes on; Ctrl-C (sent to this
    thread here; a trainer's second one raises KeyboardInterrupt) ends it, and `close`, as the trainer's exit calls
    it, kills the worker after the grace period."""
    assert stalling.call("pid") is None and stalling.wait() == stalling.process.pid  # it answers until it hangs
    monkeypatch.setattr(host_worker, "SILENT_SECONDS", 0.3)
    stalling.call("step")
    ctrl_c = threading.Timer(1.2, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    ctrl_c.start()
    with caplog.at_level(logging.WARNING, logger="syncfree"), pytest.raises(KeyboardInterrupt):
        stalling.wait()
    ctrl_c.join()
    assert [r.getMessage() for r in caplog.records] == [
        "stalling envs 2-3 (worker process): its step(...) has not returned in 0.3 s; still waiting (a simulator "
        "that hangs never returns: a second Ctrl-C ends the run)"]
    start = time.monotonic()
    stalling.close()
    assert time.monotonic() - start < GRACE + 1.0 and not running(stalling.process.pid)


def test_a_hung_worker_does_not_outlive_the_trainer_process(tmp_path: Path) -> None:
    """A trainer that ends at once (a third Ctrl-C during the grace period, a kill) leaves no worker behind, though
    the worker's call never returns."""
    script = tmp_path / "trainer.py"
    script.write_text(
        "import os, sys\n"
        "from syncfree.envs.adapters.host_worker import HostWorker, SharedArrays\n"
        "from test_host_worker import Stalling\n"
        "arrays = SharedArrays({'x': ((1,), '<f4')})\n"
        "worker = HostWorker('stalling envs 2-3', arrays, Stalling)\n"
        "worker.call('step')\n"
        "print(worker.process.pid, flush=True)\n"
        "os._exit(130)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": importable_here()})
    assert done.returncode == 130, done.stderr
    pid = int(done.stdout)
    deadline = time.monotonic() + 5.0
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(pid)


def test_the_stop_signals_are_left_to_the_trainer(stalling: HostWorker) -> None:
    """Ctrl-C reaches a terminal's whole process group, SIGTERM a SLURM step's every process, SIGHUP everything a
    closed terminal started: the worker ignores them, so the trainer can finish its iteration on the worker's envs,
    save, and stop it."""
    stalling.call("pid")
    pid = stalling.wait()
    assert pid == stalling.process.pid
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        os.kill(pid, signum)
    time.sleep(0.2)
    stalling.call("pid")
    assert stalling.wait() == pid
    assert running(pid)
