"""Where each perf switch is read: found by a walk over the package's source (every attribute read `perf.<name>`,
`self.perf.<name>`, `cfg.perf.<name>`, ...), and observed at run time by a `PerfConfig` that records which source
file read which switch and the value it got (`RecordingPerf`). The budget and wiring tests and the planted cuts
share both."""

from __future__ import annotations

import ast
import dataclasses
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import syncfree
from syncfree.config import PerfConfig

PACKAGE = Path(syncfree.__file__).parent
"""The package imported (the planted cuts' copy under a cut)."""
SWITCHES = frozenset(f.name for f in PerfConfig.switches())


def _reads(tree: ast.AST) -> Iterator[ast.Attribute]:
    """The attribute reads `<...>perf.<switch>` of a module, in source order."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in SWITCHES and isinstance(node.ctx, ast.Load)
                and ((isinstance(node.value, ast.Name) and node.value.id == "perf")
                     or (isinstance(node.value, ast.Attribute) and node.value.attr == "perf"))):
            yield node


def readers(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Switch -> the files (relative to the package) that read it."""
    found: dict[str, set[str]] = {name: set() for name in SWITCHES}
    for path in sorted(package.rglob("*.py")):
        for node in _reads(ast.parse(path.read_text())):
            found[node.attr].add(path.relative_to(package).as_posix())
    return found


def unwired(switch: str, relative: str, package: Path = PACKAGE) -> list[tuple[str, str, str]]:
    """Edits that drop a file's wiring of `switch`: every read of it there replaced by the switch's default value,
    as if the file ignored the config (each edit one whole source line, so it replaces no text elsewhere)."""
    text = (package / relative).read_text()
    lines = text.splitlines(keepends=True)
    value = repr(getattr(PerfConfig(), switch))
    by_line: dict[int, list[ast.Attribute]] = {}
    for node in _reads(ast.parse(text)):
        if node.attr == switch:
            assert node.end_lineno == node.lineno, f"{relative}:{node.lineno}: a read over several lines"
            by_line.setdefault(node.lineno, []).append(node)
    edits, current = [], text
    for lineno, nodes in sorted(by_line.items()):
        old = new = lines[lineno - 1]
        for node in sorted(nodes, key=lambda n: -n.col_offset):  # from the right: offsets to the left stay valid
            start, end = _char_offset(old, node.col_offset), _char_offset(old, node.end_col_offset or 0)
            new = new[:start] + value + new[end:]
        if old in current:  # else an earlier edit replaced this line too (a line that ends another one)
            current = current.replace(old, new)
            edits.append((relative, old, new))
    return edits


def _char_offset(line: str, byte_offset: int) -> int:
    return len(line.encode()[:byte_offset].decode())


READS: set[tuple[str, str, str]] = set()
"""(switch, file under the package, repr of the value read), as `RecordingPerf` saw them."""


@dataclasses.dataclass
class RecordingPerf(PerfConfig):
    """A `PerfConfig` that records every read of a switch from a file of the package, with the value read."""

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name in SWITCHES:
            where = sys._getframe(1).f_code.co_filename
            if where.startswith(str(PACKAGE)):
                READS.add((name, Path(where).relative_to(PACKAGE).as_posix(), repr(value)))
        return value


def recording(perf: PerfConfig) -> RecordingPerf:
    return RecordingPerf(**{f.name: getattr(perf, f.name) for f in PerfConfig.switches()})


@contextmanager
def recorded_reads() -> Iterator[set[tuple[str, str, str]]]:
    """The reads `RecordingPerf` configs see inside the block."""
    READS.clear()
    seen: set[tuple[str, str, str]] = set()
    try:
        yield seen
    finally:
        seen |= READS
        READS.clear()
