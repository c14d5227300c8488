"""Bad input ends in one clear line naming the culprit and exit code 2; no data is lost."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import small_config
from syncfree.cli import main
from syncfree.envs.builtin.classic import CartPole, Pendulum
from syncfree.envs.render import draw_pendulum
from syncfree.errors import NonFiniteError
from syncfree.tasks import TASKS
from syncfree.tasks.classic import classic_config, classic_task
from syncfree.train import checkpoint
from syncfree.train.run import Run
from syncfree.train.runner import Runner


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and "%|" not in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv,culprit", [
    (["--ppo.foo", "3"], "ppo.foo"),
    (["--nope", "1"], "nope"),
    (["--env.num_envs", "abc"], "env.num_envs"),
    (["--env.num_envs", "0"], "env.num_envs"),
    (["--ppo.schedule", "sometimes"], "ppo.schedule"),
    (["--ppo.gamma", "1.5"], "ppo.gamma"),
    (["--ppo.num_minibatches", "7"], "ppo.num_minibatches"),
    (["--task", "walker"], "task"),
    (["--device", "tpu"], "device"),
    (["--perf.fused_adamw", "maybe"], "perf.fused_adamw"),
    (["--policy.actor_hidden", "[]"], "policy.actor_hidden"),
    (["--task", "g1-track", "--env.history", "0"], "env.history"),
    (["--task", "g1-track", "--env.sampler_decay", "1"], "env.sampler_decay"),
    (["--task", "g1-track", "--env.tokenizer_frames", "[0, 1]"], "env.tokenizer_frames"),
    (["--task", "g1-track", "--policy.kind", "token", "--env.num_encoders", "3"], "env.num_encoders"),
    (["--log.run_name", "../elsewhere"], "log.run_name"),
    (["--log.run_name", "/tmp/abs"], "log.run_name"),
    (["--log.run_name", ".."], "log.run_name"),
    (["--log.run_name", "é" * 128], "log.run_name='éééé"),  # 256 bytes
])
def test_bad_config_is_one_line_naming_the_key(capsys, argv: list[str], culprit: str) -> None:
    code, err = run_cli(capsys, "train", *argv)
    assert code == 2
    assert culprit in one_line(err)


@pytest.mark.parametrize("argv,line", [
    (["--ppo.schedule", "adaptiv"], "ppo.schedule='adaptiv' is invalid; allowed: fixed, adaptive, linear; did you mean "
                                    "adaptive?"),
    (["--policy.activation", "rellu"], "policy.activation='rellu' is invalid; allowed: elu, tanh, relu, silu; did you "
                                       "mean relu?"),
    (["--ppo.num_epochs", "abc"], "ppo.num_epochs='abc' is invalid; allowed: an integer"),
    (["--ppo.clipped_value_loss", "maybe"], "ppo.clipped_value_loss='maybe' is invalid; allowed: true or false"),
    (["--perf.grad_finite_from_norm", "before"],
     "perf.grad_finite_from_norm='before' is invalid; allowed: true, false, seed_before"),
    (["--task", "pendullum"], "did you mean pendulum?"),
    (["--num_envs", "4"], "did you mean env.num_envs?"),  # an option of another section, by its name
    (["--num-envs", "4"], "did you mean env.num_envs?"),
    (["--ppo.num_envs", "4"], "did you mean env.num_envs?"),
    (["--envs.num_envs", "4"], "did you mean env.num_envs?"),  # a section misspelt
    (["--learning_rate", "0.1"], "did you mean ppo.learning_rate or rnd.learning_rate?"),
    (["--seeed", "1"], "did you mean seed?"),
])
def test_a_mistyped_option_or_value_is_one_line_with_a_suggestion(capsys, argv: list[str], line: str) -> None:
    code, err = run_cli(capsys, "train", *argv)
    assert code == 2 and line in one_line(err)


def test_eval_and_doctor_take_the_env_count_as_train_does(capsys, tmp_path: Path) -> None:
    assert main(["train", "--task", "pendulum", "--iterations", "1", "--env.num_envs", "16", "--ppo.steps_per_env", "8",
                 "--perf.compile", "off", "--log.dir", str(tmp_path), "--log.run_name", "run",
                 "--log.progress", "false"]) == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run" / "latest.pt"), "--env.num_envs", "3"]) == 0
    assert "over the first episodes of 3 envs" in capsys.readouterr().out
    code, err = run_cli(capsys, "eval", str(tmp_path / "run" / "latest.pt"), "--env.num_envs", "0")
    assert code == 2 and "--env.num_envs=0 is invalid" in one_line(err)


def test_unknown_key_lists_what_is_allowed(capsys) -> None:
    code, err = run_cli(capsys, "train", "--ppo.learning_rat", "1e-3")
    assert code == 2 and "learning_rate" in one_line(err)


def test_missing_checkpoint(capsys, tmp_path: Path) -> None:
    for command in (["eval"], ["train", "--resume"]):
        code, err = run_cli(capsys, *command, str(tmp_path / "missing.pt"))
        assert code == 2 and "missing.pt" in one_line(err)


def test_corrupt_checkpoint(capsys, tmp_path: Path) -> None:
    path = tmp_path / "junk.pt"
    path.write_bytes(b"not a checkpoint")
    code, err = run_cli(capsys, "eval", str(path))
    assert code == 2 and "junk.pt" in one_line(err)


@pytest.fixture
def pendulum_checkpoint(tmp_path: Path) -> Path:
    trainer = Run(small_config("pendulum"), tmp_path / "run")
    trainer.cfg.iterations = 1
    trainer.learn()
    return tmp_path / "run" / "latest.pt"


@pytest.mark.parametrize("change,culprit", [
    (lambda c: setattr(c, "task", "cartpole"), "task"),
    (lambda c: setattr(c.policy, "actor_hidden", [8]), "policy"),
    (lambda c: setattr(c.env, "num_envs", 16), "num_envs"),
])
def test_incompatible_checkpoint(pendulum_checkpoint: Path, change, culprit: str) -> None:
    cfg = small_config("pendulum")
    change(cfg)
    trainer = Runner(cfg)
    with pytest.raises(Exception) as info:
        trainer.load_state_dict(checkpoint.load(pendulum_checkpoint), source=f"checkpoint {pendulum_checkpoint}")
    assert type(info.value).__name__ == "UserError"
    message = str(info.value)
    assert culprit in message and "latest.pt" in message and "\n" not in message


def test_resume_with_incompatible_override_exits_2(capsys, pendulum_checkpoint: Path) -> None:
    code, err = run_cli(capsys, "train", "--resume", str(pendulum_checkpoint), "--policy.actor_hidden", "[8]")
    assert code == 2 and "policy" in one_line(err)


class NaNAfter:
    """Emits a NaN observation from envs 3 and 5 once `nan_after` steps have passed."""

    def __init__(self, *args, nan_after: int = 20, **kwargs) -> None:
        self.steps, self.nan_after = 0, nan_after
        super().__init__(*args, **kwargs)

    def _observe(self):
        obs = super()._observe()
        self.steps += 1
        if self.steps > self.nan_after:
            obs["policy"][[3, 5], 1] = float("nan")
        return obs


class NaNPendulum(NaNAfter, Pendulum):
    """Continuous actions: the NaN reaches the Gaussian sampler."""


class NaNCartPole(NaNAfter, CartPole):
    """Discrete actions: the NaN reaches the categorical sampler."""


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize("deferred", [True, False])
@pytest.mark.parametrize(("task", "env_class"), [("pendulum", NaNPendulum), ("cartpole", NaNCartPole)])
def test_non_finite_env_output_stops_at_iteration_end_naming_envs(tmp_path: Path, task: str, env_class: type,
                                                                  deferred: bool, validate: bool) -> None:
    """Continuous and discrete actions, the monitor deferred or not, distribution validation on or off: the run stops
    with the monitor's message, whatever the sampler made of the NaN."""
    cfg = small_config(task, deferred_nonfinite_check=deferred, validate_distributions=validate)
    cfg.iterations, cfg.save_every = 5, 1
    # the start-up check (`check_env`: a reset, and steps until every env's episode has ended: here at the 10-step
    # time limit) observes before training does
    env = env_class(cfg.env.num_envs, seed=cfg.seed, max_episode_length=10, nan_after=20 + 1 + 10)
    trainer = Run(cfg, tmp_path, env=env)
    with pytest.raises(NonFiniteError) as info:
        trainer.learn()
    assert str(info.value).startswith("iteration 3: non-finite observation or reward from env ids [3, 5]")
    assert str(info.value).endswith(f"stopped; last good checkpoint {tmp_path / 'latest.pt'}")
    assert checkpoint.load(tmp_path / "latest.pt")["iteration"] == 2  # the last good checkpoint is kept
    assert not (tmp_path / "checkpoint_000003.pt").exists()


