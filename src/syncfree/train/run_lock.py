"""One writer per run folder: `<run>/.lock` names the process that trains into it (pid, host, start time, command
line).

Two processes writing one run folder (two resumes of one checkpoint, a new run given a name in use) would
overwrite each other's `latest.pt` and interleave their metrics. The lock is taken with an exclusive create when
a runner opens the folder and removed when it closes; a lock left by a process that is gone (killed, crashed) on
this host is stale and taken over with a line saying so; one naming a live process that is not the run that took it
(its command line is not the one the lock records: the pid was reused) is said to be probably stale, with how to
remove it. A lock of another host cannot be checked from here: the message says how to remove it if that process is
gone.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from syncfree.errors import UserError

log = logging.getLogger("syncfree")

LOCK_NAME = ".lock"

WRITING_SECONDS = 10.0
"""How long after its creation an unreadable lock is taken to be one a starting process is writing."""


def command_line(pid: int) -> str | None:
    """The command line of process `pid` (Linux's `/proc/<pid>/cmdline`), or None where it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return " ".join(raw.decode(errors="replace").replace("\0", " ").split())


def _reused(holder: dict[str, Any]) -> str | None:
    """The command line of the live process a lock names, when it is not the process that took the lock (its pid
    reused since): another command line than the lock records, or, for a lock that records none, one that runs no
    Python; else None."""
    live = command_line(holder["pid"])
    if live is None:
        return None
    recorded = holder.get("command")
    if isinstance(recorded, str):
        return live if live != recorded else None
    return None if "python" in live.lower() or "syncfree" in live.lower() else live


def _when(taken: Any) -> str:
    """When a lock says it was taken, as a local time."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(taken)))
    except (TypeError, ValueError, OverflowError, OSError):
        return "an unknown time"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class RunLock:
    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_NAME
        self.held = False

    def holder(self) -> dict[str, Any] | None:
        """The lock file's content, or None when it cannot be read as one."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        ok = isinstance(data, dict) and isinstance(data.get("pid"), int) and isinstance(data.get("host"), str)
        return data if ok else None

    def _being_written(self) -> bool:
        """The lock file is younger than `WRITING_SECONDS`: a process created it and is writing its name into it (an
        unreadable lock is stale only once older)."""
        try:
            return time.time() - self.path.stat().st_mtime < WRITING_SECONDS
        except OSError:  # gone again: the next attempt sees
            return False

    def acquire(self) -> None:
        """Take the lock, or raise `UserError` naming the live process that holds it."""
        me: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        command = command_line(os.getpid())
        if command is not None:
            me["command"] = command
        for _ in range(3):  # another process may take or drop a stale lock between the attempts
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self.holder()
                if holder is None and self._being_written():
                    raise UserError(f"run folder {self.path.parent}: another process is taking its lock now (a run "
                                    "of the same name started at the same time); two processes writing one run would "
                                    f"mix its checkpoints and metrics (if none is, delete {self.path})") from None
                if holder is not None and holder["pid"] != me["pid"]:
                    since = _when(holder.get("since"))
                    if holder["host"] != me["host"]:
                        raise UserError(f"run folder {self.path.parent}: in use by process {holder['pid']} on host "
                                        f"{holder['host']} since {since}; two processes writing one run would mix "
                                        f"its checkpoints and metrics (if that process is gone, delete "
                                        f"{self.path})") from None
                    if _alive(holder["pid"]):
                        other = _reused(holder)
                        if other is not None:
                            shown = other if len(other) <= 60 else f"{other[:57]}..."
                            raise UserError(f"run folder {self.path.parent}: its lock names process {holder['pid']} "
                                            f"(since {since}), which is now `{shown}`, not the run that took it: the "
                                            "lock is probably stale (that run ended without removing it and its pid "
                                            f"was reused); delete {self.path} and start again") from None
                        raise UserError(f"run folder {self.path.parent}: in use by process {holder['pid']} since "
                                        f"{since}; two processes writing one run would mix its checkpoints and "
                                        "metrics (wait for it to end, or stop it)") from None
                    log.info("run folder %s: taking over the lock of process %d, which is gone", self.path.parent,
                             holder["pid"])
                self.path.unlink(missing_ok=True)  # stale, unreadable, or this process's own
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return
        raise UserError(f"run folder {self.path.parent}: could not take its lock {self.path}")

    def release(self) -> None:
        """Remove the lock if this process still holds it."""
        if self.held:
            holder = self.holder()
            if holder is None or holder["pid"] == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False
