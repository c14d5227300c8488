"""A checkpoint or config file is data: the code its task (`module:factory`, `gym:<module>:<id>`) or its
`symmetry.mirror` names is imported only when the user names it too, or trusts the file; otherwise one line says what
the file names and how to allow it, before the module is imported."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import syncfree
from conftest import small_config
from syncfree.algo.settings import SymmetryConfig
from syncfree.cli import main
from syncfree.core.imports import from_command_line
from syncfree.errors import UserError
from syncfree.tasks import make_env, preset
from syncfree.train import checkpoint
from syncfree.train.run import Run

MODULE = '''
import pathlib

pathlib.Path(__file__).with_suffix(".imported").touch()  # the proof that it was imported

from syncfree.envs.builtin.classic import Pendulum


def make(num_envs=8, device="cpu", seed=0):
    return Pendulum(num_envs, device, seed, max_episode_length=10)


def mirror(env):
    return env.mirror()
'''


@dataclasses.dataclass
class Marker:
    """A module in the current folder (and on `sys.path`) that leaves a file behind when it is imported."""

    folder: Path
    name: str

    def imported(self) -> bool:
        return (self.folder / f"{self.name}.imported").exists() or self.name in sys.modules


@dataclasses.dataclass
class Files:
    """Checkpoints and config files that name the marker's code (and a plain Gymnasium run's, which names none)."""

    marker: Marker
    factory: Path
    gym_module: Path
    gym_plain: Path
    mirror: Path
    os_abort: Path
    config_task: Path
    config_mirror: Path


def rewritten(source: Path, target: Path, **config: object) -> Path:
    """A copy of the checkpoint `source` whose config has `config` in place of its own keys (a section as a dict)."""
    state = checkpoint.load(source)
    for key, value in config.items():
        state["config"][key] = value
    state["task"] = state["config"]["task"]
    checkpoint.save_atomic(state, target)
    return target


def trained(cfg, run: Path) -> Path:
    cfg.iterations = 1
    runner = Run(cfg, run)
    runner.learn()
    runner.close()
    return run / "latest.pt"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Files]:
    folder = tmp_path_factory.mktemp("files")
    marker = Marker(folder, f"marker_{uuid.uuid4().hex[:8]}")
    (folder / f"{marker.name}.py").write_text(textwrap.dedent(MODULE))
    pendulum = trained(small_config("pendulum"), folder / "pendulum")
    gym = trained(small_config("gym:Pendulum-v1"), folder / "gym")
    symmetric = small_config("point-mass")
    symmetric.symmetry = SymmetryConfig(augment=True)  # the env's own mirror
    point_mass = trained(symmetric, folder / "point-mass")
    env = {"num_envs": 32}  # the rows the runs were trained with
    config_task = folder / "task.yaml"
    config_task.write_text(yaml.safe_dump({"task": f"{marker.name}:make", "iterations": 1}))
    config_mirror = folder / "mirror.yaml"
    config_mirror.write_text(yaml.safe_dump({"task": "point-mass", "iterations": 1, "env": {"num_envs": 8},
                                             "symmetry": {"augment": True, "mirror": f"{marker.name}:mirror"}}))
    yield Files(marker, rewritten(pendulum, folder / "factory.pt", task=f"{marker.name}:make", env=env),
                rewritten(gym, folder / "gym-module.pt", task=f"gym:{marker.name}:Pendulum-v1"), gym,
                rewritten(point_mass, folder / "mirror.pt",
                          symmetry={"augment": True, "mirror": f"{marker.name}:mirror"}),
                rewritten(pendulum, folder / "os-abort.pt", task="os:abort", env=env), config_task, config_mirror)


@pytest.fixture
def marker(files: Files, monkeypatch: pytest.MonkeyPatch) -> Iterator[Marker]:
    """The marker, importable from the current folder and `sys.path`, forgotten again after each test."""
    monkeypatch.chdir(files.marker.folder)
    monkeypatch.syspath_prepend(str(files.marker.folder))
    yield files.marker
    sys.modules.pop(files.marker.name, None)
    (files.marker.folder / f"{files.marker.name}.imported").unlink(missing_ok=True)


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(("command", "file", "says"), [
    (["eval"], "factory", "names task '{m}:make', code in module '{m}'"),
    (["eval"], "gym_module", "names task 'gym:{m}:Pendulum-v1', code in module '{m}'"),
    (["play"], "gym_module", "names task 'gym:{m}:Pendulum-v1'"),
    (["eval"], "os_abort", "names task 'os:abort', code in module 'os'"),
    (["train", "--log.progress", "false", "--resume"], "factory", "names task '{m}:make'"),
    (["train", "--log.progress", "false", "--resume"], "mirror", "names symmetry.mirror '{m}:mirror'"),
    (["train", "--log.progress", "false", "--config"], "config_task", "config file {path} names task '{m}:make'"),
    (["train", "--log.progress", "false", "--config"], "config_mirror",
     "config file {path} names symmetry.mirror '{m}:mirror'"),
])
def test_a_file_naming_code_is_refused_in_one_line_before_the_import(command: list[str], file: str, says: str,
                                                                    files: Files, marker: Marker, capsys) -> None:
    path = getattr(files, file)
    err = refused([command[0], *command[1:], str(path)], capsys)
    assert says.format(m=marker.name, path=path) in err, err
    assert "or pass --trust" in err
    if command[0] != "train" or "--resume" in command:
        assert f"checkpoint {path}" in err
    assert not marker.imported()
    assert not (marker.folder / "runs").exists()  # a refused run leaves no folder


def test_export_and_load_read_a_factory_checkpoint_without_importing_it(files: Files, marker: Marker,
                                                                          tmp_path: Path, capsys) -> None:
    assert main(["export", str(files.factory), "--out", str(tmp_path / "onnx")]) == 0
    loaded = syncfree.load(files.factory)
    assert loaded.cfg.task == f"{marker.name}:make" and not marker.imported()
    with pytest.raises(UserError, match=r"names task .*: a file's code runs only when you name it too; load it with "
                                        r"trust=True, or make its env yourself"):
        loaded.make_env(2, 0)
    with pytest.raises(UserError, match=r"names task .*pass trust=True|load it with trust=True"):
        syncfree.evaluate(files.factory, num_envs=2)
    with pytest.raises(UserError, match=rf"checkpoint {files.mirror} names symmetry.mirror '{marker.name}:mirror'.*"
                                        r"name it in the call \(symmetry.mirror="):
        syncfree.learn(resume=str(files.mirror), run_dir=False, iterations=2)
    assert not marker.imported()


@pytest.mark.parametrize("allow", ["name", "trust"])
def test_the_name_repeated_or_trust_allows_the_code(allow: str, files: Files, marker: Marker, tmp_path: Path,
                                                    capsys) -> None:
    task, mirror = f"{marker.name}:make", f"{marker.name}:mirror"
    extra = {"name": ["--task", task], "trust": ["--trust"]}[allow]
    assert main(["eval", str(files.factory), "--env.num_envs", "2", *extra]) == 0
    assert marker.imported()
    extra = {"name": ["--symmetry.mirror", mirror], "trust": ["--trust"]}[allow]
    assert main(["train", "--resume", str(files.mirror), "--iterations", "2", "--log.progress", "false",
                 "--log.dir", str(tmp_path), *extra]) == 0
    assert main(["train", "--config", str(files.config_task), "--log.progress", "false", "--log.dir", str(tmp_path),
                 "--ppo.steps_per_env", "4", *({"name": ["--task", task], "trust": ["--trust"]}[allow])]) == 0
    if allow == "name":
        returns = syncfree.evaluate(files.factory, num_envs=2, env=make_env(task, 2))
        syncfree.learn(task, resume=str(files.factory), run_dir=False, iterations=2)
        syncfree.learn(resume=str(files.mirror), run_dir=False, iterations=2, **{"symmetry.mirror": mirror})
    else:
        returns = syncfree.evaluate(files.factory, num_envs=2, trust=True)
        assert syncfree.load(files.factory, trust=True).make_env(2, 0).num_envs == 2
        syncfree.learn(resume=str(files.mirror), run_dir=False, iterations=2, trust=True)
    assert returns.shape == (2,)


def test_a_plain_gymnasium_id_needs_no_flag(files: Files, capsys) -> None:
    """A registered id runs what its installed package registered: nothing of the file's choosing."""
    assert main(["eval", str(files.gym_plain), "--env.num_envs", "2"]) == 0
    assert capsys.readouterr().out.startswith("gym:Pendulum-v1: mean return")


def test_a_config_file_cannot_trust_itself(files: Files, marker: Marker, tmp_path: Path, capsys) -> None:
    trusting = tmp_path / "trusting.yaml"
    trusting.write_text(yaml.safe_dump({**yaml.safe_load(files.config_task.read_text()), "trust": True}))
    assert "names task" in refused(["train", "--config", str(trusting), "--log.dir", str(tmp_path)], capsys)
    assert not marker.imported()


def test_python_imports_from_sys_path_only(files: Files, marker: Marker, monkeypatch: pytest.MonkeyPatch) -> None:
    """No current folder is put on `sys.path` for a call from Python: a module imports as the program's own would."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(marker.folder))])
    with pytest.raises(UserError, match=f"cannot import '{marker.name}'"):
        preset(f"{marker.name}:make")
    assert str(marker.folder) not in sys.path and not marker.imported()


def test_the_command_line_names_code_with_either_option_form() -> None:
    names = from_command_line(["--task=a:make", "--symmetry.mirror", "b:mirror", "--env.num_envs", "4"])
    assert names.given == {"a:make", "b:mirror"} and not names.trust
    assert from_command_line(["ckpt.pt", "--trust"]).allows("anything:at_all")