def test_non_finite_via_cli_is_one_line_exit_2(capsys, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(TASKS, "nan-pendulum", classic_task("nan-pendulum", "test", NaNPendulum, classic_config,
                                                            draw_pendulum))
    code, err = run_cli(capsys, "train", "--task", "nan-pendulum", "--iterations", "3", "--env.num_envs", "16",
                        "--ppo.steps_per_env", "8", "--log.dir", str(tmp_path), "--log.progress", "false")
    assert code == 2
    assert "iteration 3: non-finite observation or reward from env ids [3, 5]" in one_line(err)
    assert one_line(err).endswith("stopped; no checkpoint written yet")  # none is saved before the run's end


def test_the_closing_line_says_whether_iterations_finished_unsaved() -> None:
    from syncfree.train.session import saved_line

    assert saved_line(None) == "no checkpoint written (no iteration finished)"
    assert saved_line(None, 3) == "no checkpoint written (3 iterations finished, none saved)"
    assert saved_line(Path("runs/a/latest.pt"), 3) == "checkpoint runs/a/latest.pt"


def test_cuda_requested_without_cuda(capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, err = run_cli(capsys, "train", "--device", "cuda", "--iterations", "1")
    assert code == 2 and "CUDA is not available" in one_line(err)


G1_SMALL = ["--task", "g1-track", "--env.num_envs", "4", "--iterations", "1", "--ppo.steps_per_env", "2",
            "--log.progress", "false"]


def test_malformed_robot_file_is_one_line_naming_it(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "robot.xml"
    bad.write_text("<mujoco><worldbody><body name='a'><geom size='0.1'/></body></worldbody>")  # unclosed root
    code, err = run_cli(capsys, "train", *G1_SMALL, "--env.robot", str(bad), "--log.dir", str(tmp_path))
    assert code == 2 and "robot.xml" in one_line(err)


@pytest.mark.parametrize("field", ["joint_pos", "fps"])
def test_malformed_motion_file_is_one_line_naming_file_and_field(capsys, tmp_path: Path, field: str) -> None:
    from syncfree.envs.motion import generate_clips, save_clip
    from syncfree.envs.robots import load_robot

    path = tmp_path / "clip.npz"
    save_clip(path, generate_clips(load_robot(), num_clips=1, seconds=1.0)[0])
    data = dict(np.load(path))
    if field == "joint_pos":
        data["joint_pos"][5, 10] = np.nan
    else:
        del data["fps"]
    np.savez(path, **data)
    code, err = run_cli(capsys, "train", *G1_SMALL, "--env.motions", f"[{path}]", "--log.dir", str(tmp_path))
    line = one_line(err)
    assert code == 2 and "clip.npz" in line and field in line


def test_task_option_the_task_does_not_read_is_refused(capsys, tmp_path: Path) -> None:
    code, err = run_cli(capsys, "train", "--task", "cartpole", "--env.motions", "[a.npz]", "--log.dir", str(tmp_path))
    assert code == 2 and "env.motions" in one_line(err)


@pytest.mark.parametrize("task", ["pendulum", "cartpole"])
@pytest.mark.parametrize("learning_rate", ["1e6", "1e20", "1e38"])
def test_divergence_stops_the_run_before_it_is_saved(capsys, tmp_path: Path, task: str, learning_rate: str) -> None:
    """A learning rate that wrecks the weights: every later update is skipped for non-finite gradients, or the
    parameters themselves become non-finite. The run stops with one line at the end of that iteration, and no
    checkpoint of it (or of anything later) is written."""
    code, err = run_cli(capsys, "train", "--task", task, "--ppo.schedule", "fixed", "--ppo.learning_rate",
                        learning_rate, "--iterations", "3", "--env.num_envs", "16", "--ppo.steps_per_env", "8",
                        "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false")
    line = one_line(err)
    assert code == 2 and line.startswith("syncfree: error: iteration 1: ") and "diverged" in line
    assert not list((tmp_path / "run").glob("*.pt"))


def test_the_skip_limit_can_be_turned_off(tmp_path: Path) -> None:
    cfg = small_config("pendulum")
    cfg.ppo.schedule, cfg.ppo.learning_rate, cfg.ppo.max_skipped_updates, cfg.iterations = "fixed", 1e6, 0, 2
    record = Runner(cfg).learn()
    # the first update steps (and wrecks the weights); every later one is skipped, the second iteration's all
    assert record["iteration"] == 2 and record["longest_skip_run"] >= cfg.ppo.num_epochs * cfg.ppo.num_minibatches


@pytest.mark.parametrize("value", ["1e400", "-1e400"])
def test_an_infinite_number_in_the_config_is_refused(capsys, value: str) -> None:
    code, err = run_cli(capsys, "train", "--task", "pendulum", f"--ppo.learning_rate={value}")
    assert code == 2 and "ppo.learning_rate=" in one_line(err) and "a finite number" in one_line(err)


def test_a_yaml_bomb_or_an_oversized_config_file_is_refused_before_it_is_expanded(capsys, tmp_path: Path) -> None:
    """A 500-byte "billion laughs" file expands to gigabytes when its aliases are resolved: it is refused, read as
    events only, in one line; so is a file over the size cap, and a good file given before either."""
    levels = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=False)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(levels) + "\n")
    assert bomb.stat().st_size < 1000
    good = tmp_path / "good.yaml"
    good.write_text("iterations: 1\n")
    big = tmp_path / "big.yaml"
    big.write_text("iterations: 1\n" + "# padding\n" * 120_000)
    for args, culprit in ((["--config", str(bomb)], "bomb.yaml uses YAML anchors or aliases"),
                          (["--config", str(good), "--config", str(bomb)], "bomb.yaml uses YAML anchors"),
                          ([f"--config={big}"], "big.yaml is over 1024 KiB")):
        start = time.perf_counter()
        assert main(["train", "--task", "cartpole", *args]) == 2
        assert time.perf_counter() - start < 5
        err = capsys.readouterr().err
        assert culprit in err and err.count("\n") == 1, err


def test_a_runs_config_file_reruns_it_anew_even_after_a_resume(tmp_path: Path) -> None:
    """`config.yaml` never names a checkpoint: training from a resumed run's config starts a new run in the folder
    asked for and leaves the original run as it was."""
    args = ["--task", "cartpole", "--env.num_envs", "16", "--ppo.steps_per_env", "8", "--log.dir", str(tmp_path),
            "--log.progress", "false"]
    assert main(["train", "--iterations", "1", *args, "--log.run_name", "run"]) == 0
    assert main(["train", "--resume", str(tmp_path / "run" / "latest.pt"), "--resume_in_place", "true",
                 "--iterations", "2"]) == 0
    assert "resume: ''\nresume_in_place: false\n" in (tmp_path / "run" / "config.yaml").read_text()
    before = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert main(["train", "--config", str(tmp_path / "run" / "config.yaml"), "--log.run_name", "rerun"]) == 0
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == before
    rerun = (tmp_path / "rerun" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in rerun] == [1, 2]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("outputs")
    assert main(["train", "--task", "pendulum", "--iterations", "1", "--env.num_envs", "8", "--ppo.steps_per_env", "4",
                 "--ppo.num_minibatches", "2", "--perf.compile", "off", "--log.progress", "false",
                 "--log.dir", str(folder), "--log.run_name", "run"]) == 0
    return folder / "run"


@pytest.mark.parametrize(("command", "says"), [
    (["play", "{ckpt}", "--video", "{dir}"], "--video {dir}: is a folder; give a file name"),
    (["play", "{ckpt}", "--video", "{file}/clip.mp4"], "its folder cannot be made: {file} is a file"),
    (["plot", "{run}", "--out", "{dir}"], "plot: --out {dir}: is a folder; give a file name"),
    (["plot", "{run}", "--out", "{file}/sub/curves.png"], "its folder cannot be made: {file} is a file"),
    (["export", "{ckpt}", "--out", "{file}"], "export: --out {file}: is a file, not a folder"),
    (["export", "{ckpt}", "--out", "{file}/onnx"], "export: --out {file}/onnx: cannot be made: {file} is a file"),
    (["export", "{ckpt}", "--out", "{dir}/policy.onnx"], "export: --out {dir}/policy.onnx: names the folder the graphs"),
    (["bench", "--task", "pendulum", "--out", "{file}"], "bench: --out {file}: is a file, not a folder"),
])
def test_a_command_checks_where_it_writes_before_any_work(command: list[str], says: str, trained_run: Path,
                                                          tmp_path: Path, capsys) -> None:
    places = {"ckpt": str(trained_run / "latest.pt"), "run": str(trained_run), "dir": str(tmp_path / "a_folder"),
              "file": str(tmp_path / "a_file")}
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_file").write_text("in the way")
    code, err = run_cli(capsys, *[part.format(**places) for part in command])
    assert code == 2 and says.format(**places) in one_line(err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "a_folder"]  # nothing written
    assert not any((tmp_path / "a_folder").iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="permission bits do not bind root")
def test_a_read_only_folder_is_named(trained_run: Path, tmp_path: Path, capsys) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        code, err = run_cli(capsys, "plot", str(trained_run), "--out", str(locked / "curves.png"))
        assert code == 2 and f"cannot write in {locked}" in one_line(err)
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize(("text", "kind"), [("- iterations: 5\n", "list"), ("hello\n", "str"), ("3\n", "int")])
def test_a_config_file_that_is_no_mapping_is_one_line(text: str, kind: str, capsys, tmp_path: Path) -> None:
    """A list or a scalar at a config file's top level would be ignored, and the run would train the preset."""
    path = tmp_path / "run.yaml"
    path.write_text(text)
    assert main(["train", "--config", str(path), "--iterations", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"config: {path} is not a mapping of options (a YAML {kind})" in err, err
