"""A host simulator's envs in a worker process: shared arrays, and a process that steps what it owns into them.

`SharedArrays` lays named numpy arrays out in one block of shared memory (`multiprocessing.shared_memory`), which a
child process attaches by name: what the worker's simulator writes there is what this process reads, nothing is
pickled or copied. `HostWorker` starts one such process (a fresh interpreter: no state of this process is
inherited, so a torch or compiler thread here cannot deadlock it), builds the simulator's part there from a
picklable factory, and sends it one method call at a time over a socket pair (`call` then `wait`, so this process
can work in between); each side polls the socket for a moment before it sleeps on it (`SPIN_SECONDS`). An
exception in the worker comes back as one `UserError` line naming the call; a worker that died is named with its
exit code; one that stays silent (a simulator that hangs) is named in a warning (`SILENT_SECONDS`), and `close`
kills it if it does not stop within `GRACE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing.connection
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from syncfree.errors import STOP_SIGNALS, UserError

log = logging.getLogger("syncfree")

ALIGN = 64
"""Each array starts at a multiple of this many bytes."""

Layout = dict[str, tuple[tuple[int, ...], str]]
"""Array name -> (shape, numpy dtype string)."""


SPIN_SECONDS = 0.002
"""How long either side of a call polls the socket before it blocks on it (with a second core; on one, polling
would keep the other side from running). A process blocked on a socket is woken by the scheduler, which takes tens
of microseconds, twice per call (the worker's wake-up, then the caller's); a step of a few envs takes about a
millisecond, and the gap between two steps (the policy's act) less, so both sides poll through it and block only
through longer pauses (the update)."""


SILENT_SECONDS = 30.0
"""A call the worker has not answered after this long is named in one warning: its simulator may hang, and nothing
but a second Ctrl-C (or SIGTERM) ends the run then. A step or reset of a host simulator's envs takes milliseconds,
building them in the worker a few seconds."""

GRACE_SECONDS = 3.0
"""How long `close` lets the worker finish the call it is in, close its envs and exit before it kills the worker
(one whose simulator hangs never answers). Closing a worker that answers takes a fraction of this."""


def arrived(conn: multiprocessing.connection.Connection, spin: float, timeout: float | None) -> bool:
    """Whether a message waits on `conn`: polled for up to `spin` seconds, then slept on for up to `timeout` (None:
    until one comes). The syscalls of a plain poll-then-read: the time limit rides on the sleeping poll."""
    end = time.perf_counter() + spin
    while time.perf_counter() < end:
        if conn.poll(0):
            return True
    return conn.poll(timeout)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, which a container's CPU set narrows)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def worth_a_worker(num_envs: int) -> bool:
    """Whether splitting `num_envs` envs with a worker process can gain anything here: at least 2 envs, and a
    second core for the worker (on one, the two halves take turns and the round trip is pure cost)."""
    return num_envs > 1 and usable_cores() > 1


class SharedArrays:
    """Named arrays in one shared-memory block. `SharedArrays(layout)` creates the block (this process owns it and
    `close()` frees it); `SharedArrays.attach(handle)` maps the same block in another process. The block is freed
    at `close()`, when the object is collected, or at the latest when this process exits."""

    def __init__(self, layout: Layout, _name: str | None = None) -> None:
        self.layout = layout
        offsets, end = {}, 0
        for key, (shape, dtype) in layout.items():
            offsets[key] = end
            end += -(-math.prod(shape) * np.dtype(dtype).itemsize // ALIGN) * ALIGN
        self.owner = _name is None
        self._shm = SharedMemory(create=True, size=max(end, 1)) if self.owner else SharedMemory(name=_name)
        if not self.owner:  # the creator frees the block; an attached process must not have it freed at its exit
            resource_tracker.unregister(self._shm._name, "shared_memory")  # type: ignore[attr-defined]
        self.arrays = {key: np.ndarray(shape, np.dtype(dtype), self._shm.buf, offsets[key])
                       for key, (shape, dtype) in layout.items()}
        self._release = weakref.finalize(self, _release, self._shm, self.owner)  # at close, collection or exit
        if self.owner:
            for array in self.arrays.values():
                array.fill(0)

    @property
    def handle(self) -> tuple[Layout, str]:
        """What another process needs to attach the block (picklable)."""
        return self.layout, self._shm.name

    @classmethod
    def attach(cls, handle: tuple[Layout, str]) -> SharedArrays:
        layout, name = handle
        return cls(layout, _name=name)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def close(self) -> None:
        self.arrays = {}
        self._release()


def _release(shm: SharedMemory, owner: bool) -> None:
    """Unmap the block (unless an array view is still alive: then the mapping goes with the process) and, in the
    process that created it, free it."""
    with contextlib.suppress(BufferError):
        shm.close()
    if owner:
        shm.unlink()


def _serve(conn: multiprocessing.connection.Connection) -> None:
    """The worker process: build the part from the shared arrays, then answer calls until told to stop."""
    handle, factory, args, spin = conn.recv()
    arrays = SharedArrays.attach(handle)
    try:
        part = factory(arrays, *args)
        conn.send(("ok", None))
    except BaseException as e:  # reported to the parent, which raises it as one line
        conn.send(("error", f"building it: {_one_line(e)}"))
        arrays.close()
        return
    try:
        while True:
            arrived(conn, spin, None)
            message = conn.recv()
            if message is None:
                break
            method, call_args = message
            try:
                conn.send(("ok", getattr(part, method)(*call_args)))
            except BaseException as e:
                conn.send(("error", f"{method}: {_one_line(e)}"))
    except EOFError:  # the parent went away
        pass
    finally:
        close = getattr(part, "close", None)
        if close is not None:
            close()
        arrays.close()


def _exit_with_parent(fd: int) -> None:
    """End this process once the trainer's end of the socket `fd` is closed (the trainer exited, even killed or
    ended at once by a third Ctrl-C), though the call it serves never returns; runs in a thread of its own, asleep
    until then."""
    poller = select.poll()
    poller.register(fd, select.POLLRDHUP)
    poller.poll()
    os._exit(1)


def _one_line(e: BaseException) -> str:
    where = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    at = f" (at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno})" if where else ""
    return f"{type(e).__name__}: {' '.join(str(e).split())}{at}"


class HostWorker:
    """One worker process owning part of a host simulator. `factory(arrays, *args)` builds that part in the worker
    from the attached `SharedArrays` (`factory` and `args` are pickled: a class or function importable by name);
    `call(method, *args)` runs `part.method(*args)` there while this process goes on, `wait()` returns its result.
    `name` says what the worker holds in error messages.

    The worker is a fresh interpreter (`python -m syncfree.envs.adapters.host_worker`) joined to this one by a
    socket pair: it inherits no thread or lock of this process (as `spawn` would not), and, unlike
    multiprocessing's `spawn`, it does not import the caller's main script again, so a script without an
    `if __name__ == "__main__":` guard starts it safely. It exits when told to, or when this process goes away; it
    ignores Ctrl-C, which reaches the trainer, whose `close()` then stops it (a second Ctrl-C while the worker does
    not answer ends the run: `close` kills the worker after `GRACE_SECONDS`)."""

    def __init__(self, name: str, arrays: SharedArrays, factory: Callable[..., Any], *args: Any) -> None:
        self.name = name
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno())],
                                            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        self._conn = multiprocessing.connection.Connection(ours.detach())
        self._pending = False
        self._call = f"{getattr(factory, '__name__', 'factory')}(...)"
        """The call the worker was last given (named when it is silent)."""
        self.spin = SPIN_SECONDS if usable_cores() > 1 else 0.0
        """How long each side polls before it blocks (`SPIN_SECONDS`; 0 where the process may run on one core)."""
        try:
            self._send((arrays.handle, factory, args, self.spin))
            self.wait()  # built, or the builder's error
        except BaseException:
            self.close()
            raise

    def _send(self, message: Any) -> None:
        if self._pending:
            raise RuntimeError(f"{self.name}: a call is already running (wait() for it first)")
        try:
            self._conn.send(message)
        except OSError:  # BrokenPipeError and ConnectionResetError among them
            raise UserError(self._died()) from None
        self._pending = True

    def call(self, method: str, *args: Any) -> None:
        self._send((method, args))
        self._call = f"{method}(...)"

    def wait(self) -> Any:
        try:
            if not arrived(self._conn, self.spin, SILENT_SECONDS):
                log.warning("%s (worker process): its %s has not returned in %g s; still waiting (a simulator that "
                            "hangs never returns: a second Ctrl-C ends the run)", self.name, self._call, SILENT_SECONDS)
            status, value = self._conn.recv()
        except (EOFError, OSError):
            self._pending = False
            raise UserError(self._died()) from None
        self._pending = False
        if status == "error":
            raise UserError(f"{self.name} (worker process): {value}")
        return value

    def _died(self) -> str:
        try:
            code = self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        return f"{self.name}: its worker process exited (code {code})"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Stop the worker; one that has not stopped within `GRACE_SECONDS`, or whose stopping is interrupted,
        is killed."""
        try:
            if self.alive and not self._stopped():
                log.warning("%s (worker process): not stopped within %g s of closing (its last call: %s); killed "
                            "it", self.name, GRACE_SECONDS, self._call)
        finally:
            if self.alive:
                self.process.kill()
                self.process.wait()
            self._pending = False
            self._conn.close()

    def _stopped(self) -> bool:
        """Tell the worker to stop once it has answered the call it is in; whether it exited within
        `GRACE_SECONDS`."""
        deadline = time.monotonic() + GRACE_SECONDS
        try:
            if self._pending:
                if not self._conn.poll(GRACE_SECONDS):
                    return False
                self._conn.recv()
            self._conn.send(None)
            self.process.wait(max(0.0, deadline - time.monotonic()))
        except (EOFError, OSError):  # it went away by itself
            pass
        except subprocess.TimeoutExpired:
            return False
        return True


__all__ = ["HostWorker", "SharedArrays", "usable_cores", "worth_a_worker"]


if __name__ == "__main__":
    for signum in STOP_SIGNALS:  # Ctrl-C, SIGTERM to the group, a closed terminal: the trainer's to handle; it then
        signal.signal(signum, signal.SIG_IGN)  # stops the worker
    if hasattr(select, "POLLRDHUP"):  # Linux
        threading.Thread(target=_exit_with_parent, args=(int(sys.argv[1]),), daemon=True).start()
    _serve(multiprocessing.connection.Connection(int(sys.argv[1])))
