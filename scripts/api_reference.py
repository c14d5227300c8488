"""Write `docs/api.md`, the Python API's reference, from the docstrings and signatures of the public objects.

    python scripts/api_reference.py          # rewrites docs/api.md
    python scripts/api_reference.py --check  # exit 1 when docs/api.md is not what the code says

`tests/test_docs.py` runs the check, so the page cannot drift from the code.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

import docstring_parser

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "api.md"

SECTIONS: list[tuple[str, list[str]]] = [
    ("Training and checkpoints", ["syncfree.learn", "syncfree.api.TrainResult", "syncfree.load", "syncfree.evaluate",
                                  "syncfree.train.evaluate.LoadedPolicy"]),
    ("Tuning", ["syncfree.tune", "syncfree.tuning.TuneResult"]),
    ("Your environment", ["syncfree.check_env", "syncfree.envs.api.VecEnv", "syncfree.envs.api.StepResult",
                          "syncfree.envs.api.ActionSpec"]),
    ("Between iterations", ["syncfree.config.CallbackConfig"]),
    ("rsl_rl's runner", ["syncfree.rsl_rl.OnPolicyRunner"]),
]
"""The reference's sections and the objects in each, by import path."""

INTRO = """# Python API

Generated from the docstrings by `python scripts/api_reference.py` (a test checks this page is current). The command
line is `syncfree --help`; every training option is a field of a task's config type (`syncfree train --task T
--help`), described in [training](training.md).
"""


def resolve(path: str) -> Any:
    module_name, _, name = path.rpartition(".")
    module = importlib.import_module(module_name)
    return getattr(module, name)


def clean(text: str | None) -> str:
    return inspect.cleandoc(text or "").strip()


def signature(obj: Any, name: str) -> str:
    """`name(a: int, *, b: str = 'x') -> T`, annotations as written in the source (not quoted)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    parts, star = [], False
    for p in sig.parameters.values():
        if p.name == "self":
            continue
        text = {p.VAR_POSITIONAL: f"*{p.name}", p.VAR_KEYWORD: f"**{p.name}"}.get(p.kind, p.name)
        if p.kind == p.KEYWORD_ONLY and not star:
            parts.append("*")
        star = star or p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)
        if p.annotation is not p.empty:
            text += f": {p.annotation if isinstance(p.annotation, str) else inspect.formatannotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {p.default!r}"
        parts.append(text)
    returns = sig.return_annotation
    tail = "" if returns is sig.empty else f" -> {returns if isinstance(returns, str) else inspect.formatannotation(returns)}"
    return f"{name}({', '.join(parts)}){tail}"


def field_docs(cls: type) -> dict[str, str]:
    """A dataclass's attribute docstrings (the strings under its fields)."""
    return {p.arg_name: " ".join((p.description or "").split())
            for p in docstring_parser.parse_from_object(cls).params}


def shown_name(path: str) -> str:
    """`syncfree.X` where the package exports the object under that name."""
    import syncfree

    name = path.rpartition(".")[2]
    try:
        exported = getattr(syncfree, name)
    except AttributeError:
        return path
    return f"syncfree.{name}" if exported is resolve(path) else path


def render_function(path: str, obj: Any) -> list[str]:
    return [f"### `{signature(obj, shown_name(path))}`", "", clean(obj.__doc__), ""]


def public_methods(cls: type) -> list[tuple[str, Any]]:
    out = []
    for name, member in cls.__dict__.items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(member, property):
            out.append((name, member))
        elif inspect.isfunction(member) or isinstance(member, (staticmethod, classmethod)):
            out.append((name, getattr(cls, name)))
    return out


def render_class(path: str, cls: type) -> list[str]:
    lines = [f"### `{shown_name(path)}`", "", clean(cls.__doc__), ""]
    if dataclasses.is_dataclass(cls):
        docs = field_docs(cls)
        lines += ["| field | default | |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            default = (repr(f.default) if f.default is not dataclasses.MISSING else
                       "(made)" if f.default_factory is not dataclasses.MISSING else "(required)")
            lines.append(f"| `{f.name}` | `{default}` | {docs.get(f.name, '')} |")
        lines.append("")
    elif hasattr(cls, "_fields"):  # a NamedTuple
        docs = field_docs(cls)
        lines += ["| field | |", "|---|---|", *(f"| `{name}` | {docs.get(name, '')} |" for name in cls._fields), ""]
    for name, member in public_methods(cls):
        if isinstance(member, property):
            text = clean(member.__doc__)
            lines += [f"- `{name}` (property)" + (f": {' '.join(text.split())}" if text else "")]
            continue
        text = clean(member.__doc__)
        if name == "__init__" and not text:
            continue
        lines += [f"- `{signature(member, name)}`" + (f": {' '.join(text.split())}" if text else "")]
    if lines[-1] != "":
        lines.append("")
    return lines


def render() -> str:
    lines = [INTRO]
    for title, paths in SECTIONS:
        lines += [f"## {title}", ""]
        for path in paths:
            obj = resolve(path)
            lines += render_class(path, obj) if inspect.isclass(obj) else render_function(path, obj)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/api.md differs from the code")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE} is not current: run python scripts/api_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
