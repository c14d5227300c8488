"""`--task module:factory`: a user's env in every command; its checkpoints record the name as data, which `eval` and
`--resume` import only when the command line names it again."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from syncfree.cli import main
from syncfree.tasks import find_task, preset

MODULE = '''
from syncfree.envs.builtin.classic import Pendulum


def make(num_envs=12, device="cpu", seed=0):
    return Pendulum(num_envs, device, seed, max_episode_length=20)


def make_fixed(seed=0):
    """No num_envs: the env count is the factory's own."""
    return Pendulum(6, "cpu", seed)


def make_wrong():
    env = Pendulum(4, "cpu", 0)
    env.obs_shapes = {"policy": (5,), "critic": (5,)}
    return env


def make_nothing():
    return 42
'''


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> tuple[Path, str]:
    """The current folder holds the user's module (a name of its own per test: modules are imported once)."""
    name = f"user_envs_{request.node.name.split('[')[0][-20:]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path, name
    sys.modules.pop(name, None)


def test_eval_and_resume_of_a_factory_run_name_the_factory_again_export_needs_nothing(user_folder, capsys) -> None:
    folder, module = user_folder
    task = f"{module}:make"
    assert main(["train", "--task", task, "--iterations", "2", "--ppo.steps_per_env", "8", "--perf.compile", "off",
                 "--log.dir", "runs", "--log.run_name", "run", "--log.progress", "false"]) == 0
    run = folder / "runs" / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] == 2 * 12 * 8  # the factory's num_envs default is the preset's env count
    capsys.readouterr()
    assert main(["eval", str(run / "latest.pt"), "--env.num_envs", "3"]) == 2
    assert f"(--task {task}) or pass --trust" in capsys.readouterr().err
    assert main(["eval", str(run / "latest.pt"), "--env.num_envs", "3", "--task", task]) == 0
    assert capsys.readouterr().out.startswith(f"{task}: mean return")
    assert main(["export", str(run / "latest.pt"), "--out", str(folder / "exported")]) == 0
    assert (folder / "exported").is_dir() and any((folder / "exported").iterdir())
    assert main(["train", "--resume", str(run / "latest.pt"), "--resume_in_place", "true", "--iterations", "3",
                 "--log.progress", "false", "--task", task]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3]


def test_a_factory_without_num_envs_sets_the_count(user_folder, monkeypatch) -> None:
    folder, module = user_folder
    monkeypatch.syspath_prepend(str(folder))  # in Python, a module imports from sys.path
    assert preset(f"{module}:make_fixed").env.num_envs == 6
    assert main(["train", "--task", f"{module}:make_fixed", "--iterations", "1", "--ppo.steps_per_env", "4",
                 "--ppo.num_minibatches", "2", "--perf.compile", "off", "--log.progress", "false",
                 "--log.dir", "runs"]) == 0


@pytest.mark.parametrize(("factory", "line"), [
    ("make_fixed --env.num_envs 8", "env.num_envs=8, but the factory made 6 envs (it takes no num_envs argument"),
    ("make_wrong", "expected shape (4, 5)"),
    ("make_nothing", "the factory returned a int, neither a syncfree VecEnv nor an rsl_rl VecEnv"),
    ("absent", "has no callable 'absent'"),
])
def test_a_bad_factory_is_one_line(user_folder, capsys, factory: str, line: str) -> None:
    _, module = user_folder
    name, *extra = factory.split()
    assert main(["train", "--task", f"{module}:{name}", *extra, "--iterations", "1", "--perf.compile", "off",
                 "--log.progress", "false", "--log.dir", "runs"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and line in err, err


def test_a_missing_module_is_one_line_and_prefixes_stay_families(capsys) -> None:
    assert main(["train", "--task", "no_such_module_here:make", "--log.progress", "false"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot import 'no_such_module_here'" in err
    spec = find_task("gym:Pendulum-v1")
    assert spec is not None and spec.description == "the Gymnasium env Pendulum-v1"
