"""The package's imports flow one way: core <- envs <- policy <- algo <- train <- bench, export, cli.

The graph is read from the source (every `import` statement, function-local and type-checking ones included), so a
cycle or an upward import fails here before anyone runs the code that would reveal it."""

from __future__ import annotations

import ast
from pathlib import Path

import syncfree

ROOT = Path(syncfree.__file__).parent

LAYERS = {
    "errors": 0, "core": 0,
    "config": 1, "presets": 1, "envs": 1,
    "policy": 2,
    "algo": 3,
    "train": 4,
    "bench": 5, "doctor": 5, "export": 5, "cli": 5, "api": 5, "plot": 5, "play": 5, "__main__": 5, "": 5,
}
"""Each top-level part's layer: a module may import its own layer's parts and those below, never above."""

APART = {("envs", "config"), ("envs", "presets"), ("config", "envs"), ("presets", "envs")}
"""Parts of one layer that must not import each other: envs take the switches they read, not the whole config."""


def module_name(path: Path) -> str:
    parts = ["syncfree", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the syncfree modules it imports (a `from a import b` counts as importing `a.b` when that is a
    module, else `a`)."""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name and not name.startswith(t + "."))
    return graph


def part(module: str) -> str:
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else ""


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 50  # the whole package was read
    assert cycles(graph) == []


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a higher layer's module, or between parts kept apart."""
    upward = []
    for module, targets in graph.items():
        for target in targets:
            a, b = part(module), part(target)
            if LAYERS[b] > LAYERS[a] or (a, b) in APART:
                upward.append(f"{module} -> {target}")
    return sorted(upward)


def test_imports_flow_down_the_layers() -> None:
    assert upward_imports(import_graph()) == []


def test_every_part_has_a_layer() -> None:
    assert {part(m) for m in import_graph()} <= set(LAYERS)


def test_the_checks_see_a_planted_cycle_and_upward_imports() -> None:
    graph = {"syncfree.algo.a": {"syncfree.train.b"}, "syncfree.train.b": {"syncfree.algo.a"},
             "syncfree.envs.c": {"syncfree.config"}, "syncfree.config": set()}
    assert cycles(graph) == [["syncfree.algo.a", "syncfree.train.b"]]
    assert upward_imports(graph) == ["syncfree.algo.a -> syncfree.train.b", "syncfree.envs.c -> syncfree.config"]
