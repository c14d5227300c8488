"""Reference motion clips: one in-memory type, reading and writing `.npz` files, resampling.

Two `.npz` layouts are in use for G1 whole-body tracking, and `load_clip` reads both:

- named (holosoma): MuJoCo `qpos` / `qvel` rows with the joints named in `joint_names`, and body arrays named in
  `body_names`;
- unnamed (Isaac Lab based pipelines, e.g. BeyondMimic's csv_to_npz): joint arrays in a training framework's joint
  order without names, and body arrays whose body 0 is the root.

Everything a clip holds is float32 numpy, world frame, wxyz quaternions, joints in the robot model's order.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from syncfree.envs.math import (
    axis_angle_from_quat,
    quat_apply,
    quat_apply_inverse,
    quat_conjugate,
    quat_mul,
    quat_normalize,
    quat_slerp,
)
from syncfree.envs.robots import Kinematics, RobotModel
from syncfree.errors import UserError

_BODY_KEYS = ("body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")
_NAMED_KEYS = ("fps", "joint_names", "joint_pos", "joint_vel", "body_names", *_BODY_KEYS)
_UNNAMED_KEYS = ("fps", "joint_pos", "joint_vel", *_BODY_KEYS)


@dataclass
class MotionClip:
    """One reference motion sampled at `fps`; frame t is at time t / fps.

    Joint arrays follow the robot model's joint order (`joint_names`); the root is the model's root body
    (G1: pelvis); velocities are world-frame, linear ones of body frame origins. The body arrays keep the bodies
    of their source (`body_names`), which need not match the model's bodies.
    """

    name: str
    fps: float
    joint_pos: np.ndarray
    """(T, J) radians."""
    joint_vel: np.ndarray
    """(T, J) rad/s."""
    root_pos: np.ndarray
    """(T, 3) metres, world frame."""
    root_quat: np.ndarray
    """(T, 4) wxyz, root body orientation in the world frame."""
    root_lin_vel: np.ndarray
    """(T, 3) world frame."""
    root_ang_vel: np.ndarray
    """(T, 3) world frame."""
    body_names: tuple[str, ...]
    body_pos_w: np.ndarray
    """(T, B, 3)."""
    body_quat_w: np.ndarray
    """(T, B, 4) wxyz."""
    body_lin_vel_w: np.ndarray
    """(T, B, 3)."""
    body_ang_vel_w: np.ndarray
    """(T, B, 3)."""
    joint_names: tuple[str, ...] = field(default=())
    """Names of the joint columns (the robot model's joint order); `save_clip` writes them. Empty if unknown."""

    @property
    def num_frames(self) -> int:
        return int(self.joint_pos.shape[0])

    @property
    def duration(self) -> float:
        """Seconds from the first to the last frame."""
        return (self.num_frames - 1) / self.fps


# ---------------------------------------------------------------------------------------------------------------
# reading


def load_clip(path: str | Path, robot: RobotModel, joint_order: Sequence[str] | None = None, *,
              recompute_bodies: bool = False) -> MotionClip:
    """Read a motion `.npz` in the named (holosoma) or unnamed (Isaac Lab based) layout; see the module docstring.

    Named layout (recognized by its `joint_names` key): `joint_pos` (T, 7+J) is MuJoCo `qpos` (root xyz, root
    quaternion wxyz, then the joints named by `joint_names`, in any order: they are mapped by name to the model's
    order), `joint_vel` (T, 6+J) is `qvel` (root linear velocity in the world frame, root angular velocity, then
    the joints), `body_*_w` (T, B', .) are named by `body_names`, `fps` is a scalar or a (1,) array; other keys
    (e.g. `object_*`) are ignored. MuJoCo's own convention puts the root angular velocity in the root's local
    frame, but holosoma's published clips store it in the world frame; the frame is decided per file by comparing
    both readings with finite differences of the root quaternion (a tie, e.g. a rotation about a fixed axis where
    both readings agree, reads it as local). The body arrays are kept as the file has them, with its body names.
    In holosoma's published G1 clips those body velocities are MuJoCo centre-of-mass velocities computed with the
    world-frame root angular velocity taken as local, so they disagree with the body poses (by up to several
    m/s and rad/s); `recompute_bodies=True` replaces them.

    Unnamed layout: `joint_pos`, `joint_vel` (T, J) in `joint_order` (default: the model's breadth-first order,
    Isaac Lab's), `body_pos_w`, `body_quat_w` (wxyz), `body_lin_vel_w`, `body_ang_vel_w` (T, B, .) whose body 0 is
    the root: the root pose and velocities are taken from body 0 (its linear velocity is read as the root
    origin's; where a pipeline stored Isaac Lab's centre-of-mass velocity instead, the two differ by ω × the
    root's centre-of-mass offset). The other bodies carry no names, so all the model's bodies are recomputed with
    `Kinematics` from the root and the joints, and named after the model.

    `recompute_bodies=True` recomputes the model's bodies from the root and joints for the named layout too,
    replacing the file's body arrays (useful when they come from another model revision, or hold velocities
    that disagree with the poses).

    Every problem is a one-line `UserError` naming the file and the field.
    """
    path = Path(path)
    data = _read_npz(path)
    where = f"motion file {path}"
    fps = _fps(where, data)
    if "joint_names" in data:
        clip = _load_named(where, path, data, fps, robot)
        if recompute_bodies:
            clip = with_model_bodies(clip, robot)
        return clip
    return _load_unnamed(where, path, data, fps, robot, joint_order)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise UserError(f"motion file {path}: not found")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise UserError(f"motion file {path}: not a readable .npz file ({type(error).__name__})") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise UserError(f"motion file {path}: not an .npz archive (a single .npy array)")
    data = {}
    with loaded:
        for key in loaded.files:
            try:
                data[key] = loaded[key]
            except ValueError:
                raise UserError(f"motion file {path}: {key}: stored as Python objects; store a plain numeric "
                                f"or string array") from None
            except (OSError, EOFError, zipfile.BadZipFile) as error:
                raise UserError(f"motion file {path}: {key}: unreadable ({type(error).__name__})") from None
    return data


def _require(where: str, data: dict[str, np.ndarray], keys: Sequence[str], layout: str) -> None:
    missing = [key for key in keys if key not in data]
    if missing:
        raise UserError(f"{where}: missing key {missing[0]!r} ({layout} layout needs: {', '.join(keys)})")


def _fps(where: str, data: dict[str, np.ndarray]) -> float:
    if "fps" not in data:
        raise UserError(f"{where}: missing key 'fps' (frames per second, a scalar or a (1,) array)")
    raw = np.asarray(data["fps"])
    if raw.size != 1 or raw.dtype.kind not in "iuf":
        raise UserError(f"{where}: fps: expected one number, got an array of shape {raw.shape} ({raw.dtype})")
    fps = float(raw.reshape(()))
    if not math.isfinite(fps) or fps <= 0:
        raise UserError(f"{where}: fps: expected a positive number, got {fps}")
    return fps


def _float_array(where: str, data: dict[str, np.ndarray], key: str, shape: tuple[int | None, ...],
                 meaning: str) -> np.ndarray:
    """Check the dimensions (None: any), dtype and finiteness of data[key]; return it as float64."""
    array = np.asarray(data[key])
    if array.dtype.kind not in "iuf":
        raise UserError(f"{where}: {key}: expected numbers, got dtype {array.dtype}")
    wanted = "(" + ", ".join("·" if s is None else str(s) for s in shape) + ")"
    if array.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, array.shape, strict=False)):
        raise UserError(f"{where}: {key}: expected shape {wanted} ({meaning}), got {array.shape}")
    array = array.astype(np.float64)
    bad = ~np.isfinite(array.reshape(array.shape[0], -1)).all(axis=1) if array.size else np.zeros(0, bool)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise UserError(f"{where}: {key}: NaN or inf at frame {first} ({int(bad.sum())} of {len(bad)} frames)")
    return array


