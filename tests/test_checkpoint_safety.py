"""Checkpoints are data: a crafted file runs nothing, a damaged or incomplete one is one line, non-finite weights
are refused, and the earlier format still loads."""

from __future__ import annotations

import copy
import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import small_config
from syncfree.cli import main
from syncfree.errors import UserError
from syncfree.train import checkpoint
from syncfree.train.run import Run
from syncfree.train.runner import Runner


class Payload:
    """What a hostile pickle carries: unpickling it calls `os.system`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run")
    runner = Run(small_config("pendulum"), run)
    runner.cfg.iterations = 1
    runner.learn()
    return run / "latest.pt"


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command", [["eval"], ["export"], ["train", "--resume"]])
def test_a_crafted_checkpoint_runs_nothing(command: list[str], tmp_path: Path, capsys) -> None:
    marker = tmp_path / "ran"
    for name, content in (("bare.pt", Payload(marker)), ("nested.pt", {"format": 1, "config": Payload(marker)})):
        torch.save(content, tmp_path / name)
        assert main([*command, str(tmp_path / name)]) == 2
        err = one_line_error(capsys)
        assert name in err and "could run code" in err
    assert not marker.exists()


def test_a_crafted_teacher_runs_nothing(tmp_path: Path) -> None:
    pytest.importorskip("mettagrid")
    from syncfree.tasks import preset

    marker = tmp_path / "ran"
    torch.save(checkpoint.serialize({"format": 2, "config": Payload(marker)}), tmp_path / "teacher.pt")
    cfg = preset("grid-arena")
    cfg.env.num_envs, cfg.log.progress = 1, False
    cfg.ppo.num_minibatches = 1
    cfg.losses.kickstarter, cfg.losses.teacher = 1.0, str(tmp_path / "teacher.pt")
    with pytest.raises(UserError, match=r"teacher\.pt: holds .* could run code"):
        Runner(cfg)
    assert not marker.exists()


def test_a_flipped_byte_is_caught_by_the_digest(trained: Path, tmp_path: Path, capsys) -> None:
    envelope = torch.load(trained, weights_only=True)
    envelope["payload"][len(envelope["payload"]) // 2] ^= 0xFF
    damaged = tmp_path / "damaged.pt"
    torch.save(envelope, damaged)
    assert main(["eval", str(damaged)]) == 2
    assert "damaged.pt: its content does not match its SHA-256 digest" in one_line_error(capsys)


def test_a_missing_key_is_named(trained: Path, tmp_path: Path, capsys) -> None:
    state = checkpoint.load(trained)
    del state["algorithm"], state["config"]
    checkpoint.save_atomic(state, tmp_path / "partial.pt")
    for command in (["eval"], ["train", "--resume"]):
        assert main([*command, str(tmp_path / "partial.pt")]) == 2
        assert "partial.pt: lacks config, algorithm" in one_line_error(capsys)


@pytest.mark.parametrize("where", ["policy", "optimizer"])
def test_non_finite_weights_are_refused(where: str, trained: Path, tmp_path: Path, capsys) -> None:
    state = checkpoint.load(trained)
    if where == "policy":
        state["policy"]["actor.0.weight"][0, 0] = float("nan")
    else:
        next(iter(state["algorithm"]["optimizer"]["state"].values()))["exp_avg"].view(-1)[0] = float("inf")
    checkpoint.save_atomic(state, tmp_path / "diverged.pt")
    for command in (["eval"], ["export"], ["train", "--resume"]):
        assert main([*command, str(tmp_path / "diverged.pt")]) == 2
        assert "diverged.pt: " in (err := one_line_error(capsys)) and "non-finite" in err


@pytest.mark.parametrize("lr", ["corrupt", float("nan"), [1e-3]])
def test_a_learning_rate_that_is_no_number_is_refused_in_one_line(lr: object, trained: Path, tmp_path: Path,
                                                                  capsys) -> None:
    state = checkpoint.load(trained)
    state["algorithm"]["lr"] = lr
    checkpoint.save_atomic(state, tmp_path / "odd-lr.pt")
    assert main(["train", "--resume", str(tmp_path / "odd-lr.pt")]) == 2  # (`eval` reads the policy alone)
    assert "odd-lr.pt: " in (err := one_line_error(capsys)) and "lr" in err


def test_the_earlier_format_still_loads_and_restores_every_random_stream(trained: Path, tmp_path: Path) -> None:
    """Format 1 kept NumPy's RNG state as a NumPy array and had no envelope: read with NumPy's array globals only."""
    state = checkpoint.load(trained)
    np.random.seed(7)
    old = copy.deepcopy(state)
    old["format"], old["rng"]["numpy"] = 1, np.random.get_state()
    torch.save(old, tmp_path / "format1.pt")
    expected = np.random.rand(3)
    loaded = checkpoint.load(tmp_path / "format1.pt")
    checkpoint.set_rng_state(loaded["rng"])
    assert np.array_equal(np.random.rand(3), expected)
    checkpoint.set_rng_state(state["rng"])  # today's format: NumPy's keys as a tensor
    again = np.random.rand(3)
    checkpoint.set_rng_state(checkpoint.load(trained)["rng"])
    assert np.array_equal(np.random.rand(3), again)


def test_a_checkpoint_is_plain_data(trained: Path) -> None:
    """Both levels load with `weights_only=True` and no allowed extra globals."""
    envelope = torch.load(trained, weights_only=True)
    assert set(envelope) == {"format", "sha256", "payload"} and envelope["format"] == checkpoint.FORMAT_VERSION
    state = torch.load(io.BytesIO(envelope["payload"].numpy().tobytes()), weights_only=True)
    assert set(checkpoint.REQUIRED_KEYS) <= set(state)


def _first_tensor(tree):
    return next(path for path, value in _walk(tree) if isinstance(value, torch.Tensor) and value.dim() >= 1)


def _walk(tree, path=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _walk(value, (*path, key))
    else:
        yield path, tree


def _set(tree, path, value):
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


@pytest.mark.parametrize(("field", "corrupt", "says"), [
    (("iteration",), lambda v: -1, "iteration: expected an integer >= 0, found -1"),
    (("iteration",), lambda v: "3", "iteration: expected an integer, found a str ('3')"),
    (("algorithm", "lr"), lambda v: -v, "algorithm.lr: expected a learning rate > 0"),
    (("policy", "actor.0.weight"), lambda v: v.long(), "policy.actor.0.weight: expected a float32 tensor of shape"),
    (("algorithm", "optimizer", "state", 1, "exp_avg"), lambda v: v.t().contiguous(),
     "algorithm.optimizer.state[1].exp_avg: expected a float32 tensor of shape"),
    (("algorithm", "optimizer", "state", 1, "exp_avg_sq"), lambda v: -v - 1, "holds negative values"),
    (("rng", "torch"), lambda v: v[:100].clone(), "rng.torch: expected a uint8 tensor of shape"),
    (("obs", "policy"), lambda v: v[:, :1].clone(), "obs.policy: expected a float32 tensor of shape"),
    (("config",), lambda v: "not a mapping", "its config is not a mapping"),
    (("config", "ppo"), lambda v: 3, "config: ppo is a section (a mapping of options), found int 3"),
    (("config", "ppo", "clipped_value_loss"), lambda v: "yes", "config: ppo.clipped_value_loss='yes' is invalid"),
    (("env",), None, "env."),
])
def test_a_checkpoint_with_a_valid_digest_and_a_wrong_field_is_one_line(field, corrupt, says, tmp_path: Path,
                                                                         capsys) -> None:
    """Fields of the wrong type, dtype, shape or range are named before anything is restored (the digest is
    recomputed: the file is intact, its content is wrong)."""
    from syncfree.cli import main

    assert main(["train", "--task", "pendulum", "--iterations", "1", "--env.num_envs", "8", "--ppo.steps_per_env",
                 "4", "--ppo.num_minibatches", "2", "--perf.compile", "off", "--log.progress", "false",
                 "--log.dir", str(tmp_path), "--log.run_name", "run"]) == 0
    latest = tmp_path / "run" / "latest.pt"
    state = checkpoint.load(latest)
    if corrupt is None:  # the env's first tensor, one row short
        field = ("env", *_first_tensor(state["env"]))
        corrupt = lambda v: v[:-1].clone()  # noqa: E731
    value = state
    for key in field:
        value = value[key]
    _set(state, field, corrupt(value))
    checkpoint.save_atomic(state, latest)
    capsys.readouterr()
    assert main(["train", "--resume", str(latest), "--iterations", "2", "--log.progress", "false"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err, err


def test_eval_refuses_weights_of_another_dtype(tmp_path: Path, capsys) -> None:
    from syncfree.cli import main

    assert main(["train", "--task", "pendulum", "--iterations", "1", "--env.num_envs", "8", "--ppo.steps_per_env",
                 "4", "--ppo.num_minibatches", "2", "--perf.compile", "off", "--log.progress", "false",
                 "--log.dir", str(tmp_path), "--log.run_name", "run"]) == 0
    latest = tmp_path / "run" / "latest.pt"
    state = checkpoint.load(latest)
    state["policy"]["actor.0.weight"] = (state["policy"]["actor.0.weight"] * 100).long()  # copy_ would cast it
    checkpoint.save_atomic(state, latest)
    capsys.readouterr()
    assert main(["eval", str(latest)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "policy.actor.0.weight: expected a float32 tensor" in err, err


@pytest.mark.parametrize(("field", "value", "says"), [
    (("action_spec",), ["discrete", -1], "action_spec ['discrete', -1] is invalid; expected ['continuous' or "
                                         "'discrete', an integer >= 1]"),
    (("action_spec",), ["torque", 1], "action_spec ['torque', 1] is invalid"),
    (("config", "policy", "actor_hidden"), [10**6, 10**6], "lower the policy's layer sizes"),
])
@pytest.mark.parametrize("command", ["eval", "export"])
def test_eval_and_export_name_a_checkpoints_wrong_shape_in_one_line(field, value, says, command: str,
                                                                    trained: Path, tmp_path: Path, capsys) -> None:
    """What `eval` and `export` build from a checkpoint alone (the policy of its recorded shapes and config) is
    checked first: a nonsense action spec, or layers past the machine's memory named by their setting."""
    from syncfree.cli import main

    state = checkpoint.load(trained)
    _set(state, field, value)
    path = tmp_path / "crafted.pt"
    checkpoint.save_atomic(state, path)
    capsys.readouterr()
    assert main([command, str(path), *(["--out", str(tmp_path / "out")] if command == "export" else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err, err
