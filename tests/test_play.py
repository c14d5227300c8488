"""`syncfree play`: a checkpoint's policy drawn into a video, read back frame by frame."""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from syncfree.cli import main

imageio = pytest.importorskip("imageio.v2")

TINY = ["--iterations", "1", "--env.num_envs", "2", "--ppo.steps_per_env", "4", "--ppo.num_minibatches", "1",
        "--perf.compile", "off", "--log.progress", "false"]


def checkpoint(task: str, folder: Path) -> Path:
    assert main(["train", "--task", task, *TINY, "--log.dir", str(folder), "--log.run_name", task]) == 0
    return folder / task / "latest.pt"


def read_mp4(path: Path) -> list[np.ndarray]:
    with imageio.get_reader(path) as reader:
        return [np.asarray(frame) for frame in reader]


def assert_drawn(frames: list[np.ndarray], count: int, width: int, height: int) -> None:
    """`count` frames of the size asked for, each with something drawn on it, and the picture moves."""
    assert len(frames) == count
    assert all(frame.shape == (height, width, 3) for frame in frames)
    assert all(frame.std() > 5 for frame in frames)  # not one flat colour
    # the picture moves: identical frames decode to a difference of 0; a CartPole policy that already balances
    # moves its pole and cart by a few hundred pixels in 15 steps (a mean difference of about 0.45 here)
    assert any(np.abs(frame.astype(int) - frames[0]).mean() > 0.2 for frame in frames[1:])


@pytest.mark.parametrize("task", ["pendulum", "cartpole", "point-mass", "point-mass-goal", "point-mass-maze"])
def test_a_classic_task_plays_into_an_mp4_and_a_gif(task: str, tmp_path: Path, capsys) -> None:
    ckpt = checkpoint(task, tmp_path)
    video = tmp_path / "out.mp4"
    assert main(["play", str(ckpt), "--steps", "15", "--width", "160", "--height", "120", "--video", str(video)]) == 0
    assert f"wrote {video} (16 frames, 160x120" in capsys.readouterr().out
    assert_drawn(read_mp4(video), 16, 160, 120)
    gif = tmp_path / "out.gif"
    assert main(["play", str(ckpt), "--steps", "15", "--width", "160", "--height", "120", "--video", str(gif)]) == 0
    with Image.open(gif) as image:  # GIF merges identical consecutive frames
        assert image.size == (160, 120) and 2 <= image.n_frames <= 16
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["out.gif", "out.mp4"]  # no temporary left