def _names(where: str, data: dict[str, np.ndarray], key: str) -> tuple[str, ...]:
    array = np.asarray(data[key])
    if array.ndim != 1 or array.dtype.kind not in "US":
        raise UserError(f"{where}: {key}: expected a 1-D array of strings, got shape {array.shape} ({array.dtype})")
    names = tuple(x.decode() if isinstance(x, bytes) else str(x) for x in array.tolist())
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise UserError(f"{where}: {key}: {name!r} appears twice")
        seen.add(name)
    return names


def _check_lengths(where: str, arrays: dict[str, np.ndarray]) -> int:
    lengths = {key: int(a.shape[0]) for key, a in arrays.items()}
    first_key, count = next(iter(lengths.items()))
    for key, n in lengths.items():
        if n != count:
            raise UserError(f"{where}: {key}: length mismatch: {n} frames, but {first_key} has {count}")
    if count < 2:
        raise UserError(f"{where}: {first_key}: {count} frame(s); a clip needs at least 2")
    return count


def _joint_permutation(where: str, field_name: str, names: Sequence[str], robot: RobotModel) -> np.ndarray:
    """Indices p with names[p[j]] == robot.joint_names[j]."""
    known = set(robot.joint_names)
    unknown = [n for n in names if n not in known]
    if unknown:
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise UserError(f"{where}: {field_name}: joints unknown to the robot model: "
                        f"{', '.join(repr(n) for n in unknown[:3])}{more}")
    if len(names) != len(robot.joint_names):
        missing = [n for n in robot.joint_names if n not in set(names)]
        raise UserError(f"{where}: {field_name}: expected {len(robot.joint_names)} joints (the robot model's), got "
                        f"{len(names)}; missing: {', '.join(repr(n) for n in missing[:3])}"
                        f"{' ...' if len(missing) > 3 else ''}")
    lookup = {n: i for i, n in enumerate(names)}
    return np.asarray([lookup[n] for n in robot.joint_names], dtype=np.int64)


