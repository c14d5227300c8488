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
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("mjlab")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # mjlab's scripts pick the CPU this way

from mjlab.envs import ManagerBasedRlEnv
from mjlab.rl import MjlabOnPolicyRunner, RslRlOnPolicyRunnerCfg, RslRlVecEnvWrapper
from mjlab.tasks.registry import list_tasks, load_env_cfg, load_rl_cfg

from conftest import assert_trains_as_shipped
from syncfree import cli
from syncfree.errors import UserError
from syncfree.rsl_rl import OnPolicyRunner
from syncfree.tasks.rsl_rl_config import MAPPED, READ_ELSEWHERE, from_rsl_rl

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from mjlab_parity import write_standing_motion  # mjlab's G1 standing still, as a motion .npz

CARTPOLE = "Mjlab-Cartpole-Balance"
TRACKING = "Mjlab-Tracking-Flat-Unitree-G1"
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
    assert cli.main(["eval", str(tmp_path / "run" / "latest.pt"), "--num_envs", "8"]) == 0
    assert f"mjlab:{CARTPOLE}: mean return " in capsys.readouterr().out
    assert cli.main(["play", str(tmp_path / "run" / "latest.pt")]) == 2
    assert "cannot be drawn (mjlab's envs draw with mjlab's own viewer" in capsys.readouterr().err


def test_doctor_examines_an_mjlab_task_and_finds_the_host_read_of_mjlabs_own_env(capsys) -> None:
    assert cli.main(["doctor", "--task", f"mjlab:{CARTPOLE}", "--num_envs", "16", "--steps", "8", "--json"]) == 0
    out = capsys.readouterr().out  # mjlab prints its managers' tables first
    report = json.loads(out[out.rindex("\n{\n") + 1:])
    assert report["phases"]["env"]["syncs"] == 1.0  # mjlab's reset selects the envs to reset with nonzero
    assert any("manager_based_rl_env.py" in site["site"] and site["syncs"] for site in report["sites"])


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


def rnn_rl_cfg() -> dict:
    """mjlab's Cartpole config with rsl_rl 5's `RNNModel` for the actor and the critic (a GRU of 16)."""
    cfg = rl_cfg()
    for net in ("actor", "critic"):
        cfg[net].update(class_name="RNNModel", rnn_type="gru", rnn_hidden_dim=16, rnn_num_layers=1)
    return cfg


def test_rnn_model_checkpoints_cross_between_mjlabs_rsl_rl_runner_and_syncfrees(cartpole, tmp_path: Path) -> None:
    """With `RNNModel`s (mjlab's rsl-rl-lib 5.4.2 on one side): each side's checkpoint loads into the other and acts
    the same step after step, the state carried."""
    theirs = MjlabOnPolicyRunner(cartpole, rnn_rl_cfg(), log_dir=str(tmp_path / "theirs"), device="cpu")
    theirs.learn(1)
    ours = OnPolicyRunner(cartpole, rnn_rl_cfg(), log_dir=str(tmp_path / "ours"), device="cpu")
    ours.load(str(tmp_path / "theirs" / "model_0.pt"))
    assert ours.get_inference_policy().is_recurrent

    def acting(runner) -> list[torch.Tensor]:
        policy, obs, out = runner.get_inference_policy(), cartpole.get_observations(), []
        policy.reset()
        with torch.inference_mode():
            for _ in range(3):
                out.append(policy(obs).clone())
        return out

    for a, b in zip(acting(ours), acting(theirs), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    ours.learn(1)
    back = MjlabOnPolicyRunner(cartpole, rnn_rl_cfg(), log_dir=None, device="cpu")
    back.load(str(tmp_path / "ours" / "model_0.pt"))
    for a, b in zip(acting(back), acting(ours), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_syncfree_trains_an_mjlab_task_with_a_recurrent_policy_from_the_command_line(tmp_path: Path, capsys) -> None:
    assert cli.main(["train", "--task", f"mjlab:{CARTPOLE}", "--policy.kind", "recurrent", "--policy.rnn.hidden",
                     "16", "--env.num_envs", "16", "--ppo.steps_per_env", "8", "--iterations", "2", "--perf.compile",
                     "off", "--log.dir", str(tmp_path), "--log.run_name", "rnn", "--log.progress", "false"]) == 0
    assert "kind: recurrent" in (tmp_path / "rnn" / "config.yaml").read_text()
    assert cli.main(["eval", str(tmp_path / "rnn" / "latest.pt"), "--num_envs", "4"]) == 0
    assert "mean return" in capsys.readouterr().out


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

task, log_dir, num_envs, iterations, motion_file = sys.argv[1:6]
num_envs, iterations = int(num_envs), int(iterations)
env_cfg = load_env_cfg(task)
env_cfg.scene.num_envs, env_cfg.seed = num_envs, 0
if motion_file:
    env_cfg.commands["motion"].motion_file = motion_file
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


def run_mjlab_runner(task: str, log_dir: Path, num_envs: int, iterations: int, motion_file: str = "") -> dict:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), task, str(log_dir), str(num_envs),
                             str(iterations), motion_file], capture_output=True, text=True, timeout=900,
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


