"""Checkpoints are atomic, hold every piece of state, and a resumed run continues exactly."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import assert_same_state, small_config
from syncfree.train import checkpoint
from syncfree.train.run import Run
from syncfree.train.runner import Runner


@pytest.mark.parametrize("task, random_start", [("cartpole", False), ("pendulum", False), ("g1-track", False),
                                                 ("pendulum", True)])
def test_resume_continues_exactly(task: str, random_start: bool, tmp_path: Path) -> None:
    cfg = small_config(task)
    cfg.iterations, cfg.env.random_start = 4, random_start
    straight = Run(cfg, tmp_path / "straight")
    straight.learn()

    cfg = small_config(task)
    cfg.iterations, cfg.save_every, cfg.env.random_start = 2, 100, random_start
    first = Run(cfg, tmp_path / "split")
    first.learn()
    first.close()
    del first
    torch.manual_seed(12345)  # whatever happened in between must not matter

    cfg.iterations = 4
    second = Run(cfg, tmp_path / "split")
    second.runner.load_state_dict(checkpoint.load(tmp_path / "split" / "latest.pt"))
    assert second.runner.iteration == 2
    second.learn()

    for (name, a), b in zip(straight.runner.policy.state_dict().items(), second.runner.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert_same_state(straight.runner.env.state_dict(), second.runner.env.state_dict(), "env")
    sa, sb = straight.runner.algorithm.optim.optimizer.state_dict()["state"], second.runner.algorithm.optim.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[k][n], sb[k][n]) for k in sa for n in sa[k])
    assert straight.runner.env_steps == second.runner.env_steps
    lines = (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3, 4]


def test_checkpoint_holds_everything(tmp_path: Path) -> None:
    trainer = Run(small_config("pendulum"), tmp_path)
    trainer.learn()
    state = checkpoint.load(tmp_path / "latest.pt")
    assert {"policy", "algorithm", "env", "obs", "rng", "iteration", "config", "episodes"} <= set(state)
    assert {"torch", "numpy", "python"} <= set(state["rng"])
    assert "actor_norm.mean" in state["policy"] and "generator" in state["env"]
    assert sorted(p.name for p in tmp_path.glob("checkpoint_*.pt")) == ["checkpoint_000003.pt"]
    assert not list(tmp_path.glob(".*tmp"))


def test_save_is_atomic_when_writing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills while the new file is written: the old file stays, the partial one is removed."""
    path = tmp_path / "ck.pt"
    state = {**{key: {} for key in checkpoint.REQUIRED_KEYS}, "format": checkpoint.FORMAT_VERSION}
    checkpoint.save_atomic({**state, "x": 1}, path)

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save_atomic({**state, "x": 2}, path)
    monkeypatch.undo()
    assert checkpoint.load(path)["x"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.pt"]


def test_ctrl_c_saves_the_last_completed_iteration(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "syncfree", "train", "--task", "pendulum", "--iterations", "100000",
           "--save_every", "100000", "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false",
           "--env.num_envs", "16", "--ppo.steps_per_env", "8"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 3):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    done = len(metrics.read_text().splitlines())
    state = checkpoint.load(tmp_path / "run" / "latest.pt")
    assert state["iteration"] == done >= 3
    assert "stopping after this iteration" in err
    assert os.path.exists(tmp_path / "run" / f"checkpoint_{done:06d}.pt")


@pytest.mark.parametrize("saved_on_device", [False, True])
def test_resume_keeps_the_adapted_learning_rate_when_the_lr_switch_changes(tmp_path: Path,
                                                                           saved_on_device: bool) -> None:
    cfg = small_config("pendulum", device_adaptive_lr=saved_on_device)
    cfg.iterations = 2
    first = Run(cfg, tmp_path)
    record = first.learn()
    assert record["learning_rate"] != pytest.approx(cfg.ppo.learning_rate)  # the schedule moved it
    resumed = Runner(small_config("pendulum", device_adaptive_lr=not saved_on_device))
    resumed.load_state_dict(checkpoint.load(tmp_path / "latest.pt"))
    assert resumed.algorithm.optim.learning_rate == pytest.approx(record["learning_rate"], rel=1e-6)
    assert float(resumed.algorithm.optim.lr) == pytest.approx(record["learning_rate"], rel=1e-6)
    # a float, or a tensor the optimizer reads (float32 on a CUDA device with the fused kernel)
    lr = float(resumed.algorithm.optim.optimizer.param_groups[0]["lr"])
    assert lr == pytest.approx(record["learning_rate"], rel=1e-6)


def test_a_resumed_run_drops_the_records_past_its_checkpoint(tmp_path: Path) -> None:
    from syncfree.train.logger import truncate_records

    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"iteration": i, "x": 1.0}) + "\n" for i in (1, 2, 3, 4)) + '{"iterat')
    assert truncate_records(path, 2) == 3  # iterations 3 and 4, and the line a kill cut short
    assert [json.loads(line)["iteration"] for line in path.read_text().splitlines()] == [1, 2]
    assert truncate_records(path, 2) == 0 and truncate_records(tmp_path / "none.jsonl", 0) == 0


EARLIER_ENV = {"num_envs": 2, "max_episode_length": 0, "robot": "", "motions": [],
               "grid": {"map": "mines", "agents_per_env": 4, "width": 8, "height": 8, "max_steps": 64, "mines": 5},
               "g1": {"history": 3, "num_encoders": 2, "tokenizer_frames": [1, 2], "sampler_bin_frames": 25,
                      "sampler_uniform_ratio": 0.1, "sampler_cap": 5.0, "sampler_decay": 0.9}, "backend": ""}