def _load_named(where: str, path: Path, data: dict[str, np.ndarray], fps: float, robot: RobotModel) -> MotionClip:
    _require(where, data, _NAMED_KEYS, "named (holosoma)")
    joint_names = _names(where, data, "joint_names")
    body_names = _names(where, data, "body_names")
    nj, nb = len(joint_names), len(body_names)
    perm = _joint_permutation(where, "joint_names", joint_names, robot)
    qpos = _float_array(where, data, "joint_pos", (None, 7 + nj),
                        f"root xyz + root quaternion wxyz + {nj} joints of joint_names")
    qvel = _float_array(where, data, "joint_vel", (None, 6 + nj),
                        f"root linear + angular velocity + {nj} joints of joint_names")
    bodies = {key: _float_array(where, data, key, (None, nb, 4 if key == "body_quat_w" else 3),
                                f"frames x {nb} bodies of body_names x {4 if key == 'body_quat_w' else 3}")
              for key in _BODY_KEYS}
    _check_lengths(where, {"joint_pos": qpos, "joint_vel": qvel, **bodies})
    root_quat = _unit_quat(where, "joint_pos", qpos[:, 3:7], "columns 3:7 (root quaternion)")
    body_quat = _unit_quat(where, "body_quat_w", bodies["body_quat_w"], "")
    root_ang_vel = _root_ang_vel_world(root_quat, qvel[:, 3:6], fps)
    return MotionClip(
        name=path.stem,
        fps=fps,
        joint_pos=_f32(qpos[:, 7:][:, perm]),
        joint_vel=_f32(qvel[:, 6:][:, perm]),
        root_pos=_f32(qpos[:, :3]),
        root_quat=_f32(root_quat),
        root_lin_vel=_f32(qvel[:, :3]),
        root_ang_vel=_f32(root_ang_vel),
        body_names=body_names,
        body_pos_w=_f32(bodies["body_pos_w"]),
        body_quat_w=_f32(body_quat),
        body_lin_vel_w=_f32(bodies["body_lin_vel_w"]),
        body_ang_vel_w=_f32(bodies["body_ang_vel_w"]),
        joint_names=tuple(robot.joint_names),
    )


