"""`module:name` references to a user's own code (an env factory, a mirror function), and who may have them imported.

A checkpoint or config file is data: a reference it holds (a `module:factory` task, a `gym:<module>:<id>` task, a
`symmetry.mirror`) is imported only when the command line or call that opened the file names the same reference too,
or trusts its files (`UserNames`); otherwise one line says what the file names and how to allow it, before anything is
imported. Outside a command or call that opens files, code imports what it is given (it is the user's own). The
`syncfree` command makes the current folder importable for what it allows, as `python -m` does; in Python, a
module imports as any import of the program does (`sys.path`).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

from syncfree.errors import UserError

NAME = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
"""`package.module:callable`."""

NAMING_OPTIONS = ("--task", "--symmetry.mirror", "--env")
"""The command-line options whose value names code to import (`--env`: the doctor's factory)."""
TRUST = "--trust"
"""The command-line flag that allows every reference the command's files name."""
TRUST_HELP = ("A module:name that a checkpoint or config file names (a task module:factory or gym:<module>:<id>, "
              "symmetry.mirror) is imported only when this command line names it too (--task, --symmetry.mirror) "
              "or with --trust.")
"""What `syncfree train --help` says of it."""
REFERENCE_KEYS = (("task",), ("symmetry", "mirror"))
"""Where a stored config holds references (the refusal names the file that gave one)."""


@dataclass(frozen=True)
class UserNames:
    """What the running command or call may import: the references its user gave (`given`), and with `trust` any
    that its files name."""

    given: frozenset[str] = frozenset()
    trust: bool = False
    how: str = "name it in the call ({key}={name!r}) or pass trust=True"
    """How to allow a reference, for the refusal's line (`{key}`, `{name}` filled in)."""
    source: str = "a checkpoint or config file"
    """Where a reference it did not give comes from, unless `files` knows."""
    current_folder: bool = False
    """Make the current folder importable for what it allows, as `python -m` does (the `syncfree` command)."""
    files: dict[str, str] = field(default_factory=dict, compare=False)
    """The file that named each reference read so far (`note_file`)."""

    def allows(self, name: str) -> bool:
        return self.trust or name in self.given


_ACTIVE: ContextVar[UserNames | None] = ContextVar("syncfree_user_names", default=None)
"""The running command's or call's names; None in code that opens no file for the user (it imports what it is
given)."""


@contextmanager
def user_names(names: UserNames | None) -> Iterator[None]:
    """Run the body as the command or call that gave `names`."""
    token = _ACTIVE.set(names)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active() -> UserNames | None:
    """The running command's or call's names, for what it loads to keep (a checkpoint's policy makes envs later)."""
    return _ACTIVE.get()


def from_command_line(argv: Sequence[str]) -> UserNames:
    """The references a `syncfree` command line gives (`--task`, `--symmetry.mirror`, `--env`, as `--opt value` or
    `--opt=value`) and whether it trusts its files (`--trust`)."""
    given = set()
    for i, arg in enumerate(argv):
        option, equals, value = arg.partition("=")
        if option in NAMING_OPTIONS:
            given.add(value if equals else argv[i + 1] if i + 1 < len(argv) else "")
    return UserNames(frozenset(given), TRUST in argv, "repeat it on the command line (--{key} {name}) or pass --trust",
                     current_folder=True)


def note_file(config: Any, source: str) -> None:
    """Remember that the file `source` (a stored config, `config`) named its references, for a refusal's line."""
    names = _ACTIVE.get()
    if names is None or not isinstance(config, Mapping):
        return
    for path in REFERENCE_KEYS:
        value: Any = config
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, str) and value:
            names.files.setdefault(value, source)


def allow_import(name: str, key: str, module: str) -> None:
    """Refuse, in one line and before it is imported, a reference (`key`: where a config holds it) that only a file
    gave; for one allowed on the `syncfree` command line, make the current folder importable."""
    names = _ACTIVE.get()
    if names is None:
        return
    if not names.allows(name):
        source = names.files.get(name, names.source)
        raise UserError(f"{source} names {key} {name!r}, code in module {module!r}: a file's code runs only when you "
                        f"name it too; {names.how.format(key=key, name=name)}")
    if names.current_folder and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # the current folder, as `python -m` has it


def is_callable_name(name: str) -> bool:
    return NAME.fullmatch(name) is not None


def load_callable(name: str, what: str) -> Callable[..., Any]:
    """The callable `name` (`module:attribute`) refers to; a `UserError` beginning with `what` naming what is
    missing when it cannot be found."""
    module_name, _, attr = name.partition(":")
    if not is_callable_name(name):
        raise UserError(f"{what} is not module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UserError(f"{what}: cannot import {module_name!r} ({e}); put its folder on PYTHONPATH (the syncfree "
                        "command also finds it in the current folder)") from None
    found = getattr(module, attr, None)
    if not callable(found):
        raise UserError(f"{what}: {module_name} has no callable {attr!r}")
    return cast(Callable[..., Any], found)
