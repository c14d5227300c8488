"""Faults a careful user or a hostile file can cause, one table row each: the row arranges the fault and gives the
command line; the test runs it and asserts the exit code, the one line on stderr (no traceback) and what is on
disk afterwards.

`FAULTS` run `syncfree.cli.main` in this process; `PROCESS_FAULTS` need a process of their own (signals, a file
size limit, a peer that hangs) and run `python -m syncfree`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from test_bad_input import NaNCartPole, NaNPendulum
from test_checkpoint_safety import Payload
from test_run_folder import full_disk_at_the_end

from syncfree.cli import main
from syncfree.envs.builtin.classic import Pendulum
from syncfree.envs.render import draw_cartpole, draw_pendulum
from syncfree.tasks import TASKS
from syncfree.tasks.classic import classic_config, classic_task
from syncfree.train import checkpoint

SMALL = ["--task", "pendulum", "--env.num_envs", "16", "--ppo.steps_per_env", "8", "--log.progress", "false",
         "--perf.compile", "off"]
"""A run of a second or two."""

G1_SMALL = ["--task", "g1-track", "--env.num_envs", "4", "--ppo.steps_per_env", "2", "--ppo.num_minibatches", "1",
            "--log.progress", "false", "--perf.compile", "off"]


@dataclass
class Ctx:
    """What a row's functions get: its own folder, a trained run to copy from, and pytest's monkeypatch."""

    tmp: Path
    trained: Path
    monkeypatch: pytest.MonkeyPatch
    unwritable: Callable[[Path], None]
    notes: dict = field(default_factory=dict)

    def run_copy(self, name: str = "run") -> Path:
        """A copy of the trained run's folder (2 iterations of pendulum, `SMALL`); returns its `latest.pt`."""
        target = self.tmp / name
        target.mkdir(parents=True)
        for path in self.trained.parent.iterdir():
            if path.is_file():
                (target / path.name).write_bytes(path.read_bytes())
        return target / "latest.pt"


@dataclass(frozen=True)
class Fault:
    name: str
    arrange: Callable[[Ctx], list[str]]
    """Sets the fault up under `ctx.tmp`; returns the command line."""
    code: int
    says: str | None
    """A regular expression the one stderr line must match (exit 2 and 1); for exit 0, the log must match it."""
    after: Callable[[Ctx], None] = lambda ctx: None
    """Asserts what is on disk afterwards."""


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def iterations_logged(run: Path) -> list[int]:
    return [int(m) for m in re.findall(r'"iteration": (\d+)', (run / "metrics.jsonl").read_text())]


# -- the rows' set-ups ---------------------------------------------------------------------------------------

def crafted(command: str) -> Callable[[Ctx], list[str]]:
    def arrange(ctx: Ctx) -> list[str]:
        torch.save(Payload(ctx.tmp / "ran"), ctx.tmp / "crafted.pt")
        flag = ["--resume"] if command == "train" else []
        return [command, *flag, str(ctx.tmp / "crafted.pt")]
    return arrange