def _load_unnamed(where: str, path: Path, data: dict[str, np.ndarray], fps: float, robot: RobotModel,
                  joint_order: Sequence[str] | None) -> MotionClip:
    _require(where, data, _UNNAMED_KEYS, "unnamed (Isaac Lab)")
    order = tuple(robot.breadth_first_joint_order() if joint_order is None else joint_order)
    if len(set(order)) != len(order):
        raise UserError(f"{where}: joint_order: a joint appears twice")
    perm = _joint_permutation(where, "joint_order", order, robot)
    nj = len(order)
    meaning = f"frames x {nj} joints in {'breadth-first' if joint_order is None else 'the given joint_order'} order"
    if np.ndim(data["joint_pos"]) == 2 and np.shape(data["joint_pos"])[1] == 7 + nj:
        raise UserError(f"{where}: missing key 'joint_names' (joint_pos has 7 + {nj} columns, MuJoCo qpos rows of "
                        f"the named layout, which names its joints)")
    joint_pos = _float_array(where, data, "joint_pos", (None, nj), meaning)
    joint_vel = _float_array(where, data, "joint_vel", (None, nj), meaning)
    bodies = {key: _float_array(where, data, key, (None, None, 4 if key == "body_quat_w" else 3),
                                "frames x bodies (body 0 the root) x " + ("4" if key == "body_quat_w" else "3"))
              for key in _BODY_KEYS}
    _check_lengths(where, {"joint_pos": joint_pos, "joint_vel": joint_vel, **bodies})
    counts = {key: a.shape[1] for key, a in bodies.items()}
    if len(set(counts.values())) != 1 or min(counts.values()) < 1:
        raise UserError(f"{where}: body arrays: body counts differ or are zero ({counts})")
    root_quat = _unit_quat(where, "body_quat_w", bodies["body_quat_w"][:, 0], "body 0 (root)")
    clip = MotionClip(
        name=path.stem,
        fps=fps,
        joint_pos=_f32(joint_pos[:, perm]),
        joint_vel=_f32(joint_vel[:, perm]),
        root_pos=_f32(bodies["body_pos_w"][:, 0]),
        root_quat=_f32(root_quat),
        root_lin_vel=_f32(bodies["body_lin_vel_w"][:, 0]),
        root_ang_vel=_f32(bodies["body_ang_vel_w"][:, 0]),
        body_names=(),
        body_pos_w=np.zeros((joint_pos.shape[0], 0, 3), np.float32),
        body_quat_w=np.zeros((joint_pos.shape[0], 0, 4), np.float32),
        body_lin_vel_w=np.zeros((joint_pos.shape[0], 0, 3), np.float32),
        body_ang_vel_w=np.zeros((joint_pos.shape[0], 0, 3), np.float32),
        joint_names=tuple(robot.joint_names),
    )
    return with_model_bodies(clip, robot)