def test_a_recurrent_policy_plays_carrying_its_state_and_restarts_it_with_each_episode(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    from syncfree.policy.recurrent_mlp import RecurrentMLPPolicy

    assert main(["train", "--task", "pendulum", "--policy.kind", "recurrent", "--policy.rnn.hidden", "8",
                 "--env.max_episode_length", "6", *TINY, "--log.dir", str(tmp_path), "--log.run_name", "rnn"]) == 0
    given: list[tuple[torch.Tensor, ...]] = []
    act = RecurrentMLPPolicy.act_carrying

    def recorded(self, actor_obs, state):
        given.append(state)
        return act(self, actor_obs, state)

    monkeypatch.setattr(RecurrentMLPPolicy, "act_carrying", recorded)
    video = tmp_path / "rnn.mp4"
    assert main(["play", str(tmp_path / "rnn" / "latest.pt"), "--steps", "15", "--width", "160", "--height", "120",
                 "--video", str(video)]) == 0
    assert_drawn(read_mp4(video), 16, 160, 120)
    assert len(given) == 15 and all(len(state) == 2 for state in given)  # the LSTM's (h, c)
    zero = [all(not s.any() for s in state) for state in given]
    assert zero == [True, *[False] * 5, True, *[False] * 5, True, False, False]  # episodes of 6 steps


def test_g1_track_renders_the_robot_beside_its_reference_headless(tmp_path: Path) -> None:
    """MuJoCo's offscreen renderer without a display (EGL): the policy's robot in opaque orange and the reference
    in translucent blue are both in the picture."""
    ckpt = checkpoint("g1-track", tmp_path)
    video = tmp_path / "g1.mp4"
    assert main(["play", str(ckpt), "--steps", "8", "--width", "320", "--height", "240", "--video", str(video)]) == 0
    frames = read_mp4(video)
    assert_drawn(frames, 9, 320, 240)
    rgb = frames[-1].astype(int)
    red, blue = rgb[..., 0], rgb[..., 2]
    orange = (red > 150) & (red - blue > 80)
    light_blue = (blue > 120) & (blue - red > 40)
    assert orange.sum() > 500 and light_blue.sum() > 200, (orange.sum(), light_blue.sum())
    # the reference stands beside the robot: their pixels' columns differ
    assert abs(np.nonzero(orange)[1].mean() - np.nonzero(light_blue)[1].mean()) > 20


def test_a_gymnasium_mujoco_env_draws_itself(tmp_path: Path) -> None:
    pytest.importorskip("gymnasium")
    ckpt = checkpoint("gym:Hopper-v5", tmp_path)
    video = tmp_path / "hopper.gif"
    assert main(["play", str(ckpt), "--steps", "6", "--video", str(video)]) == 0
    with Image.open(video) as image:
        assert image.size == (480, 480) and image.n_frames >= 2  # the env's own frame size
        image.seek(image.n_frames - 1)
        assert np.asarray(image.convert("RGB")).std() > 5


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--video", "out.avi"], {}, "unknown format '.avi'"),
    (["--steps", "0"], {}, "--steps=0 is invalid"),
    (["--video", "g1.mp4"], {"MUJOCO_GL": "bogus"}, "MUJOCO_GL='bogus'"),
    (["--video", "g1.mp4"], {"MUJOCO_GL": "glfw", "DISPLAY": "", "WAYLAND_DISPLAY": ""},
     "MUJOCO_GL='glfw' renders only with a display, and DISPLAY is not set; set MUJOCO_GL to egl"),
    (["--steps", "100000000", "--video", "long.gif"], {}, "play: --steps 100000000 at 640x480 keeps 85830.7 GiB of "
     "frames until the GIF is written, more than the "),
])
def test_bad_play_input_is_one_line(args: list[str], env: dict, message: str, tmp_path: Path, capsys,
                                    monkeypatch) -> None:
    ckpt = checkpoint("g1-track", tmp_path)
    capsys.readouterr()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    steps = [] if "--steps" in args else ["--steps", "2"]
    assert main(["play", str(ckpt), *steps, *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_a_gymnasium_env_without_a_renderer_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    from conftest import user_gym_task

    task = user_gym_task(tmp_path, monkeypatch)
    assert main(["train", "--task", task, *TINY, "--log.dir", str(tmp_path), "--log.run_name", "point"]) == 0
    capsys.readouterr()
    assert main(["play", str(tmp_path / "point" / "latest.pt"), "--task", task, "--steps", "2", "--video",
                 str(tmp_path / "point.gif")]) == 2
    err = capsys.readouterr().err
    assert err.endswith("play: the Gymnasium env cannot be drawn (Point does not implement render)\n"), err
    assert not (tmp_path / "point.gif").exists()


@pytest.mark.parametrize(("value", "says"), [
    ("bogus", "MUJOCO_GL='bogus' is not an OpenGL backend MuJoCo can render with (RuntimeError: invalid value "),
    ("osmesa", "MUJOCO_GL='osmesa': MuJoCo cannot load its osmesa OpenGL library ("),
])
def test_a_mujoco_gl_that_mujoco_cannot_load_is_one_line(value: str, says: str, tmp_path: Path) -> None:
    """MuJoCo loads the backend `MUJOCO_GL` names as it is imported (a traceback from inside PyOpenGL, before any
    task is drawn), so a fresh process: one line with the value, the values to use and the packages they need."""
    if value == "osmesa" and ctypes.util.find_library("OSMesa"):
        pytest.skip("OSMesa is installed here")
    ckpt = checkpoint("pendulum", tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYOPENGL_PLATFORM"}  # set by MuJoCo's EGL import here
    done = subprocess.run([sys.executable, "-m", "syncfree", "play", str(ckpt), "--steps", "2"], capture_output=True,
                          text=True, timeout=300, env={**env, "MUJOCO_GL": value, "OMP_NUM_THREADS": "1"})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"syncfree: error: {says}"), lines[0]
    assert "set MUJOCO_GL to egl (headless, on a GPU or through Mesa; Debian: apt-get install libegl1" in lines[0]
    assert not (ckpt.parent / "play.mp4").exists()


def test_a_missing_renderer_package_is_one_line(tmp_path: Path, capsys) -> None:
    """Gymnasium's classic-control envs draw with pygame, which no syncfree extra installs: play says so in one
    line (it was a 56-line traceback)."""
    pytest.importorskip("gymnasium")
    if importlib.util.find_spec("pygame") is not None:
        pytest.skip("pygame is installed")
    assert main(["train", "--task", "gym:CartPole-v1", "--iterations", "1", "--env.num_envs", "2",
                 "--ppo.steps_per_env", "8", "--ppo.num_minibatches", "2", "--perf.compile", "off",
                 "--log.progress", "false", "--log.dir", str(tmp_path), "--log.run_name", "run"]) == 0
    capsys.readouterr()
    assert main(["play", str(tmp_path / "run" / "latest.pt"), "--steps", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "play: gym:CartPole-v1: pygame is not installed" in err, err
    assert not (tmp_path / "run" / "play.mp4").exists()


def test_an_mp4_is_written_frame_by_frame(tmp_path: Path, monkeypatch) -> None:
    """Each frame is drawn when the MP4 writer asks for it: at most one frame is drawn and not yet written at any
    time, however long the video (a GIF, whose palette comes from frames across the video, keeps them all)."""
    from syncfree import play

    ckpt = checkpoint("pendulum", tmp_path)
    counts = {"drawn": 0, "written": 0, "most_pending": 0}
    frames_of = play.play

    def counted(*args, **kwargs):
        for frame in frames_of(*args, **kwargs):
            counts["drawn"] += 1
            yield frame

    class Writer:
        def __init__(self, path: Path, **options) -> None:
            self.path = Path(path)

        def __enter__(self) -> Writer:
            return self

        def __exit__(self, *exc) -> None:
            self.path.write_bytes(b"")

        def append_data(self, frame: np.ndarray) -> None:
            counts["most_pending"] = max(counts["most_pending"], counts["drawn"] - counts["written"])
            counts["written"] += 1

    monkeypatch.setattr(play, "play", counted)
    monkeypatch.setattr(play, "mp4_writer_module", lambda: type("imageio", (), {"get_writer": Writer}))
    assert main(["play", str(ckpt), "--steps", "30", "--video", str(tmp_path / "p.mp4")]) == 0
    assert counts == {"drawn": 31, "written": 31, "most_pending": 1}
