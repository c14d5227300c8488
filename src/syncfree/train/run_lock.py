"""One writer per run folder: `<run>/.lock` names the process that trains into it (pid, host, start time).

Two processes writing one run folder (two resumes of one checkpoint, a new run given a name in use) would
overwrite each other's `latest.pt` and interleave their metrics. The lock is taken with an exclusive create when
a runner opens the folder and removed when it closes; a lock left by a process that is gone (killed, crashed) on
this host is stale and taken over with a line saying so. A lock of another host cannot be checked from here: the
message says how to remove it if that process is gone.
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
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
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
                    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder.get("since", 0))))
                    if holder["host"] != me["host"]:
                        raise UserError(f"run folder {self.path.parent}: in use by process {holder['pid']} on host "
                                        f"{holder['host']} since {since}; two processes writing one run would mix "
                                        f"its checkpoints and metrics (if that process is gone, delete "
                                        f"{self.path})") from None
                    if _alive(holder["pid"]):
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