def _unit_quat(where: str, key: str, quat: np.ndarray, part: str) -> np.ndarray:
    norm = np.linalg.norm(quat, axis=-1, keepdims=True)
    bad = (np.abs(norm - 1.0) > 1e-2).reshape(quat.shape[0], -1).any(axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        at = f" {part}" if part else ""
        raise UserError(f"{where}: {key}:{at} not a unit quaternion at frame {first} (norm "
                        f"{float(norm.reshape(quat.shape[0], -1)[first].max()):.4g})")
    return quat / norm


def _f32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


def _fd_ang_vel_world(root_quat: np.ndarray, fps: float) -> np.ndarray:
    """World-frame angular velocity (T, 3) by central differences of the quaternions (one-sided at the ends)."""
    q = torch.as_tensor(root_quat, dtype=torch.float64)
    idx = torch.arange(q.shape[0])
    nxt, prv = (idx + 1).clamp(max=q.shape[0] - 1), (idx - 1).clamp(min=0)
    delta = quat_mul(q[nxt], quat_conjugate(q[prv]))
    return (axis_angle_from_quat(delta) * fps / (nxt - prv).unsqueeze(-1).double()).numpy()


def _root_ang_vel_world(root_quat: np.ndarray, stored: np.ndarray, fps: float) -> np.ndarray:
    """The stored qvel angular velocity in the world frame, its frame decided against finite differences."""
    q = torch.as_tensor(root_quat, dtype=torch.float64)
    from_local = quat_apply(q, torch.as_tensor(stored, dtype=torch.float64)).numpy()
    reference = _fd_ang_vel_world(root_quat, fps)
    error_local = np.abs(from_local - reference).mean()
    error_world = np.abs(stored - reference).mean()
    return stored if error_world < error_local else from_local


# ---------------------------------------------------------------------------------------------------------------
# writing


def save_clip(path: str | Path, clip: MotionClip, joint_names: Sequence[str] | None = None) -> None:
    """Write `clip` in the named (holosoma) layout: MuJoCo qpos / qvel (root angular velocity in the root's local
    frame, MuJoCo's convention), `joint_names` (`clip.joint_names` unless given), `body_names`, body arrays, fps."""
    names = tuple(clip.joint_names if joint_names is None else joint_names)
    if len(names) != clip.joint_pos.shape[1]:
        raise UserError(f"save_clip {clip.name}: joint_names: expected {clip.joint_pos.shape[1]} names, got "
                        f"{len(names)} (pass joint_names= or set clip.joint_names)")
    q = torch.as_tensor(clip.root_quat, dtype=torch.float64)
    local = quat_apply_inverse(q, torch.as_tensor(clip.root_ang_vel, dtype=torch.float64)).numpy()
    qpos = np.concatenate((clip.root_pos, clip.root_quat, clip.joint_pos), axis=1).astype(np.float32)
    qvel = np.concatenate((clip.root_lin_vel, local, clip.joint_vel), axis=1).astype(np.float32)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:  # np.savez would append .npz to a path lacking it
        np.savez(
            f,
            fps=np.asarray([clip.fps], dtype=np.float64),
            joint_pos=qpos,
            joint_vel=qvel,
            joint_names=np.asarray(names, dtype=np.str_),
            body_names=np.asarray(clip.body_names, dtype=np.str_).reshape(-1),
            body_pos_w=clip.body_pos_w,
            body_quat_w=clip.body_quat_w,
            body_lin_vel_w=clip.body_lin_vel_w,
            body_ang_vel_w=clip.body_ang_vel_w,
        )


# ---------------------------------------------------------------------------------------------------------------
# derived clips


def with_model_bodies(clip: MotionClip, robot: RobotModel) -> MotionClip:
    """The clip with its body arrays replaced by all the model's bodies, computed by forward kinematics from the
    root pose, root velocities and joints (body 0, the root, then equals the clip's root)."""
    kin = Kinematics(robot, "cpu", dtype=torch.float64)

    def t(x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float64)

    with torch.no_grad():
        pos, quat = kin.forward(t(clip.root_pos), quat_normalize(t(clip.root_quat)), t(clip.joint_pos))
        lin, ang = kin.velocities(pos, quat, t(clip.root_lin_vel), t(clip.root_ang_vel), t(clip.joint_vel))
    return replace(clip, body_names=tuple(robot.body_names), body_pos_w=_f32(pos.numpy()),
                   body_quat_w=_f32(quat.numpy()), body_lin_vel_w=_f32(lin.numpy()), body_ang_vel_w=_f32(ang.numpy()),
                   joint_names=tuple(robot.joint_names))


def resample_clip(clip: MotionClip, fps: float) -> MotionClip:
    """The clip sampled at `fps` over the same time span: frame k at k / fps for k = 0 .. floor(duration * fps).

    Positions and velocities are interpolated linearly, quaternions by slerp; frames at times the two rates
    share keep their values.
    """
    if abs(fps - clip.fps) <= 1e-9 * fps:
        return clip
    count = math.floor(clip.duration * fps + 1e-6) + 1
    if count < 2:
        raise UserError(f"motion clip {clip.name}: {clip.duration:.3g} s is too short to resample at {fps:g} fps")
    source = np.arange(count, dtype=np.float64) * (clip.fps / fps)
    i0 = np.minimum(np.floor(source + 1e-9).astype(np.int64), clip.num_frames - 1)
    i1 = np.minimum(i0 + 1, clip.num_frames - 1)
    alpha = np.clip(source - i0, 0.0, 1.0)

    def lerp(x: np.ndarray) -> np.ndarray:
        a = alpha.reshape((-1,) + (1,) * (x.ndim - 1))
        return _f32((1.0 - a) * x[i0].astype(np.float64) + a * x[i1].astype(np.float64))

    def slerp(x: np.ndarray) -> np.ndarray:
        a = torch.as_tensor(alpha.reshape((-1,) + (1,) * (x.ndim - 2)), dtype=torch.float64)
        q = torch.as_tensor(x, dtype=torch.float64)
        out = quat_slerp(q[i0], q[i1], a.expand(q[i0].shape[:-1]))
        exact = torch.as_tensor(alpha == 0.0).reshape((-1,) + (1,) * (x.ndim - 1))
        return _f32(torch.where(exact, q[i0], out).numpy())  # shared times: the source value, sign included

    return replace(
        clip, fps=float(fps),
        joint_pos=lerp(clip.joint_pos), joint_vel=lerp(clip.joint_vel),
        root_pos=lerp(clip.root_pos), root_quat=slerp(clip.root_quat),
        root_lin_vel=lerp(clip.root_lin_vel), root_ang_vel=lerp(clip.root_ang_vel),
        body_pos_w=lerp(clip.body_pos_w), body_quat_w=slerp(clip.body_quat_w),
        body_lin_vel_w=lerp(clip.body_lin_vel_w), body_ang_vel_w=lerp(clip.body_ang_vel_w),
    )
