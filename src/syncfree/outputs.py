"""Where a command writes, checked before it does any work: one line naming the path and the reason (a file where
a folder must be, a folder where a file must be, no permission), instead of a traceback after minutes of work."""

from __future__ import annotations

import os
import re
from pathlib import Path

from syncfree.errors import UserError


def task_file_name(task: str) -> str:
    """A task's name as one file or folder name: `gym:my_envs:Team/Walker-v0` -> `gym-my_envs-Team-Walker-v0`."""
    return re.sub(r"[^\w.-]", "-", task)


def _nearest_existing(path: Path) -> Path:
    """`path` or its nearest ancestor that exists."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or ".")


def _probe(folder: Path, flag: str, path: Path) -> None:
    """Create and remove a file in `folder` (permission bits do not bind every user: the write itself is asked)."""
    probe = folder / f".syncfree-write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot write in {folder} ({e.strerror or e})") from None


def check_output_dir(path: str | Path, flag: str) -> Path:
    """A folder a command will write files into (created later where missing)."""
    path = Path(path)
    existing = _nearest_existing(path)
    if not existing.is_dir():
        what = "is a file" if existing == path else f"cannot be made: {existing} is a file"
        raise UserError(f"{flag} {path}: {what}, not a folder")
    _probe(existing, flag, path)
    return path


def check_output_file(path: str | Path, flag: str) -> Path:
    """A file a command will write (its folder created later where missing)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a folder; give a file name")
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"{flag} {path}: the file exists and cannot be written")
    existing = _nearest_existing(path.parent)
    if not existing.is_dir():
        raise UserError(f"{flag} {path}: its folder cannot be made: {existing} is a file")
    _probe(existing, flag, path)
    return path