@pytest.fixture(scope="module")
def standing_motion(tmp_path_factory) -> Path:
    return write_standing_motion(tmp_path_factory.mktemp("motion") / "standing.npz")


def test_mjlabs_g1_tracking_task_trains_three_iterations_through_its_own_runner_class(standing_motion: Path,
                                                                                       tmp_path: Path) -> None:
    out = run_mjlab_runner(TRACKING, tmp_path, 16, 3, str(standing_motion))
    assert out["runner"] == "MotionTrackingOnPolicyRunner"
    assert (tmp_path / "model_2.pt").is_file()
    onnx = tmp_path / f"{tmp_path.name}.onnx"  # its save() exports the policy with the motion's frames beside it
    assert onnx.is_file()
    assert torch.isfinite(torch.tensor(out["actions"])).all()


def test_a_tracking_task_reads_its_motion_from_the_command_line(standing_motion: Path, tmp_path: Path,
                                                                capsys) -> None:
    args = ["train", "--task", f"mjlab:{TRACKING}", "--env.num_envs", "8", "--iterations", "1", "--log.dir",
            str(tmp_path), "--log.run_name", "run", "--log.progress", "false", "--perf.compile", "off"]
    assert cli.main(args) == 2
    assert "env.motion_file: Mjlab-Tracking-Flat-Unitree-G1 tracks a motion: give its .npz" in capsys.readouterr().err
    assert cli.main([*args, "--env.motion_file", str(tmp_path / "missing.npz")]) == 2
    assert "env.motion_file=" in capsys.readouterr().err
    assert cli.main([*args, "--env.motion_file", str(standing_motion)]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 1 and records[0]["env_steps"] == 8 * load_rl_cfg(TRACKING).num_steps_per_env


# -- every field of mjlab's runner config ----------------------------------------------------------------------


def field_paths(cfg: object, prefix: str = "") -> Iterator[str]:
    """Dotted names of every field of a config dataclass, the fields of its sections (`actor`, `algorithm`, ...)
    in place of the sections."""
    for field in dataclasses.fields(cfg):  # type: ignore[arg-type]
        value = getattr(cfg, field.name)
        if dataclasses.is_dataclass(value):
            yield from field_paths(value, f"{prefix}{field.name}.")
        else:
            yield prefix + field.name


def mapping_key(path: str) -> str:
    """The row of `MAPPED` or `READ_ELSEWHERE` for a field: actor and critic share rsl_rl's model rows."""
    section, _, rest = path.partition(".")
    return f"model.{rest}" if section in ("actor", "critic") and rest else path


def test_every_field_of_mjlabs_runner_configs_is_mapped_or_left_to_the_script() -> None:
    configs = [RslRlOnPolicyRunnerCfg(), *(load_rl_cfg(task) for task in list_tasks())]
    paths = {path for cfg in configs for path in field_paths(cfg)}
    assert {"algorithm.desired_kl", "actor.distribution_cfg", "critic.rnn_type", "clip_actions"} <= paths
    missing = sorted(p for p in paths if mapping_key(p) not in MAPPED and mapping_key(p) not in READ_ELSEWHERE)
    assert not missing, f"mjlab config fields with no row in the mapping: {missing}"


@pytest.mark.parametrize("task", list_tasks())
def test_each_mjlab_task_config_maps_or_is_refused_by_one_named_key(task: str) -> None:
    cfg = dataclasses.asdict(load_rl_cfg(task))
    try:
        mapped = from_rsl_rl(cfg, None, 16, "cpu")
    except UserError as error:  # mjlab's camera tasks: CNN models
        message = str(error)
        assert "\n" not in message and message.startswith("rsl_rl config: actor.class_name: "), message
        assert "CNN" in cfg["actor"]["class_name"]
        return
    assert mapped.config.ppo.steps_per_env == cfg["num_steps_per_env"]
    assert mapped.config.policy.actor_hidden == list(cfg["actor"]["hidden_dims"])
    assert mapped.config.ppo.learning_rate == cfg["algorithm"]["learning_rate"]


def test_through_the_drop_in_mjlabs_env_makes_the_only_host_reads_of_the_rollout(cartpole) -> None:
    """Host reads of one iteration on mjlab's Cartpole: mjlab's env reads the host itself (`nonzero` over the envs
    to reset, each step); beyond those, the drop-in reads it once per iteration, rsl_rl at every step and
    minibatch."""
    from syncfree.core.counters import count_syncs

    cfg = rl_cfg(steps=8)
    with count_syncs() as env_counts:
        for _ in range(cfg["num_steps_per_env"]):
            cartpole.step(torch.zeros(NUM_ENVS, 1))
    env_reads = env_counts.syncs
    assert env_reads == cfg["num_steps_per_env"]
    learner_reads = {}
    for name, runner_cls in (("syncfree", OnPolicyRunner), ("rsl_rl", MjlabOnPolicyRunner)):
        runner = runner_cls(cartpole, rl_cfg(steps=8), log_dir=None, device="cpu")
        runner.learn(1)  # graphs built, first-iteration work done
        with count_syncs() as counts:
            runner.learn(1)
        learner_reads[name] = counts.syncs - env_reads
    algorithm = cfg["algorithm"]
    updates = algorithm["num_learning_epochs"] * algorithm["num_mini_batches"]
    assert learner_reads["syncfree"] == 1  # the iteration's statistics, in one transfer
    assert learner_reads["rsl_rl"] >= cfg["num_steps_per_env"] + updates, learner_reads


def test_g1s_action_bounds_are_its_joint_limits_as_actions() -> None:
    """mjlab's G1 velocity task declares its joint limits as action bounds (what SAC and TD3 map their [-1, 1]
    onto): the targets of the bounds, `offset + scale * bound`, are the joints' limits."""
    from syncfree.tasks import make_task_env, preset

    env = make_task_env(preset("mjlab:Mjlab-Velocity-Flat-Unitree-G1"), 2, torch.device("cpu"), 0)
    low, high = env.action_bounds
    unwrapped = env.env.unwrapped
    (term,) = (unwrapped.action_manager.get_term(name) for name in unwrapped.action_manager.active_terms)
    limits = term._entity.data.joint_pos_limits[0, term.target_ids]
    scale, offset = term.scale[0], term.offset[0]
    torch.testing.assert_close(offset + scale * low, limits[:, 0])
    torch.testing.assert_close(offset + scale * high, limits[:, 1])
    assert low.shape == (env.action_spec.size,) and bool((low < 0).all() and (high > 0).all())
    env.close()


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_every_mjlab_off_policy_preset_takes_gradient_steps_as_shipped(algorithm: str) -> None:
    """Each mjlab task's SAC and TD3 preset unchanged: its batch fits what a full buffer lets it draw, and its random
    warm-up ends before its iterations do (at mjlab's registered 1 env, the recipe's batch of 32,768 never would)."""
    from syncfree.tasks import preset

    checked = []
    for task_id in list_tasks():
        try:
            cfg = preset(f"mjlab:{task_id}", algorithm=algorithm)
        except UserError as e:  # a task whose model syncfree does not map (a CNN) has no preset at all
            assert "trains MLP and RNN models" in str(e), (task_id, e)
            continue
        assert_trains_as_shipped(cfg)
        checked.append(task_id)
    assert {"Mjlab-Velocity-Flat-Unitree-G1", "Mjlab-Tracking-Flat-Unitree-G1"} <= set(checked)


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_mjlabs_g1_velocity_task_trains_from_its_off_policy_presets(algorithm: str, tmp_path: Path) -> None:
    """`--algorithm sac` (or `td3`) on mjlab's G1 velocity task starts from FastSAC's recipe at its 4,096 envs (mjlab
    registers 1) and mjlab's discount, and trains (shrunk to 4 iterations of 4 envs, batches of 8 from a buffer of
    64)."""
    from syncfree.tasks import preset

    task = "mjlab:Mjlab-Velocity-Flat-Unitree-G1"
    ppo, cfg = preset(task), preset(task, algorithm=algorithm)
    own = cfg.learner
    assert ppo.env.num_envs == 1
    assert (cfg.env.num_envs, own.steps_per_env, own.updates_per_iteration, own.batch_size) == (4096, 1, 4, 32_768)
    assert (own.buffer_size, own.gamma, cfg.iterations) == (
        1024 * 4096, ppo.ppo.gamma, ppo.iterations * ppo.ppo.steps_per_env)
    args = ["train", "--task", task, "--algorithm", algorithm, "--env.num_envs", "4", "--iterations", "4",
            f"--{algorithm}.learning_starts", "4", f"--{algorithm}.batch_size", "8", f"--{algorithm}.buffer_size",
            "64", f"--{algorithm}.updates_per_iteration", "2", "--log.dir", str(tmp_path), "--log.run_name", "run",
            "--log.progress", "false"]
    assert cli.main(args) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["gradient_steps"] == 2


def test_the_device_checks_mjlab_part_times_sac_and_rsl_rls_ppo_on_g1_velocity(tmp_path: Path) -> None:
    """`gpu_check.sh mjlab` at toy sizes on the CPU (`SMOKE=1`, eagerly; on the device its wheels come in pieces,
    `tests/test_wheel_pieces.py`): SAC's bench and rsl_rl's PPO on mjlab's G1 velocity task both end with their
    figures, with stand-ins for what mjlab imports to log to wandb and write videos."""
    import tarfile

    from test_gpu_check import gpu_check

    gpu_check(tmp_path, "mjlab", CUDA_VISIBLE_DEVICES="")
    out = tmp_path / "out"
    lines = (out / "parts.txt").read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [["sac-mjlab-g1-velocity-4096", "rc=0"],
                                                   ["rsl_rl-mjlab-g1-velocity-4096", "rc=0"]]
    with tarfile.open(out / "results.tgz") as packed:
        bench = json.load(packed.extractfile("./sac-mjlab-g1-velocity-4096/results.json"))
        ppo = json.loads(packed.extractfile("./rsl_rl-mjlab-g1-velocity-4096/runs.jsonl").readline())
        versions = packed.extractfile("./gpu.txt").read().decode()
    optimized = bench["sizes"][0]["configs"]["optimized"]
    assert bench["algorithm"] == "sac" and bench["bench"]["task"] == "mjlab:Mjlab-Velocity-Flat-Unitree-G1"
    assert optimized["gradient_steps_per_s"] > 0 and optimized["steps_per_s"]["median"] > 0
    assert (ppo["learner"], ppo["num_envs"], ppo["iterations"]) == ("rsl_rl", 16, 2) and ppo["env_steps_per_s"] > 0
    assert "mujoco 3.11" in versions and "mjlab-stubs" in versions.split(" wandb ")[1]
