"""Motion clips: both .npz layouts, save / load round trips, bad files, the motion library, generated clips."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from syncfree.envs.math import axis_angle_from_quat, quat_conjugate, quat_mul
from syncfree.envs.motion import (
    MotionClip,
    MotionLibrary,
    generate_clips,
    holosoma_clip_dir,
    load_clip,
    load_motions,
    save_clip,
)
from syncfree.envs.robots import Kinematics, load_robot
from syncfree.errors import UserError

TRACKED = (
    "pelvis", "left_hip_roll_link", "left_knee_link", "left_ankle_roll_link", "right_hip_roll_link",
    "right_knee_link", "right_ankle_roll_link", "torso_link", "left_shoulder_roll_link", "left_elbow_link",
    "left_wrist_yaw_link", "right_shoulder_roll_link", "right_elbow_link", "right_wrist_yaw_link",
)
"""The bodies whole-body tracking usually tracks on the G1."""


@pytest.fixture(scope="module")
def robot():
    return load_robot()


@pytest.fixture(scope="module")
def clips(robot):
    return generate_clips(robot, num_clips=4, seconds=3.0, fps=50.0, seed=0)


def _fd_ang_vel_world(quat: np.ndarray, fps: float) -> np.ndarray:
    """Central-difference world angular velocity at the interior frames 1 .. T-2."""
    q = torch.as_tensor(quat, dtype=torch.float64)
    return (axis_angle_from_quat(quat_mul(q[2:], quat_conjugate(q[:-2]))) * fps / 2).numpy()


def _cut(clip: MotionClip, frames: int, name: str) -> MotionClip:
    """The first `frames` frames of a clip, renamed."""
    changes = {f.name: getattr(clip, f.name)[:frames] for f in dataclasses.fields(clip)
               if isinstance(getattr(clip, f.name), np.ndarray)}
    return dataclasses.replace(clip, name=name, **changes)


# ---------------------------------------------------------------------------------------------------------------
# named (holosoma) layout, real clips


@pytest.mark.skipif(holosoma_clip_dir() is None, reason="holosoma is not installed")
@pytest.mark.parametrize("stem", ["sub3_largebox_003_mj", "sub3_largebox_003_mj_w_obj"])
def test_holosoma_clip(robot, stem):
    path = holosoma_clip_dir() / f"{stem}.npz"
    with np.load(path) as f:
        raw = {k: f[k] for k in f.files}
    clip = load_clip(path, robot)
    T = raw["joint_pos"].shape[0]
    assert clip.name == stem and clip.fps == 50.0 and clip.num_frames == T
    assert clip.joint_pos.shape == (T, 29) and clip.joint_vel.shape == (T, 29)
    assert clip.joint_pos.dtype == np.float32
    # joints mapped by name to the model's order
    file_names = [str(n) for n in raw["joint_names"]]
    columns = [7 + file_names.index(n) for n in robot.joint_names]
    np.testing.assert_allclose(clip.joint_pos, raw["joint_pos"][:, columns], atol=1e-6)
    np.testing.assert_allclose(clip.root_pos, raw["joint_pos"][:, :3], atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(clip.root_quat, axis=-1), 1.0, atol=1e-5)
    assert clip.body_names == tuple(str(n) for n in raw["body_names"])  # the file's bodies, object included
    assert clip.body_pos_w.shape == raw["body_pos_w"].shape

    # forward kinematics of the joints reproduces the file's tracked bodies; the file's G1 revision puts the
    # waist roll / pitch pivots 9 mm lower / 10 mm higher than the shipped model, hence the torso's 1.2 cm
    kin = Kinematics(robot, "cpu", dtype=torch.float64)
    pos, _ = kin.forward(*(torch.as_tensor(x, dtype=torch.float64) for x in (clip.root_pos, clip.root_quat,
                                                                           clip.joint_pos)))
    model_rows = robot.body_index(TRACKED)
    file_rows = [clip.body_names.index(n) for n in TRACKED]
    error = np.linalg.norm(pos.numpy()[:, model_rows] - clip.body_pos_w[:, file_rows], axis=-1).max(axis=0)
    tolerance = np.array([0.012 if n == "torso_link" else 0.01 for n in TRACKED])
    assert (error < tolerance).all(), dict(zip(TRACKED, error.round(4), strict=True))
    legs = [i for i, n in enumerate(TRACKED) if "hip" in n or "knee" in n or "ankle" in n or n == "pelvis"]
    assert error[legs].max() < 1e-4  # identical kinematics below the waist

    # the stored root angular velocity, read in the right frame, matches finite differences of root_quat
    interior = clip.root_ang_vel[1:-1]
    reference = _fd_ang_vel_world(clip.root_quat, clip.fps)
    assert np.abs(interior - reference).max() < 0.1
    assert np.abs(interior - reference).mean() < 0.01


# ---------------------------------------------------------------------------------------------------------------
# unnamed (Isaac Lab) layout


def _write_unnamed(path: Path, clip: MotionClip, order: tuple[str, ...], robot) -> None:
    cols = [robot.joint_names.index(n) for n in order]
    # body 0 the root, then the other bodies in some unrelated order: only body 0 is read
    rows = [0, *range(len(clip.body_names) - 1, 0, -1)]
    np.savez(path, fps=np.array([clip.fps]), joint_pos=clip.joint_pos[:, cols], joint_vel=clip.joint_vel[:, cols],
             body_pos_w=clip.body_pos_w[:, rows], body_quat_w=clip.body_quat_w[:, rows],
             body_lin_vel_w=clip.body_lin_vel_w[:, rows], body_ang_vel_w=clip.body_ang_vel_w[:, rows])


def test_unnamed_layout(robot, clips, tmp_path):
    original = clips[0]
    assert original.body_names[0] == robot.body_names[0] == "pelvis"
    path = tmp_path / "walk.npz"
    _write_unnamed(path, original, robot.breadth_first_joint_order(), robot)
    clip = load_clip(path, robot)
    np.testing.assert_array_equal(clip.joint_pos, original.joint_pos)
    np.testing.assert_array_equal(clip.joint_vel, original.joint_vel)
    np.testing.assert_array_equal(clip.root_pos, original.root_pos)
    np.testing.assert_array_equal(clip.root_ang_vel, original.root_ang_vel)
    assert clip.body_names == robot.body_names
    np.testing.assert_allclose(clip.body_pos_w, original.body_pos_w, atol=1e-4)
    np.testing.assert_allclose(np.abs((clip.body_quat_w * original.body_quat_w).sum(-1)), 1.0, atol=1e-5)
    np.testing.assert_allclose(clip.body_lin_vel_w, original.body_lin_vel_w, atol=1e-3)
    np.testing.assert_allclose(clip.body_ang_vel_w, original.body_ang_vel_w, atol=1e-3)

    # another joint order, given explicitly
    path = tmp_path / "walk_mjcf_order.npz"
    _write_unnamed(path, original, robot.joint_names, robot)
    np.testing.assert_array_equal(load_clip(path, robot, joint_order=robot.joint_names).joint_pos,
                                  original.joint_pos)


# ---------------------------------------------------------------------------------------------------------------
# save / load


def test_save_load_round_trip(robot, clips, tmp_path):
    for original in clips[:2]:
        path = tmp_path / f"{original.name}.npz"
        save_clip(path, original)
        clip = load_clip(path, robot)
        assert clip.name == original.name and clip.fps == original.fps
        assert clip.body_names == original.body_names and clip.joint_names == robot.joint_names
        for f in dataclasses.fields(MotionClip):
            value = getattr(original, f.name)
            if isinstance(value, np.ndarray):
                np.testing.assert_allclose(getattr(clip, f.name), value, atol=1e-5, err_msg=f.name)
    # MuJoCo's convention in the file: the root angular velocity in the root's frame
    with np.load(tmp_path / f"{clips[0].name}.npz") as f:
        raw = {k: f[k] for k in f.files}
    q = torch.as_tensor(clips[0].root_quat, dtype=torch.float64)
    w = torch.as_tensor(clips[0].root_ang_vel, dtype=torch.float64)
    local = quat_mul(quat_mul(quat_conjugate(q), torch.nn.functional.pad(w, (1, 0))), q)[:, 1:]
    np.testing.assert_allclose(raw["joint_vel"][:, 3:6], local.numpy(), atol=1e-5)
    assert raw["joint_pos"].shape == (clips[0].num_frames, 36)


@pytest.mark.skipif(holosoma_clip_dir() is None, reason="holosoma is not installed")
def test_round_trip_of_a_real_clip(robot, tmp_path):
    original = load_clip(holosoma_clip_dir() / "sub3_largebox_003_mj.npz", robot)
    save_clip(tmp_path / "copy.npz", original)
    clip = load_clip(tmp_path / "copy.npz", robot)
    np.testing.assert_allclose(clip.root_ang_vel, original.root_ang_vel, atol=1e-5)
    np.testing.assert_allclose(clip.body_pos_w, original.body_pos_w, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# bad files


def _good_named(tmp_path: Path, clip: MotionClip) -> dict[str, np.ndarray]:
    save_clip(tmp_path / "good.npz", clip)
    with np.load(tmp_path / "good.npz") as f:
        return {k: f[k] for k in f.files}


def _expect(path: Path, robot, *words: str) -> str:
    with pytest.raises(UserError) as caught:
        load_clip(path, robot)
    message = str(caught.value)
    assert "\n" not in message
    assert path.name in message
    for word in words:
        assert word in message, message
    return message


def test_bad_files(robot, clips, tmp_path):
    good = _good_named(tmp_path, _cut(clips[1], 20, "squat"))

    def write(name: str, **changes) -> Path:
        data = {**good, **changes}
        data = {k: v for k, v in data.items() if v is not None}
        np.savez(tmp_path / name, **data)
        return tmp_path / name

    _expect(write("no_fps.npz", fps=None), robot, "'fps'", "missing")
    message = _expect(write("joints28.npz", joint_pos=good["joint_pos"][:, :-1], joint_vel=good["joint_vel"][:, :-1],
                            joint_names=good["joint_names"][:-1]), robot, "joint_names", "29", "28")
    assert "right_wrist_yaw_joint" in message
    _expect(write("columns.npz", joint_pos=good["joint_pos"][:, :-1]), robot, "joint_pos", "36", "35")
    names = good["joint_names"].copy()
    names[4] = "tail_joint"
    _expect(write("unknown.npz", joint_names=names), robot, "joint_names", "tail_joint")
    bad = good["joint_pos"].copy()
    bad[7, 12] = np.nan
    _expect(write("nan.npz", joint_pos=bad), robot, "joint_pos", "frame 7")
    bad = good["body_quat_w"].copy()
    bad[11, 3, 0] = np.inf
    _expect(write("inf.npz", body_quat_w=bad), robot, "body_quat_w", "frame 11")
    _expect(write("short.npz", body_pos_w=good["body_pos_w"][:-1]), robot, "body_pos_w", "length mismatch", "19", "20")
    _expect(write("one_frame.npz", **{k: good[k][:1] for k in good if k.startswith(("joint_pos", "joint_vel", "body_")) and
                                      k != "body_names"}), robot, "at least 2")
    _expect(write("zero_fps.npz", fps=np.array([0.0])), robot, "fps", "positive")
    _expect(write("no_body_names.npz", body_names=None), robot, "'body_names'", "missing")
    _expect(write("no_joint_names.npz", joint_names=None), robot, "'joint_names'", "missing")
    # unnamed layout: joint count and missing keys
    unnamed = {k: v for k, v in good.items() if k not in ("joint_names", "body_names")}
    unnamed["joint_pos"], unnamed["joint_vel"] = good["joint_pos"][:, 7:35], good["joint_vel"][:, 6:34]
    np.savez(tmp_path / "unnamed28.npz", **unnamed)
    _expect(tmp_path / "unnamed28.npz", robot, "joint_pos", "29", "28")
    del unnamed["body_ang_vel_w"]
    np.savez(tmp_path / "unnamed_missing.npz", **unnamed)
    _expect(tmp_path / "unnamed_missing.npz", robot, "'body_ang_vel_w'", "missing")
    # not a file / not an npz
    _expect(tmp_path / "absent.npz", robot, "not found")
    (tmp_path / "text.npz").write_text("hello")
    _expect(tmp_path / "text.npz", robot, "npz")
    np.save(tmp_path / "array.npy", np.zeros(3))
    _expect(tmp_path / "array.npy", robot, "npz")


# ---------------------------------------------------------------------------------------------------------------
# motion library


def test_library_concatenation_and_indices(robot, clips):
    parts = [_cut(clips[0], 30, "a"), _cut(clips[1], 45, "b"), _cut(clips[2], 10, "c")]
    bodies = ["torso_link", "pelvis", "left_ankle_roll_link"]
    lib = MotionLibrary(parts, robot, bodies, "cpu", control_dt=0.02)
    assert lib.num_clips == 3 and lib.clip_names == ["a", "b", "c"] and lib.num_frames_total == 85
    assert lib.clip_start.tolist() == [0, 30, 75] and lib.clip_length.tolist() == [30, 45, 10]
    assert lib.clip_start.dtype == lib.clip_length.dtype == torch.int64
    assert lib.joint_pos.shape == (85, 29) and lib.body_pos_w.shape == (85, 3, 3)
    assert lib.body_quat_w.shape == (85, 3, 4) and lib.root_quat.shape == (85, 4)
    assert lib.joint_pos.dtype == torch.float32
    rows = robot.body_index(bodies).tolist()
    np.testing.assert_array_equal(lib.body_pos_w[30:75].numpy(), parts[1].body_pos_w[:, rows])
    np.testing.assert_array_equal(lib.root_ang_vel[75:].numpy(), parts[2].root_ang_vel)
    np.testing.assert_array_equal(lib.body_pos_w[:, 1].numpy(), lib.root_pos.numpy())

    clip_ids = torch.tensor([0, 0, 1, 1, 2, 2])
    frame = torch.tensor([-3, 12, 0, 44, 9, 500])
    assert lib.frame_index(clip_ids, frame).tolist() == [0, 12, 30, 74, 84, 84]
    future = lib.future_frame_index(clip_ids, frame, torch.tensor([0, 1, 5]))
    assert future.shape == (6, 3) and future.dtype == torch.int64
    assert future.tolist() == [[0, 0, 2], [12, 13, 17], [30, 31, 35], [74, 74, 74], [84, 84, 84], [84, 84, 84]]

    with pytest.raises(UserError, match=r"motion clip b: .*'head_link'"):
        MotionLibrary(parts[1:], robot, ["pelvis", "head_link"], "cpu")


def test_library_resamples(robot):
    fast = generate_clips(robot, num_clips=1, seconds=2.0, fps=100.0, seed=1)[0]
    assert fast.num_frames == 201
    lib = MotionLibrary([fast], robot, ["pelvis", "left_wrist_yaw_link"], "cpu", control_dt=0.02)
    assert abs(lib.num_frames_total - fast.num_frames / 2) <= 1
    assert lib.num_frames_total == 101
    np.testing.assert_array_equal(lib.joint_pos.numpy(), fast.joint_pos[::2])
    np.testing.assert_array_equal(lib.root_quat.numpy(), fast.root_quat[::2])
    wrist = robot.body_names.index("left_wrist_yaw_link")
    np.testing.assert_array_equal(lib.body_lin_vel_w[:, 1].numpy(), fast.body_lin_vel_w[::2, wrist])
    # 30 Hz: values between source frames are interpolated
    lib = MotionLibrary([fast], robot, ["pelvis"], "cpu", control_dt=1 / 30)
    assert lib.num_frames_total == 61
    t = np.arange(61) / 30
    for j in (0, 3, 15):
        np.testing.assert_allclose(lib.joint_pos[:, j].numpy(), np.interp(t, np.arange(201) / 100, fast.joint_pos[:, j]),
                                   atol=1e-6)
    np.testing.assert_allclose(lib.root_quat.norm(dim=-1).numpy(), 1.0, atol=1e-6)
    slow = lib.root_quat[1:].double()
    step = axis_angle_from_quat(quat_mul(slow, quat_conjugate(lib.root_quat[:-1].double()))).norm(dim=-1)
    assert step.max() < 0.1  # no sign flips or jumps


def test_load_motions(robot, clips, tmp_path):
    lib = load_motions(None, robot, ["pelvis", "torso_link"], "cpu", seed=3)
    assert lib.num_clips == 4 and lib.clip_names == ["gen_walk_0", "gen_squat_1", "gen_reach_2", "gen_twist_3"]
    save_clip(tmp_path / "b.npz", _cut(clips[1], 12, "b"))
    save_clip(tmp_path / "a.npz", _cut(clips[0], 20, "a"))
    lib = load_motions([tmp_path], robot, ["pelvis"], "cpu")
    assert lib.clip_names == ["a", "b"] and lib.clip_length.tolist() == [20, 12]
    lib = load_motions([tmp_path / "b.npz", str(tmp_path / "a.npz")], robot, ["pelvis"], "cpu")
    assert lib.clip_names == ["b", "a"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="empty"):
        load_motions([tmp_path / "empty"], robot, ["pelvis"], "cpu")


# ---------------------------------------------------------------------------------------------------------------
# generated clips


def test_generated_clips(robot, clips):
    assert [c.name for c in clips] == ["gen_walk_0", "gen_squat_1", "gen_reach_2", "gen_twist_3"]
    again = generate_clips(robot, num_clips=4, seconds=3.0, fps=50.0, seed=0)
    other = generate_clips(robot, num_clips=1, seconds=3.0, fps=50.0, seed=1)[0]
    assert not np.array_equal(other.joint_pos, clips[0].joint_pos)
    lower, upper = robot.joint_lower.numpy(), robot.joint_upper.numpy()
    for clip, twin in zip(clips, again, strict=True):
        for f in dataclasses.fields(MotionClip):
            value = getattr(clip, f.name)
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(value, getattr(twin, f.name), err_msg=f.name)  # deterministic
                assert np.isfinite(value).all() and value.dtype == np.float32, f.name
        assert clip.num_frames == 151 and clip.fps == 50.0 and clip.body_names == robot.body_names
        assert ((clip.joint_pos >= lower) & (clip.joint_pos <= upper)).all()
        assert np.abs(np.diff(clip.joint_pos, axis=0)).max() < 0.08  # smooth: < 4 rad/s
        assert np.abs(clip.joint_pos.std(axis=0)).max() > 0.05  # it moves
        np.testing.assert_allclose(np.linalg.norm(clip.root_quat, axis=-1), 1.0, atol=1e-5)
        tilt = 2 * np.arcsin(np.linalg.norm(clip.root_quat[:, 1:3], axis=-1))  # |pitch / roll| bound
        assert tilt.max() < 0.15
        # velocities agree with finite differences of the positions
        dt = 1 / clip.fps
        np.testing.assert_allclose(clip.joint_vel[1:-1], (clip.joint_pos[2:] - clip.joint_pos[:-2]) / (2 * dt),
                                   atol=0.02)
        np.testing.assert_allclose(clip.root_ang_vel[1:-1], _fd_ang_vel_world(clip.root_quat, clip.fps), atol=0.01)
        fd = (clip.body_pos_w[2:] - clip.body_pos_w[:-2]) / (2 * dt)
        np.testing.assert_allclose(clip.body_lin_vel_w[1:-1], fd, atol=0.02)
        # standing on the ground: the lower foot near z = 0, the root near standing height
        feet = robot.body_index(["left_foot_contact_point", "right_foot_contact_point"]).tolist()
        lowest = clip.body_pos_w[:, feet, 2].min(axis=1)
        assert np.abs(lowest).max() < 0.02
        assert clip.root_pos[:, 2].min() > 0.5 and clip.root_pos[:, 2].max() < robot.root_height
    walk = clips[0]
    assert np.linalg.norm(walk.root_pos[-1, :2] - walk.root_pos[0, :2]) > 1.0  # it walks
    left, right = robot.joint_index(["left_hip_pitch_joint", "right_hip_pitch_joint"]).tolist()
    assert np.corrcoef(walk.joint_pos[:, left], walk.joint_pos[:, right])[0, 1] < -0.5  # alternating legs