def flipped_byte(ctx: Ctx) -> list[str]:
    envelope = torch.load(ctx.trained, weights_only=True)
    envelope["payload"][len(envelope["payload"]) // 2] ^= 0xFF
    torch.save(envelope, ctx.tmp / "damaged.pt")
    return ["eval", str(ctx.tmp / "damaged.pt")]


def missing_keys(ctx: Ctx) -> list[str]:
    state = checkpoint.load(ctx.trained)
    del state["algorithm"], state["config"]
    checkpoint.save_atomic(state, ctx.tmp / "partial.pt")
    return ["train", "--resume", str(ctx.tmp / "partial.pt")]


def nan_weights(ctx: Ctx) -> list[str]:
    state = checkpoint.load(ctx.trained)
    state["policy"]["actor.0.weight"][0, 0] = float("nan")
    checkpoint.save_atomic(state, ctx.tmp / "diverged.pt")
    return ["export", str(ctx.tmp / "diverged.pt")]


def nan_observations(env_class: type) -> Callable[[Ctx], list[str]]:
    def arrange(ctx: Ctx) -> list[str]:
        ctx.monkeypatch.setitem(TASKS, "nan-task", classic_task("nan-task", "test", env_class, classic_config,
                                                                draw_cartpole))
        return ["train", *SMALL, "--task", "nan-task", "--iterations", "3", "--save_every", "1", "--log.dir",
                str(ctx.tmp), "--log.run_name", "run"]
    return arrange


def learning_rate(value: str) -> Callable[[Ctx], list[str]]:
    def arrange(ctx: Ctx) -> list[str]:
        return ["train", *SMALL, "--ppo.schedule", "fixed", "--ppo.learning_rate", value, "--iterations", "3",
                "--log.dir", str(ctx.tmp), "--log.run_name", "run"]
    return arrange


def fresh_run(log_dir: Callable[[Ctx], Path], run_name: str = "run", *extra: str) -> Callable[[Ctx], list[str]]:
    def arrange(ctx: Ctx) -> list[str]:
        return ["train", *SMALL, "--iterations", "1", "--log.dir", str(log_dir(ctx)), "--log.run_name", run_name,
                *extra]
    return arrange


def log_dir_is_a_file(ctx: Ctx) -> Path:
    (ctx.tmp / "logs").write_text("not a folder")
    return ctx.tmp / "logs"


def run_name_is_a_file(ctx: Ctx) -> Path:
    (ctx.tmp / "run").write_text("not a folder")
    return ctx.tmp


def unwritable_log_dir(ctx: Ctx) -> Path:
    (ctx.tmp / "logs").mkdir()
    ctx.unwritable(ctx.tmp / "logs")
    return ctx.tmp / "logs"


def missing_log_dir_in_unwritable_folder(ctx: Ctx) -> Path:
    (ctx.tmp / "ro").mkdir()
    ctx.unwritable(ctx.tmp / "ro")
    return ctx.tmp / "ro" / "logs"


def resume_where_no_new_file_can_be_made(ctx: Ctx) -> list[str]:
    """An immutable or read-only run folder: its existing files may be writable, new ones cannot be created."""
    latest = ctx.run_copy()
    ctx.notes["before"] = digest(latest.parent)
    ctx.unwritable(latest.parent)
    return ["train", "--resume", str(latest), "--resume_in_place", "true", "--iterations", "4"]


def resume_of_a_read_only_run(ctx: Ctx) -> list[str]:
    """A resume writes its own folder: the resumed run's may be read-only."""
    latest = ctx.run_copy()
    ctx.notes["before"] = digest(latest.parent)
    ctx.unwritable(latest.parent)
    return ["train", "--resume", str(latest), "--iterations", "3"]


def forked_beside_it(ctx: Ctx) -> None:
    unchanged(ctx)
    (forked,) = [p for p in ctx.tmp.iterdir() if p.name.startswith("run-resumed-")]
    assert iterations_logged(forked) == [1, 2, 3] and checkpoint.load(forked / "latest.pt")["iteration"] == 3


def unchanged(ctx: Ctx) -> None:
    assert digest(ctx.tmp / "run") == ctx.notes["before"]


def disk_fills_after_the_first_save(ctx: Ctx) -> list[str]:
    real_fsync, calls = os.fsync, []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) > 4:  # the start-up write test, config.yaml, the first checkpoint and its latest.pt copy
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    ctx.monkeypatch.setattr(os, "fsync", fsync)
    return ["train", *SMALL, "--iterations", "3", "--save_every", "1", "--log.dir", str(ctx.tmp), "--log.run_name",
            "run"]


def disk_full_at_the_end(ctx: Ctx) -> list[str]:
    """The disk fills after the first save, and the run's logs (metrics, TensorBoard) cannot flush as they close."""
    full_disk_at_the_end(ctx.monkeypatch)
    return [*disk_fills_after_the_first_save(ctx), "--log.tensorboard", "true"]


def first_checkpoint_kept(ctx: Ctx) -> None:
    run = ctx.tmp / "run"
    assert files(run) == ["checkpoint_000001.pt", "config.yaml", "latest.pt", "metrics.jsonl"]  # no .tmp left
    assert checkpoint.load(run / "latest.pt")["iteration"] == 1
    assert iterations_logged(run) == [1, 2, 3]  # training went on after the failed save


def reused_run_name(ctx: Ctx) -> list[str]:
    latest = ctx.run_copy()
    ctx.notes["before"] = digest(latest.parent)
    return ["train", *SMALL, "--iterations", "1", "--log.dir", str(ctx.tmp), "--log.run_name", "run"]


