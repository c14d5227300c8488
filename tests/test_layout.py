"""The package's imports flow one way: core <- config, envs <- policy <- algo <- tasks <- train <- bench, export,
rsl_rl, cli.

The graph is read from the source (every `import` statement, function-local and type-checking ones included), so a
cycle or an upward import fails here before anyone runs the code that would reveal it."""

from __future__ import annotations

import ast
from pathlib import Path

import syncfree

ROOT = Path(syncfree.__file__).parent

LAYERS = {
    "errors": 0, "core": 0, "outputs": 0,
    "config": 1, "envs": 1,
    "policy": 2,
    "algo": 3,
    "tasks": 4,
    "train": 5,
    "bench": 6, "doctor": 6, "export": 6, "cli": 6, "api": 6, "plot": 6, "play": 6, "switches": 6, "__main__": 6,
    "rsl_rl": 6, "tuning": 6,
    "": 6,
}
"""Each top-level part's layer: a module may import its own layer's parts and those below, never above."""

APART = {("envs", "config"), ("config", "envs")}
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


OWNERS = ("algo", "tasks")
"""The parts that may ask which algorithm, policy kind or task they have: the algorithms and the task registry."""
KIND_NAMES = {"mlp", "token", "recurrent", "feedforward"}
"""Policy kinds and algorithm names."""


def kind_and_task_branches(root: Path = ROOT) -> list[str]:
    """`file:line` of every comparison outside `OWNERS` with a task name, a task family's prefix, a policy kind or
    an algorithm name (`==`, `!=`, `in`, `startswith`), and every read of a config's `policy.kind` there."""
    from syncfree.tasks import SOURCES, TASKS

    names = set(TASKS) | set(SOURCES) | KIND_NAMES
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in OWNERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            constants: list[ast.expr] = []
            if isinstance(node, ast.Compare):
                constants = [node.left, *node.comparators]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "startswith", "removeprefix"):
                constants = list(node.args)
            elif (isinstance(node, ast.Attribute) and node.attr == "kind" and isinstance(node.value, ast.Attribute)
                  and node.value.attr == "policy"):
                found.append(f"{relative}:{node.lineno}: policy.kind")
                continue
            values = [c.value for e in constants for c in ([e] if not isinstance(e, ast.Tuple | ast.List | ast.Set)
                                                           else e.elts) if isinstance(c, ast.Constant)]
            found += [f"{relative}:{node.lineno}: {v!r}" for v in values if isinstance(v, str) and v in names]
    return found


def test_only_the_algorithms_and_the_task_registry_ask_which_algorithm_policy_or_task_they_have() -> None:
    assert kind_and_task_branches() == []


def test_the_branch_check_sees_a_planted_branch(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "x.py").write_text('if cfg.task == "grid-arena" or name.startswith("gym:"):\n'
                                             '    kind = cfg.policy.kind\n'
                                             'if scope.algorithm in ("recurrent", "other"):\n    pass\n')
    (tmp_path / "algo").mkdir()
    (tmp_path / "algo" / "y.py").write_text('if cfg.policy.kind == "token":\n    pass\n')
    assert sorted(kind_and_task_branches(tmp_path)) == ["train/x.py:1: 'grid-arena'", "train/x.py:1: 'gym:'",
                                                        "train/x.py:2: policy.kind", "train/x.py:3: 'recurrent'"]


SETTINGS_OWNERS = ("algo", "policy", "tasks")
"""The parts that may read an algorithm's settings or ask for an algorithm's or a policy's class: the algorithms, the
policies and the task registry (whose presets are configs of an algorithm)."""


def owned_classes(root: Path = ROOT) -> set[str]:
    """The names of the classes `algo/` and `policy/` define."""
    return {node.name for part in ("algo", "policy") for path in (root / part).rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)}


def algorithm_sections() -> set[str]:
    """The sections of the algorithms' config types that a run's config does not have by itself (`ppo`, `policy`,
    `distill`, ...)."""
    import dataclasses

    from syncfree.algo import ALGORITHMS
    from syncfree.config import TrainConfig

    run = {f.name for f in dataclasses.fields(TrainConfig)}
    return {f.name for a in ALGORITHMS.values() for f in dataclasses.fields(a.config_type)} - run


def _names(node: ast.expr) -> list[str]:
    """The class names an `isinstance` second argument gives (a name, `module.Name`, a tuple or `A | B`)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Tuple):
        return [n for e in node.elts for n in _names(e)]
    if isinstance(node, ast.BinOp):
        return _names(node.left) + _names(node.right)
    return []


def _reads_a_config(node: ast.expr) -> bool:
    """Whether an expression is a config: a name (or an attribute) that says so (`cfg`, `self.cfg`, `loaded.config`)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name in ("cfg", "config") or name.endswith("_cfg") or name.endswith("_config")


def algorithm_specific_code(root: Path = ROOT, classes: set[str] | None = None,
                            sections: set[str] | None = None) -> list[str]:
    """`file:line` of every `isinstance`/`issubclass` check against a class of `algo/` or `policy/`, and of every
    read of an algorithm's section from a config, outside `SETTINGS_OWNERS`."""
    classes = owned_classes() if classes is None else classes
    sections = algorithm_sections() if sections is None else sections
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in SETTINGS_OWNERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2):
                found += [f"{relative}:{node.lineno}: isinstance {name}" for name in _names(node.args[1])
                          if name in classes]
            elif isinstance(node, ast.Attribute) and node.attr in sections and _reads_a_config(node.value):
                found.append(f"{relative}:{node.lineno}: .{node.attr}")
    return found


def test_only_the_algorithms_policies_and_tasks_read_an_algorithms_settings_or_ask_its_class() -> None:
    assert algorithm_specific_code() == []


def test_the_algorithm_check_sees_planted_reads_and_checks(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "x.py").write_text("if isinstance(runner.algorithm, (RecurrentPPO, int)):\n"
                                             "    steps = self.cfg.ppo.steps_per_env\n"
                                             "teacher = loaded.cfg.distill.teacher if issubclass(a, algo.Distillation) "
                                             "else None\n"
                                             "policy = runner.policy\n")
    (tmp_path / "algo").mkdir()
    (tmp_path / "algo" / "y.py").write_text("class RecurrentPPO:\n    steps = cfg.ppo.steps_per_env\n")
    assert owned_classes() >= {"RecurrentPPO", "Distillation", "ActorCritic", "PPOConfig"}
    assert algorithm_sections() >= {"ppo", "policy", "rnd", "symmetry", "losses", "distill"}
    assert sorted(algorithm_specific_code(tmp_path, {"RecurrentPPO", "Distillation"}, {"ppo", "distill"})) == [
        "train/x.py:1: isinstance RecurrentPPO", "train/x.py:2: .ppo", "train/x.py:3: .distill",
        "train/x.py:3: isinstance Distillation"]
