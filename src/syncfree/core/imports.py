"""`module:name` references to a user's own code (an env factory, a mirror function): the current folder is
importable, as with `python -m`; what cannot be found is one line naming it."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable
from typing import Any, cast

from syncfree.errors import UserError

NAME = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
"""`package.module:callable`."""


def is_callable_name(name: str) -> bool:
    return NAME.fullmatch(name) is not None


def load_callable(name: str, what: str) -> Callable[..., Any]:
    """The callable `name` (`module:attribute`) refers to; a `UserError` beginning with `what` naming what is
    missing when it cannot be found."""
    module_name, _, attr = name.partition(":")
    if not is_callable_name(name):
        raise UserError(f"{what} is not module:function")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # the current folder, as `python -m` has it
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UserError(f"{what}: cannot import {module_name!r} ({e}); run from the folder that holds it or put it "
                        "on PYTHONPATH") from None
    found = getattr(module, attr, None)
    if not callable(found):
        raise UserError(f"{what}: {module_name} has no callable {attr!r}")
    return cast(Callable[..., Any], found)