"""An `env` section as configs of the earlier layout wrote it: every task's options in every config."""


@pytest.mark.parametrize("task", ["grid-arena", "g1-track", "pendulum"])
def test_a_config_of_the_earlier_layout_is_read_in_this_one(task: str, tmp_path: Path) -> None:
    """A checkpoint's or a run's `config.yaml` of the earlier layout: each option where the task's config type keeps
    it now, the options of other tasks dropped; as a `--config` file, and as a stored dict."""
    import yaml

    from syncfree.tasks import config_from_dict
    from syncfree.train.arguments import parse_train_config

    earlier = {"task": task, "iterations": 3, "env": EARLIER_ENV,
               "policy": {"kind": "recurrent" if task == "grid-arena" else "mlp", "actor_hidden": [16],
                          "token": {"num_tokens": 2}, "recurrent": {"hidden": 8}},
               "ppo": {"steps_per_env": 16, "num_minibatches": 2, "bptt_horizon": 8},
               "losses": {"ppo": 1.0, "supervised": 0.0}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(earlier))
    for cfg in (config_from_dict(earlier), parse_train_config(["--config", str(tmp_path / "config.yaml")])):
        assert (cfg.task, cfg.iterations, cfg.env.num_envs, cfg.ppo.steps_per_env) == (task, 3, 2, 16)
        names = {f.name for f in dataclasses.fields(cfg.env)}
        if task == "grid-arena":
            assert (cfg.env.mines, cfg.env.max_steps, cfg.policy.recurrent.hidden, cfg.ppo.bptt_horizon) == (5, 64, 8, 8)
            assert "history" not in names and cfg.losses.ppo == 1.0
        elif task == "g1-track":
            assert (cfg.env.history, cfg.env.sampler_bin_frames, cfg.env.backend) == (3, 25, "torch")
            assert cfg.policy.token.num_tokens == 2 and "map" not in names and not hasattr(cfg, "losses")
        else:
            assert names == {"num_envs", "max_episode_length", "random_start"} and not cfg.env.random_start
            assert cfg.policy.actor_hidden == [16]
            assert not hasattr(cfg.ppo, "bptt_horizon") and not hasattr(cfg.policy, "token")
    assert config_from_dict(dataclasses.asdict(cfg)) == cfg  # this layout reads back as it is


BEFORE_ALGORITHM = Path(__file__).parent / "data" / "before-algorithm"
"""Configs and checkpoints written before a config named its algorithm (its README says how)."""


@pytest.mark.parametrize(("name", "algorithm"), [("ppo", "ppo"), ("recurrent", "recurrent-ppo"),
                                                 ("distillation", "distillation")])
def test_configs_and_checkpoints_written_before_the_algorithm_was_named_still_read(
        name: str, algorithm: str, tmp_path: Path) -> None:
    """A run's `config.yaml` and checkpoint from before `--algorithm`: the algorithm that trained it is the one its
    policy kind and teacher said, the other algorithms' sections (which it never read) are dropped, a
    distillation's rollout length moves to `distill.steps_per_env`; as a `--config` file, a stored dict and a
    checkpoint, which evaluates and (but the distillation, whose teacher is gone) resumes."""
    import yaml

    from syncfree.tasks import config_from_dict
    from syncfree.train.arguments import parse_train_config
    from syncfree.train.evaluate import evaluate_task, load_policy
    from syncfree.train.session import resume_config

    stored = yaml.safe_load((BEFORE_ALGORITHM / f"{name}.yaml").read_text())
    assert "algorithm" not in stored and "distill" in stored
    for cfg in (config_from_dict(stored), parse_train_config(["--config", str(BEFORE_ALGORITHM / f"{name}.yaml")]),
                checkpoint.read(BEFORE_ALGORITHM / f"{name}.pt")[0]):
        assert (cfg.algorithm, cfg.task, cfg.env.num_envs, cfg.rollout_steps()) == (algorithm, "pendulum", 4, 8)
        assert config_from_dict(dataclasses.asdict(cfg)) == cfg
    loaded = load_policy(BEFORE_ALGORITHM / f"{name}.pt")
    returns = evaluate_task(loaded.cfg, loaded.policy, 2, loaded.device, 0)
    assert loaded.iteration == 1 and returns.shape == (2,) and bool(np.isfinite(returns).all())
    if name == "distillation":
        return
    cfg = resume_config(BEFORE_ALGORITHM / f"{name}.pt")
    cfg.iterations, cfg.log.dir = 2, str(tmp_path)
    runner = Run(cfg, tmp_path / "resumed")
    runner.resume(BEFORE_ALGORITHM / f"{name}.pt")
    assert runner.learn()["iteration"] == 2
    runner.close()


def test_the_kickstarter_teacher_committed_in_the_earlier_layout_still_loads() -> None:
    teacher = Path(__file__).parents[1] / "benchmarks/results/grid-arena-kickstarter-cpu/teacher/latest.pt"
    cfg, _ = checkpoint.read(teacher)
    assert (cfg.env.map, cfg.env.agents_per_env, cfg.env.max_steps, cfg.policy.recurrent.hidden) == ("mines", 4, 64, 64)