def stale_tmp_files(ctx: Ctx) -> list[str]:
    latest = ctx.run_copy()
    for iteration in (7, 8):  # saves this run does not make: their names are not written again
        (latest.parent / f".checkpoint_{iteration:06d}.pt.tmp").write_bytes(b"half a checkpoint")
    return ["train", "--resume", str(latest), "--resume_in_place", "true", "--iterations", "3"]


def no_tmp_left(ctx: Ctx) -> None:
    assert not list((ctx.tmp / "run").glob(".*"))
    assert checkpoint.load(ctx.tmp / "run" / "latest.pt")["iteration"] == 3


def resume_from_an_earlier_checkpoint(*flags: str) -> Callable[[Ctx], list[str]]:
    def arrange(ctx: Ctx) -> list[str]:
        latest = ctx.run_copy()
        (latest.parent / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i}) + "\n" for i in (1, 2, 3)))
        ctx.notes["before"] = digest(latest.parent)
        return ["train", "--resume", str(latest.parent / "checkpoint_000001.pt"), "--iterations", "2", *flags]
    return arrange


def metrics_read_as_one_run(ctx: Ctx) -> None:
    assert iterations_logged(ctx.tmp / "run") == [1, 2]


def metrics_read_as_two_runs(ctx: Ctx) -> None:
    unchanged(ctx)
    assert iterations_logged(ctx.tmp / "fork") == [1, 2]


def robot_file(edit: Callable[[str], str]) -> Callable[[Ctx], list[str]]:
    def arrange(ctx: Ctx) -> list[str]:
        from syncfree.envs.robots.mjcf import default_robot_path

        shipped = default_robot_path().read_text()
        edited = edit(shipped)
        assert edited != shipped
        (ctx.tmp / "robot.xml").write_text(edited)
        return ["train", *G1_SMALL, "--iterations", "1", "--env.robot", str(ctx.tmp / "robot.xml"), "--log.dir",
                str(ctx.tmp), "--log.run_name", "run"]
    return arrange


def trained_one_iteration(ctx: Ctx) -> None:
    assert checkpoint.load(ctx.tmp / "run" / "latest.pt")["iteration"] == 1


def resume_with_other_clips(ctx: Ctx) -> list[str]:
    from syncfree.envs.motion import generate_clips, save_clip
    from syncfree.envs.robots import load_robot

    assert main(["train", *G1_SMALL, "--iterations", "1", "--log.dir", str(ctx.tmp), "--log.run_name", "run"]) == 0
    for clip in generate_clips(load_robot(), num_clips=2, seconds=1.0, seed=1):
        save_clip(ctx.tmp / f"{clip.name}.npz", clip)
    return ["train", "--resume", str(ctx.tmp / "run" / "latest.pt"), "--iterations", "2", "--env.motions",
            f"[{ctx.tmp}]"]


def checkpoint_kept_alone(*flags: str) -> Callable[[Ctx], list[str]]:
    """A checkpoint copied out of its run folder, whose config's `log.dir` names a folder of the file's choosing."""
    def arrange(ctx: Ctx) -> list[str]:
        state = checkpoint.load(ctx.trained)
        state["config"]["log"]["dir"] = str(ctx.tmp / "named-by-the-file")
        checkpoint.save_atomic(state, ctx.tmp / "alone" / "kept.pt")
        ctx.monkeypatch.chdir(ctx.tmp)
        return ["train", "--resume", str(ctx.tmp / "alone" / "kept.pt"), "--iterations", "3",
                *(arg.format(tmp=ctx.tmp) for arg in flags)]
    return arrange


def resumed_under(folder: str) -> Callable[[Ctx], None]:
    """The resume wrote one run under `ctx.tmp/folder`, and nothing where the file's config said."""
    def after(ctx: Ctx) -> None:
        assert not (ctx.tmp / "named-by-the-file").exists()
        assert files(ctx.tmp / "alone") == ["kept.pt"]
        (run,) = (ctx.tmp / folder).iterdir()
        assert run.name.startswith("kept-resumed-") and checkpoint.load(run / "latest.pt")["iteration"] == 3
    return after


