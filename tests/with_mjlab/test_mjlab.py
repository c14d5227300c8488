"""mjlab's own tasks trained by syncfree: `syncfree train --task mjlab:<id>`, and mjlab's runner classes on
syncfree's `OnPolicyRunner`; checkpoints cross between mjlab's rsl_rl runner and syncfree's.

mjlab pins mujoco 3.11 and rsl-rl-lib 5.4.2, so these run in a virtual environment of their own (`.ci/run` builds
it); elsewhere they are skipped."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("mjlab")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # mjlab's scripts pick the CPU this way

from mjlab.envs import ManagerBasedRlEnv
from mjlab.rl import MjlabOnPolicyRunner, RslRlVecEnvWrapper
from mjlab.tasks.registry import load_env_cfg, load_rl_cfg

from syncfree import cli
from syncfree.rsl_rl import OnPolicyRunner

CARTPOLE = "Mjlab-Cartpole-Balance"
NUM_ENVS = 64


def mjlab_env(task: str = CARTPOLE, num_envs: int = NUM_ENVS, seed: int = 0) -> RslRlVecEnvWrapper:
    cfg = load_env_cfg(task)
    cfg.scene.num_envs, cfg.seed = num_envs, seed
    return RslRlVecEnvWrapper(ManagerBasedRlEnv(cfg=cfg, device="cpu"))


def rl_cfg(task: str = CARTPOLE, steps: int = 8) -> dict:
    """The runner config mjlab ships for the task, as its train script passes it, made short and offline."""
    cfg = dataclasses.asdict(load_rl_cfg(task))
    cfg.update(num_steps_per_env=steps, logger="tensorboard", upload_model=False)
    return cfg


@pytest.fixture(scope="module")
def cartpole() -> RslRlVecEnvWrapper:
    return mjlab_env()


def actions(runner, obs) -> torch.Tensor:
    with torch.inference_mode():
        return runner.get_inference_policy()(obs).clone()


def test_syncfree_tasks_lists_mjlabs_tasks(capsys) -> None:
    assert cli.main(["tasks"]) == 0
    out = capsys.readouterr().out
    for task in (CARTPOLE, "Mjlab-Velocity-Flat-Unitree-G1", "Mjlab-Tracking-Flat-Unitree-G1"):
        assert f"mjlab:{task}" in out


def test_syncfree_trains_an_mjlab_task_from_the_command_line(tmp_path: Path, capsys) -> None:
    assert cli.main(["train", "--task", f"mjlab:{CARTPOLE}", "--env.num_envs", str(NUM_ENVS), "--iterations", "2",
                     "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false"]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records] == [NUM_ENVS * 32, 2 * NUM_ENVS * 32]  # mjlab's 32 steps per env
    assert (tmp_path / "run" / "latest.pt").is_file()
    assert cli.main(["train", "--task", "mjlab:Mjlab-Cartpole-Balanse"]) == 2
    assert "did you mean mjlab:Mjlab-Cartpole-Balance?" in capsys.readouterr().err


def test_checkpoints_cross_between_mjlabs_rsl_rl_runner_and_syncfrees(cartpole, tmp_path: Path) -> None:
    theirs = MjlabOnPolicyRunner(cartpole, rl_cfg(), log_dir=str(tmp_path / "theirs"), device="cpu")
    theirs.learn(1)
    ours = OnPolicyRunner(cartpole, rl_cfg(), log_dir=str(tmp_path / "ours"), device="cpu")
    ours.load(str(tmp_path / "theirs" / "model_0.pt"))
    obs = cartpole.get_observations()
    torch.testing.assert_close(actions(ours, obs), actions(theirs, obs), rtol=0, atol=1e-5)
    ours.learn(1)
    back = MjlabOnPolicyRunner(cartpole, rl_cfg(), log_dir=None, device="cpu")
    infos = back.load(str(tmp_path / "ours" / "model_0.pt"))
    assert infos is None
    torch.testing.assert_close(actions(back, obs), actions(ours, obs), rtol=0, atol=1e-5)
    assert not torch.equal(actions(back, obs), actions(theirs, obs))  # it learned on


SCRIPT = """
import dataclasses, json, os, sys
import torch
from syncfree.rsl_rl import replace_rsl_rl_runner
replace_rsl_rl_runner()  # before mjlab's runner classes are defined
from mjlab.envs import ManagerBasedRlEnv
from mjlab.rl import RslRlVecEnvWrapper
from mjlab.tasks.registry import load_env_cfg, load_rl_cfg, load_runner_cls
from mjlab.rl import MjlabOnPolicyRunner
import syncfree.rsl_rl

task, log_dir, num_envs, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
env_cfg = load_env_cfg(task)
env_cfg.scene.num_envs, env_cfg.seed = num_envs, 0
env = RslRlVecEnvWrapper(ManagerBasedRlEnv(cfg=env_cfg, device="cpu"))
cfg = dataclasses.asdict(load_rl_cfg(task))
cfg.update(num_steps_per_env=8, logger="tensorboard", upload_model=False, save_interval=1)
runner_cls = load_runner_cls(task) or MjlabOnPolicyRunner
assert issubclass(runner_cls, syncfree.rsl_rl.OnPolicyRunner), runner_cls.__mro__
runner = runner_cls(env, cfg, log_dir=log_dir, device="cpu")
runner.learn(iterations)
obs = env.get_observations()
with torch.inference_mode():
    out = runner.get_inference_policy()(obs)
print(json.dumps({"runner": runner_cls.__name__, "actions": out[:4].tolist(),
                  "common_step_counter": env.unwrapped.common_step_counter}))
"""


def run_mjlab_runner(task: str, log_dir: Path, num_envs: int, iterations: int) -> dict:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), task, str(log_dir), str(num_envs),
                             str(iterations)], capture_output=True, text=True, timeout=900,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_mjlabs_own_runner_class_trains_on_syncfree_and_its_checkpoint_plays_in_rsl_rl(cartpole, tmp_path) -> None:
    out = run_mjlab_runner(CARTPOLE, tmp_path, NUM_ENVS, 2)
    assert out["runner"] == "MjlabOnPolicyRunner"
    assert sorted(p.name for p in tmp_path.glob("model_*.pt")) == ["model_0.pt", "model_1.pt"]
    # mjlab's save() added the env's step counter to infos, and mjlab's load() on rsl_rl's runner reads it back
    theirs = MjlabOnPolicyRunner(cartpole, rl_cfg(), log_dir=None, device="cpu")
    infos = theirs.load(str(tmp_path / "model_1.pt"))
    assert infos["env_state"]["common_step_counter"] == out["common_step_counter"] > 0


@pytest.mark.parametrize("task", ["Mjlab-Velocity-Flat-Unitree-G1"])
def test_mjlabs_g1_task_trains_three_iterations_through_its_own_runner_class(task: str, tmp_path: Path) -> None:
    out = run_mjlab_runner(task, tmp_path, 16, 3)
    assert out["runner"] == "VelocityOnPolicyRunner"
    assert (tmp_path / "model_2.pt").is_file()
    assert (tmp_path / f"{tmp_path.name}.onnx").is_file()  # its save() exports the policy to ONNX beside
    assert torch.isfinite(torch.tensor(out["actions"])).all()
