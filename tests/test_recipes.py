"""CONTRIBUTING.md's recipes, run as written: its code blocks are added to a copy of the package (a task: its env
and one registry module; a switch: one field of `PerfConfig`) or loaded beside it (an algorithm), and the result is
used as a user would."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import syncfree

ROOT = Path(__file__).parents[1]
PACKAGE = Path(syncfree.__file__).parent


def recipe_blocks() -> dict[str, str]:
    """The Python blocks of CONTRIBUTING.md, by the path their first line names (`# file:` or `# insert into:`)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    blocks = {}
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        first = block.splitlines()[0]
        match = re.match(r"# (file|insert into): (\S+)", first)
        if match:
            blocks[match.group(2).rstrip(",")] = block
    return blocks


def copy_package(tmp_path: Path) -> Path:
    """A copy of the installed package under `tmp_path/src`, caches left out; returns `tmp_path/src`."""
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "syncfree", ignore=shutil.ignore_patterns("__pycache__"))
    return src


CLI_RUNNER = """
    import contextlib, io, json, sys
    from syncfree.cli import main

    def run(*argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as e:
                code = e.code
        return {"code": code, "out": out.getvalue(), "err": err.getvalue()}
"""


def run_in(src: Path, script: str, cwd: Path) -> dict:
    """Run `script` after `CLI_RUNNER`, with the copy at `src` first on the path; it prints one JSON object,
    returned."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "TORCH_COMPILE_DISABLE": "1"}
    code = textwrap.dedent(CLI_RUNNER) + textwrap.dedent(script)
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_task_is_its_env_and_one_registry_module(tmp_path: Path) -> None:
    blocks = recipe_blocks()
    env_file, task_file = "src/syncfree/envs/builtin/reach.py", "src/syncfree/tasks/reach.py"
    assert set(blocks) >= {env_file, task_file}
    src = copy_package(tmp_path)
    before = {p.relative_to(src) for p in src.rglob("*.py")}
    for name in (env_file, task_file):
        (tmp_path / name).write_text(blocks[name])
    assert {p.relative_to(src) for p in src.rglob("*.py")} - before == {Path("syncfree/envs/builtin/reach.py"),
                                                                         Path("syncfree/tasks/reach.py")}
    result = run_in(src, """
        common = ["--env.num_envs", "16", "--ppo.steps_per_env", "8", "--log.progress", "false", "--log.dir", "runs"]
        results = {
            "tasks": run("tasks"),
            "help": run("train", "--task", "reach", "--help"),
            "bad": run("train", "--task", "reach", "--env.target", "3"),
            "train": run("train", "--task", "reach", "--env.target", "0.5", "--iterations", "2",
                         "--log.run_name", "r", *common),
            "eval": run("eval", "runs/r/latest.pt", "--num_envs", "4"),
            "play": run("play", "runs/r/latest.pt", "--video", "runs/r/play.gif", "--steps", "5"),
        }
        import syncfree
        record = syncfree.learn("reach", iterations=1, run_dir=False, log={"progress": False}).record
        results["learn"] = {"code": 0, "out": str(record["iteration"]), "err": ""}
        print(json.dumps(results))
    """, cwd=tmp_path)
    assert all(r["code"] == 0 for name, r in result.items() if name != "bad"), result
    assert re.search(r"^reach +a point on a line", result["tasks"]["out"], re.M)
    assert "--env.target" in result["help"]["out"] and "Where the point is pushed to" in result["help"]["out"]
    assert result["bad"]["code"] == 2 and "env.target=3.0 is invalid" in result["bad"]["err"]
    assert result["bad"]["err"].count("\n") == 1
    records = (tmp_path / "runs" / "r" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in records] == [1, 2]
    assert json.loads(records[-1])["env_steps"] == 2 * 16 * 8
    assert result["eval"]["out"].startswith("reach: mean return")
    assert (tmp_path / "runs" / "r" / "play.gif").stat().st_size > 0
    assert result["learn"]["out"] == "1"

    sys.path.insert(0, str(ROOT / "tests"))
    from test_layout import kind_and_task_branches

    assert kind_and_task_branches(src / "syncfree") == []  # nothing outside the registry asks for the new task


def tree(root: Path) -> dict[Path, bytes]:
    """Every Python file under `root` and its content."""
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*.py")}


@pytest.mark.slow
def test_an_algorithm_is_one_module_of_algo_that_trains_logs_resumes_exports_and_benches(tmp_path: Path) -> None:
    """CONTRIBUTING's REINFORCE, added as written: nothing but its own module changes in the package, and every
    command takes it."""
    pytest.importorskip("onnx")
    module = "src/syncfree/algo/reinforce.py"
    src = copy_package(tmp_path)
    before = tree(src)
    (tmp_path / module).write_text(recipe_blocks()[module])
    after = tree(src)
    assert {path for path in after if before.get(path) != after[path]} == {Path("syncfree/algo/reinforce.py")}
    result = run_in(src, """
        common = ["--env.num_envs", "16", "--reinforce.steps_per_env", "8", "--log.progress", "false",
                  "--log.dir", "runs"]
        results = {
            "train": run("train", "--task", "pendulum", "--algorithm", "reinforce", "--iterations", "2",
                         "--log.run_name", "r", *common),
            "resume": run("train", "--resume", "runs/r/latest.pt", "--iterations", "3", "--log.run_name", "r2",
                          "--log.progress", "false"),
            "eval": run("eval", "runs/r/latest.pt", "--num_envs", "4"),
            "export": run("export", "runs/r/latest.pt", "--out", "runs/onnx"),
            "switches": run("switches", "--task", "pendulum", "--algorithm", "reinforce"),
            "bench": run("bench", "--task", "pendulum", "--algorithm", "reinforce", "--num_envs", "[16]", "--repeats",
                         "1", "--iterations", "1", "--min_seconds", "0", "--compile", "false", "--threads", "1",
                         "--ablations", "false", "--out", "bench"),
            "help": run("train", "--task", "pendulum", "--algorithm", "reinforce", "--help"),
        }
        import syncfree
        from syncfree.bench.timing import count_iteration
        from syncfree.train.runner import Runner

        learned = syncfree.learn("pendulum", algorithm="reinforce", iterations=1, run_dir=False,
                                 env={"num_envs": 16}, reinforce={"steps_per_env": 8}, log={"progress": False})
        runner = Runner(learned.run.cfg)
        runner.learn(until=1)
        counts = count_iteration(runner)
        results["counts"] = {"code": 0, "out": json.dumps([counts["syncs_per_step"], counts["syncs_per_minibatch"],
                                                           counts["syncs_per_iteration"]]), "err": ""}
        print(json.dumps(results))
    """, cwd=tmp_path)
    assert all(r["code"] == 0 for r in result.values()), {k: r for k, r in result.items() if r["code"]}
    records = [json.loads(line) for line in (tmp_path / "runs" / "r2" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3]  # the resumed run carries the first run's records
    assert all(np.isfinite(r["policy_loss"]) and np.isfinite(r["value_loss"]) for r in records)
    assert result["eval"]["out"].startswith("pendulum: mean return")
    assert (tmp_path / "runs" / "onnx" / "pendulum-actor.onnx").stat().st_size > 0
    assert result["switches"]["out"].startswith("pendulum, reinforce")
    bench = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert bench["algorithm"] == "reinforce" and bench["sizes"][0]["configs"]["optimized"]["counts"]["syncs_per_step"] == 0
    assert "--reinforce.actor_learning_rate" in result["help"]["out"]
    assert json.loads(result["counts"]["out"]) == [0, 0, 1]  # no host read per step or per update; one per iteration

    sys.path.insert(0, str(ROOT / "tests"))
    from test_layout import algorithm_specific_code, kind_and_task_branches

    assert kind_and_task_branches(src / "syncfree") == [] and algorithm_specific_code(src / "syncfree") == []


@pytest.mark.slow
def test_a_switch_is_one_field_that_the_catalogue_bench_and_tests_then_see(tmp_path: Path) -> None:
    blocks = recipe_blocks()
    target = "src/syncfree/core/switches.py"
    block = blocks[target]
    anchor = re.search(r'before "(.*)"', block.splitlines()[0]).group(1)
    src = copy_package(tmp_path)
    path = tmp_path / target
    text = path.read_text()
    assert text.count(anchor) == 1
    path.write_text(text.replace(anchor, "\n".join(block.splitlines()[1:]) + "\n\n" + anchor))
    result = run_in(src, """
        from syncfree.bench.config import BenchConfig
        from syncfree.bench.matrix import bench_configurations
        from syncfree.core.switches import PerfConfig

        rows = [name for name, _ in bench_configurations(BenchConfig(task="cartpole", num_envs=[64], ablations=True,
                                                                     compile=False).resolved())]
        print(json.dumps({"listed": run("switches")["out"], "grid": run("switches", "--task", "grid-arena")["out"],
                          "baseline": PerfConfig.preset("baseline").reuse_toy_buffer,
                          "optimized": PerfConfig().reuse_toy_buffer, "rows": rows}))
    """, cwd=tmp_path)
    assert "reuse_toy_buffer: baseline=False optimized=True" in result["listed"]
    assert "Keep the toy buffer between steps" in result["listed"]
    assert re.search(r"reuse_toy_buffer: .*INERT: acts only in the feed-forward algorithm", result["grid"])
    assert (result["baseline"], result["optimized"]) == (False, True)
    assert {"optimized - reuse_toy_buffer", "baseline + reuse_toy_buffer"} <= set(result["rows"])
    # the catalogue's own test now asks for the rest of the recipe: an effect test (then its catalogue row)
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    checks = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" /
                             "test_switch_effects.py"), "-k", "every_switch_names_an_effect_test"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert "1 failed" in checks.stdout and "reuse_toy_buffer" in checks.stdout, checks.stdout[-2000:]


def test_an_algorithm_is_chosen_by_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    import torch

    from syncfree import algo
    from syncfree.tasks import preset, with_algorithm
    from syncfree.train.runner import Runner

    source = tmp_path / "sign_ppo.py"
    source.write_text(recipe_blocks()["src/syncfree/algo/sign_ppo.py"])
    spec = importlib.util.spec_from_file_location("sign_ppo", source)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "sign_ppo", module)  # a dataclass reads its module's names
    spec.loader.exec_module(module)
    monkeypatch.setitem(algo.ALGORITHMS, "sign-ppo", module.SignPPO)

    cfg = with_algorithm(preset("pendulum"), "sign-ppo")
    cfg.env.num_envs, cfg.ppo.steps_per_env, cfg.iterations, cfg.log.progress = 16, 8, 2, False
    cfg.perf.compile = "off"
    assert algo.algorithm_for(cfg) is module.SignPPO
    runner = Runner(cfg)
    record = runner.learn()
    assert isinstance(runner.algorithm, module.SignPPO) and record["iteration"] == 2
    assert set(runner.algorithm.storage.advantages.unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert torch.isfinite(torch.tensor(record["value_loss"]))
    assert algo.algorithm_for(preset("pendulum")) is algo.FeedForwardPPO  # other configs keep theirs