class WiderPendulum(Pendulum):
    """Pendulum given a fourth observation: an env edited after a run trained on it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.obs_shapes = {"policy": (4,), "critic": (4,)}

    def _observe(self) -> dict[str, torch.Tensor]:
        obs = super()._observe()["policy"]
        if self.obs_shapes["policy"] == (3,):  # the first reset, in Pendulum's constructor
            return {"policy": obs, "critic": obs}
        wide = torch.cat((obs, obs[:, :1]), dim=-1)
        return {"policy": wide, "critic": wide}


def env_edited_after_training(command: str, *flags: str) -> Callable[[Ctx], list[str]]:
    """A run of a task of the user's, whose env then changes its observations; `command` runs the checkpoint."""
    def arrange(ctx: Ctx) -> list[str]:
        ctx.monkeypatch.setitem(TASKS, "own", classic_task("own", "test", Pendulum, classic_config, draw_pendulum))
        assert main(["train", *SMALL, "--task", "own", "--iterations", "1", "--log.dir", str(ctx.tmp),
                     "--log.run_name", "run"]) == 0
        ctx.monkeypatch.setitem(TASKS, "own", classic_task("own", "test", WiderPendulum, classic_config,
                                                           draw_pendulum))
        return [command, str(ctx.tmp / "run" / "latest.pt"), *(flag.format(tmp=ctx.tmp) for flag in flags)]
    return arrange


def resume_with(*override: str) -> Callable[[Ctx], list[str]]:
    def arrange(ctx: Ctx) -> list[str]:
        return ["train", "--resume", str(ctx.run_copy()), "--iterations", "3", *override]
    return arrange


def nothing_written(folder: str = "run") -> Callable[[Ctx], None]:
    def after(ctx: Ctx) -> None:
        assert not (ctx.tmp / folder).is_dir() or not list((ctx.tmp / folder).glob("*.pt"))
        assert not (ctx.tmp / "ran").exists()
    return after


def latest_at(iteration: int) -> Callable[[Ctx], None]:
    """The run's `latest.pt` is still the checkpoint of `iteration`."""
    def after(ctx: Ctx) -> None:
        assert checkpoint.load(ctx.tmp / "run" / "latest.pt")["iteration"] == iteration
    return after


def only_the_run(ctx: Ctx) -> None:
    assert files(ctx.tmp) == ["run"]


def files_of_the_run(ctx: Ctx) -> None:
    """A refused resume leaves no lock (nor anything else) behind."""
    assert files(ctx.tmp / "run") == files(ctx.trained.parent)


def stays_empty(name: str) -> Callable[[Ctx], None]:
    def after(ctx: Ctx) -> None:
        assert files(ctx.tmp / name) == []
    return after


def file_unchanged(name: str) -> Callable[[Ctx], None]:
    def after(ctx: Ctx) -> None:
        assert (ctx.tmp / name).read_text() == "not a folder"
    return after


def no_video(ctx: Ctx) -> None:
    assert not (ctx.tmp / "play.gif").exists() and not (ctx.tmp / "run" / "play.mp4").exists()


def no_checkpoint_file(ctx: Ctx) -> None:
    assert not list(ctx.tmp.rglob("*.pt"))


FAULTS = [
    Fault("crafted pickle, eval", crafted("eval"), 2, r"crafted\.pt: holds .* could run code", nothing_written()),
    Fault("crafted pickle, export", crafted("export"), 2, r"crafted\.pt: holds .* could run code", nothing_written()),
    Fault("crafted pickle, resume", crafted("train"), 2, r"crafted\.pt: holds .* could run code", nothing_written()),
    Fault("bit-flipped checkpoint", flipped_byte, 2, r"damaged\.pt: its content does not match its SHA-256"),
    Fault("checkpoint missing keys", missing_keys, 2, r"partial\.pt: lacks config, algorithm"),
    Fault("checkpoint with NaN weights", nan_weights, 2, r"diverged\.pt: policy\.actor\.0\.weight holds non-finite"),
    Fault("NaN observations, continuous actions", nan_observations(NaNPendulum), 2,
          r"iteration 3: non-finite observation or reward from env ids \[3, 5\]",
          latest_at(2)),
    Fault("NaN observations, discrete actions", nan_observations(NaNCartPole), 2,
          r"iteration 3: non-finite observation or reward from env ids \[3, 5\]",
          latest_at(2)),
    *(Fault(f"learning rate {lr}", learning_rate(lr), 2, r"iteration 1: .*diverged", nothing_written())
      for lr in ("1e6", "1e20", "1e38")),
    Fault("learning rate inf (1e400)", learning_rate("1e400"), 2, r"ppo\.learning_rate=inf .*a finite number",
          no_checkpoint_file),
    Fault("log dir is a file", fresh_run(log_dir_is_a_file), 2, r"run folder .*logs/run: cannot write there .*Not a "
          r"directory", file_unchanged("logs")),
    Fault("run name is an existing file", fresh_run(run_name_is_a_file), 2, r"run folder .*/run: exists and is not a "
          "folder", file_unchanged("run")),
    Fault("log dir not writable (read-only, immutable)", fresh_run(unwritable_log_dir), 2,
          r"run folder .*logs/run: cannot write there \(.*logs/run: (Permission denied|Operation not permitted)\)",
          stays_empty("logs")),
    Fault("missing log dir in a folder that is not writable", fresh_run(missing_log_dir_in_unwritable_folder), 2,
          r"run folder .*ro/logs/run: cannot write there \(.*ro/logs: (Permission denied|Operation not permitted)\)",
          stays_empty("ro")),
    Fault("resume where existing files are writable but new ones are not", resume_where_no_new_file_can_be_made, 2,
          r"run folder .*run: cannot write there .*(Permission denied|Operation not permitted)", unchanged),
    Fault("disk fills after the first save", disk_fills_after_the_first_save, 2,
          r"iteration 3: checkpoint not saved: cannot write .*No space left on device.*newest checkpoint "
          r".*run/latest\.pt", first_checkpoint_kept),
    Fault("disk full at the end, logs included", disk_full_at_the_end, 2,
          r"iteration 3: checkpoint not saved: cannot write .*No space left on device.*newest checkpoint "
          r".*run/latest\.pt$", latest_at(1)),
    Fault("run name reused", reused_run_name, 2, r"run folder .*run already holds a run \(latest\.pt\); choose another "
          r"log\.run_name, or continue that run with --resume .*run/latest\.pt --resume_in_place true", unchanged),
    Fault("stale .tmp files of a killed save", stale_tmp_files, 0, r"removed 2 temporary file\(s\)", no_tmp_left),
    Fault("resume in place from an earlier checkpoint", resume_from_an_earlier_checkpoint("--resume_in_place", "true"),
          0, r"(?m)resumed .*checkpoint_000001\.pt at iteration 1$", metrics_read_as_one_run),
    Fault("resume from an earlier checkpoint into a named folder",
          resume_from_an_earlier_checkpoint("--log.run_name", "fork"), 0,
          r"resumed .*checkpoint_000001\.pt at iteration 1 as a new run", metrics_read_as_two_runs),
    Fault("resume of a run whose folder is read-only", resume_of_a_read_only_run, 0, r"done at iteration 3",
          forked_beside_it),
    Fault("resume of a checkpoint kept alone", checkpoint_kept_alone(), 0, r"done at iteration 3",
          resumed_under("runs")),
    Fault("resume of a checkpoint kept alone, --log.dir given", checkpoint_kept_alone("--log.dir", "{tmp}/chosen"), 0,
          r"done at iteration 3", resumed_under("chosen")),
    *(Fault(f"{command} of a checkpoint whose env changed since", env_edited_after_training(command, *flags), 2,
            r"latest\.pt: the policy was trained on observations policy \(3,\), critic \(3,\) and continuous "
            r"actions of size 1, but this env gives policy \(4,\), critic \(4,\) and takes continuous actions of "
            r"size 1 \(the env changed since the run trained\)", no_video)
      for command, flags in (("eval", ()), ("play", ("--video", "{tmp}/play.gif", "--steps", "2")))),
    Fault("gym:Blackjack-v1 (a Tuple observation space)", lambda ctx: [
        "train", "--task", "gym:Blackjack-v1", "--iterations", "1", "--log.progress", "false", "--log.dir",
        str(ctx.tmp), "--log.run_name", "run"], 2, r"observation space Tuple\(Discrete\(32\), Discrete\(11\), "
          r"Discrete\(2\)\) is not supported \(needs a Box\)", stays_empty(".")),
    Fault("resume_in_place without a checkpoint", lambda ctx: ["train", *SMALL, "--resume_in_place", "true",
          "--log.dir", str(ctx.tmp)], 2, r"resume_in_place=True is invalid; allowed: false unless resume names a "
          r"checkpoint", stays_empty(".")),
    Fault("resume_in_place with another run name", resume_with("--resume_in_place", "true", "--log.run_name", "b"), 2,
          r"log\.run_name='b' with resume_in_place: the run continues in .*run; drop one of the two", only_the_run),
    Fault("robot with zero armature", robot_file(lambda xml: re.sub(r' armature="[^"]*"', "", xml)), 0,
          r"done at iteration 1", trained_one_iteration),
    Fault("robot with an unlimited hinge", robot_file(lambda xml: xml.replace(
        '<joint name="left_hip_roll_joint" class="hip_roll" range="-0.5236 2.9671"/>',
        '<joint name="left_hip_roll_joint" class="hip_roll"/>')), 0, r"done at iteration 1", trained_one_iteration),
    Fault("resume g1-track with another clip set", resume_with_other_clips, 2,
          r"env state: .*clips.*env\.motions.*resume with the clips the run was trained on",
          latest_at(1)),
    Fault("grid agents_per_env=0", lambda ctx: ["train", "--task", "grid-arena", "--env.agents_per_env", "0",
                                                "--log.dir", str(ctx.tmp)], 2,
          r"config: env\.agents_per_env=0 is invalid; allowed: an integer >= 1", no_checkpoint_file),
    Fault("--iterations 0", fresh_run(lambda ctx: ctx.tmp, "run", "--iterations", "0"), 0,
          r"done at iteration 0 .*no checkpoint written", no_checkpoint_file),
    Fault("huge env.num_envs", fresh_run(lambda ctx: ctx.tmp, "run", "--env.num_envs", "100000000000"), 2,
          r"out of memory: an allocation of \d+\.\d GiB failed; lower env\.num_envs \(the envs", no_checkpoint_file),
    Fault("huge layer", fresh_run(lambda ctx: ctx.tmp, "run", "--policy.actor_hidden", "[100000000000]"), 2,
          r"out of memory: an allocation of \d+\.\d GiB failed; lower the policy's layer sizes \(policy\.actor_hidden",
          no_checkpoint_file),
    Fault("huge ppo.steps_per_env", fresh_run(lambda ctx: ctx.tmp, "run", "--ppo.steps_per_env", "100000000000"), 2,
          r"out of memory: an allocation of \d+\.\d GiB failed; lower env\.num_envs or ppo\.steps_per_env \(the "
          r"rollout storage", no_checkpoint_file),
    Fault("huge rnd.predictor_hidden", fresh_run(lambda ctx: ctx.tmp, "run", "--rnd.enabled", "true", "--rnd.weight",
                                                 "0.5", "--rnd.predictor_hidden", "[100000000000]"), 2,
          r"out of memory: an allocation of \d+\.\d GiB failed; lower rnd\.predictor_hidden, rnd\.target_hidden or "
          r"rnd\.num_outputs", no_checkpoint_file),
    Fault("huge callbacks.eval_envs", fresh_run(lambda ctx: ctx.tmp, "run", "--callbacks.eval_every", "1",
                                                "--callbacks.eval_envs", "100000000000"), 2,
          r"out of memory: an allocation of \d+\.\d GiB failed; lower callbacks\.eval_envs", no_checkpoint_file),
    Fault("resume with another policy.activation", resume_with("--policy.activation", "tanh"), 2,
          r"trained with policy\.activation='elu' but this run has policy\.activation='tanh'",
          lambda ctx: (latest_at(2)(ctx), only_the_run(ctx), files_of_the_run(ctx))),
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 iterations of `SMALL`, a checkpoint each."""
    folder = tmp_path_factory.mktemp("trained")
    assert main(["train", *SMALL, "--iterations", "2", "--save_every", "1", "--log.dir", str(folder),
                 "--log.run_name", "run"]) == 0
    return folder / "run" / "latest.pt"


@pytest.fixture
def unwritable():
    """Make a folder refuse new entries: `chmod` for a user, the immutable attribute for root (whom permissions
    do not stop); skipped where neither works."""
    made: list[Path] = []

    def make(folder: Path) -> None:
        if os.geteuid() != 0:
            folder.chmod(0o555)
        elif subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("running as root on a file system without the immutable attribute")
        made.append(folder)
        try:
            (folder / ".probe").touch()
        except OSError:
            return
        (folder / ".probe").unlink()
        pytest.skip(f"cannot make {folder} unwritable here")

    yield make
    for folder in made:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=False)
        else:
            folder.chmod(0o755)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault(fault: Fault, trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unwritable,
               capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture) -> None:
    if "grid" in fault.name:
        pytest.importorskip("mettagrid")
    if "gym:" in fault.name:
        pytest.importorskip("gymnasium")
    ctx = Ctx(tmp_path, trained, monkeypatch, unwritable)
    argv = fault.arrange(ctx)
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="syncfree"):
        code = main(argv)
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert code == fault.code, err + caplog.text
    if fault.code == 0:
        assert re.search(fault.says, caplog.text), caplog.text
    else:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("syncfree: error: "), err
        assert re.search(fault.says, lines[0]), lines[0]
    fault.after(ctx)


# -- faults that need a process of their own -----------------------------------------------------------------

SLOW = ["--task", "pendulum", "--env.num_envs", "4096", "--ppo.steps_per_env", "64", "--log.progress", "false",
        "--perf.compile", "off", "--iterations", "1000", "--save_every", "1"]
"""Iterations of a second or so: long enough for a signal to land inside one."""


class Launched:
    """`python -m syncfree ARGV`, its stderr read as it comes."""

    def __init__(self, argv: list[str], file_size_limit: int | None = None, ignored: tuple[int, ...] = ()) -> None:
        def limit() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

        def start() -> None:
            if file_size_limit:
                limit()
            for signum in ignored:  # as `nohup` starts its command
                signal.signal(signum, signal.SIG_IGN)

        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "syncfree", *argv], stderr=subprocess.PIPE, text=True,
                                     env=env, preexec_fn=start if file_size_limit or ignored else None)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True)
        self._reader.start()

    def send(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def finish(self, seconds: float = 120.0) -> tuple[int, str]:
        try:
            code = self.proc.wait(timeout=seconds)
        finally:
            self.proc.kill()
        self._reader.join(timeout=10)
        return code, "".join(self.lines)


def wait_for(predicate: Callable[[], bool], seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def logged_iterations(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def signal_in_training(signum: int) -> Callable[[Launched, Path], None]:
    def act(proc: Launched, run: Path) -> None:
        wait_for(lambda: logged_iterations(run) >= 1)
        proc.send(signum)
    return act


def sighup_under_nohup_then_sigterm(proc: Launched, run: Path) -> None:
    wait_for(lambda: logged_iterations(run) >= 1)
    proc.send(signal.SIGHUP)
    reached = logged_iterations(run)
    wait_for(lambda: logged_iterations(run) >= reached + 2)  # trains on
    assert proc.proc.poll() is None
    proc.send(signal.SIGTERM)


def two_signals_in_training(proc: Launched, run: Path) -> None:
    wait_for(lambda: logged_iterations(run) >= 1)
    time.sleep(0.3)  # inside the next iteration
    proc.send(signal.SIGTERM)
    time.sleep(0.05)
    proc.send(signal.SIGINT)


def two_ctrl_c_before_the_first_save(proc: Launched, run: Path) -> None:
    wait_for(lambda: proc.said("training pendulum"))  # the first iteration starts
    time.sleep(0.2)
    proc.send(signal.SIGINT)
    time.sleep(0.05)
    proc.send(signal.SIGINT)


def signal_at_start_up(signum: int) -> Callable[[Launched, Path], None]:
    def act(proc: Launched, run: Path) -> None:
        time.sleep(0.5)  # past `main`, importing torch (a second or more here)
        assert not proc.said("training pendulum")
        proc.send(signum)
    return act


def saved_as_logged(run: Path) -> None:
    assert checkpoint.load(run / "latest.pt")["iteration"] == logged_iterations(run) >= 1
    assert not list(run.glob(".*"))


def no_checkpoint(run: Path) -> None:
    assert not run.exists() or not (list(run.glob("*.pt")) or list(run.glob(".*")))


@dataclass(frozen=True)
class ProcessFault:
    name: str
    act: Callable[[Launched, Path], None]
    """What happens to the running `syncfree train` (its run folder given)."""
    codes: tuple[int, ...]
    says: str
    """A regular expression the last stderr line must match."""
    after: Callable[[Path], None]
    argv: tuple[str, ...] = tuple(SLOW)
    file_size_limit: int | None = None
    ignored: tuple[int, ...] = ()
    """Signals the process starts ignoring."""


PROCESS_FAULTS = [
    ProcessFault("SIGTERM during training saves and exits", signal_in_training(signal.SIGTERM), (0,),
                 r"^stopped at iteration \d+ .*checkpoint .*run/latest\.pt$", saved_as_logged),
    ProcessFault("SIGHUP (a closed terminal) during training saves and exits", signal_in_training(signal.SIGHUP), (0,),
                 r"^stopped at iteration \d+ .*checkpoint .*run/latest\.pt$", saved_as_logged),
    ProcessFault("SIGHUP under nohup is left ignored", sighup_under_nohup_then_sigterm, (0,),
                 r"^stopped at iteration \d+ .*checkpoint .*run/latest\.pt$", saved_as_logged,
                 ignored=(signal.SIGHUP,)),
    ProcessFault("a second signal aborts without a traceback", two_signals_in_training, (130,),
                 r"^aborted; checkpoint .*run/latest\.pt$", lambda run: checkpoint.load(run / "latest.pt")),
    ProcessFault("Ctrl-C twice before the first save", two_ctrl_c_before_the_first_save, (130,),
                 r"^aborted; no checkpoint written \(no iteration finished\)$", no_checkpoint),
    ProcessFault("SIGTERM during start-up", signal_at_start_up(signal.SIGTERM), (130, -signal.SIGTERM),
                 r"^(syncfree: interrupted|training pendulum .*)?$", no_checkpoint),
    ProcessFault("Ctrl-C during start-up", signal_at_start_up(signal.SIGINT), (130,),
                 r"^(syncfree: interrupted|aborted; no checkpoint written \(no iteration finished\))$", no_checkpoint),
    ProcessFault("the disk holds no checkpoint at all", lambda proc, run: None, (2,),
                 r"^syncfree: error: iteration 2: checkpoint not saved: cannot write .*File too large\); no checkpoint "
                 r"written by this run$", no_checkpoint,
                 argv=(*SMALL, "--iterations", "2"), file_size_limit=32 * 1024),
]


@pytest.mark.slow
@pytest.mark.parametrize("fault", PROCESS_FAULTS, ids=[f.name for f in PROCESS_FAULTS])
def test_process_fault(fault: ProcessFault, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = Launched(["train", *fault.argv, "--log.dir", str(tmp_path), "--log.run_name", "run"], fault.file_size_limit,
                    fault.ignored)
    fault.act(proc, run)
    code, err = proc.finish()
    assert "Traceback" not in err, err
    assert code in fault.codes, err
    last = err.strip().splitlines()[-1] if err.strip() else ""
    assert re.search(fault.says, last), err
    fault.after(run)


@pytest.mark.slow
def test_a_console_that_goes_away_ends_the_report_not_the_run(tmp_path: Path) -> None:
    """stderr piped into a reader that closes (`syncfree train ... 2>&1 | head`, a dead `tee`): the progress lines
    stop and the run trains on to its end and saves it."""
    run = tmp_path / "run"
    argv = [*SMALL, "--iterations", "3", "--log.progress", "true", "--log.progress_every", "1",
            "--log.dir", str(tmp_path), "--log.run_name", "run"]
    proc = subprocess.Popen([sys.executable, "-m", "syncfree", "train", *argv], stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.stderr is not None
    proc.stderr.close()
    assert proc.wait(timeout=120) == 0
    assert logged_iterations(run) == 3
    assert checkpoint.load(run / "latest.pt")["iteration"] == 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_hung_peer_ends_rank_0_with_one_line_and_exit_1(tmp_path: Path) -> None:
    """Rank 1 stops (SIGSTOP) mid-training: rank 0 names the collective and the timeout in one line and exits 1,
    without an abort on the way out."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    argv = [sys.executable, "-m", "syncfree", "train", *SMALL, "--iterations", "100000", "--save_every", "1",
            "--distributed.timeout", "5",
            "--log.dir", str(tmp_path), "--log.run_name", "run"]
    ranks = [subprocess.Popen(argv, stderr=subprocess.PIPE, text=True,
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    try:
        wait_for(lambda: logged_iterations(tmp_path / "run") >= 2)
        ranks[1].send_signal(signal.SIGSTOP)
        _, err = ranks[0].communicate(timeout=60)
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()
    lines = [line for line in err.splitlines() if line.startswith("syncfree")]
    assert ranks[0].returncode == 1, err
    assert "Traceback" not in err and len(lines) == 1, err
    assert re.fullmatch(r"syncfree: error: rank 0/2: .* failed: a peer process exited or did not answer within the "
                        r"collective timeout \(5 s\) .*", lines[0]), err
    assert checkpoint.load(tmp_path / "run" / "latest.pt")["iteration"] >= 2
