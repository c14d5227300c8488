"""All reference clips of a task, resampled to the control rate and concatenated on the device."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from syncfree.envs.motion.clips import MotionClip, load_clip, resample_clip
from syncfree.envs.motion.generate import generate_clips
from syncfree.envs.robots import RobotModel
from syncfree.errors import UserError


class MotionLibrary:
    """Clips concatenated frame by frame: clip c holds the global rows clip_start[c] .. clip_start[c] + length - 1.

    Every clip is resampled to 1 / control_dt frames per second (linear interpolation for positions and
    velocities, slerp for quaternions) and reduced to the tracked bodies `body_names`, selected by name.
    Per-frame tensors (float32, on `device`): `joint_pos`, `joint_vel` (F, J) in the robot's joint order,
    `root_pos`, `root_lin_vel`, `root_ang_vel` (F, 3), `root_quat` (F, 4) wxyz, `body_pos_w`, `body_lin_vel_w`,
    `body_ang_vel_w` (F, K, 3), `body_quat_w` (F, K, 4), world frame, K = len(body_names).
    """

    def __init__(self, clips: Sequence[MotionClip], robot: RobotModel, body_names: Sequence[str],
                 device: torch.device | str, control_dt: float = 0.02) -> None:
        if not clips:
            raise UserError("motion library: no clips")
        if not control_dt > 0:
            raise UserError(f"motion library: control_dt={control_dt} is invalid; allowed: a positive number")
        if isinstance(body_names, str):
            body_names = [body_names]
        self.device = torch.device(device)
        self.robot = robot
        self.dt = float(control_dt)
        self.fps = 1.0 / self.dt
        self.body_names: list[str] = list(body_names)
        num_joints = len(robot.joint_names)

        parts: dict[str, list[np.ndarray]] = {key: [] for key in _FRAME_KEYS}
        lengths = []
        self.clip_names: list[str] = []
        for clip in clips:
            if clip.joint_pos.shape[1] != num_joints:
                raise UserError(f"motion clip {clip.name}: joint_pos: expected {num_joints} joints (the robot "
                                f"model's), got {clip.joint_pos.shape[1]}")
            lookup = {name: i for i, name in enumerate(clip.body_names)}
            missing = [name for name in self.body_names if name not in lookup]
            if missing:
                raise UserError(f"motion clip {clip.name}: body_names: no body {missing[0]!r} (the clip has "
                                f"{len(clip.body_names)} bodies: {', '.join(clip.body_names[:8])}"
                                f"{' ...' if len(clip.body_names) > 8 else ''})")
            rows = [lookup[name] for name in self.body_names]
            clip = resample_clip(clip, self.fps)
            for key in _ROOT_KEYS:
                parts[key].append(getattr(clip, key))
            for key in _BODY_KEYS:
                parts[key].append(getattr(clip, key)[:, rows])
            lengths.append(clip.num_frames)
            self.clip_names.append(clip.name)

        self.num_clips = len(lengths)
        self.clip_length = torch.tensor(lengths, dtype=torch.int64, device=self.device)
        """(C,) frames per clip at the control rate."""
        self.clip_start = torch.tensor(np.cumsum([0, *lengths[:-1]]), dtype=torch.int64, device=self.device)
        """(C,) global row of each clip's first frame."""
        self.num_frames_total = int(sum(lengths))
        k = len(self.body_names)
        for key, arrays in parts.items():
            stacked = np.concatenate(arrays, axis=0) if key in _ROOT_KEYS or k else np.zeros(
                (self.num_frames_total, 0, 4 if key == "body_quat_w" else 3), np.float32)
            setattr(self, key, torch.as_tensor(stacked, dtype=torch.float32).to(self.device))
        self.joint_pos: Tensor
        self.joint_vel: Tensor
        self.root_pos: Tensor
        self.root_quat: Tensor
        self.root_lin_vel: Tensor
        self.root_ang_vel: Tensor
        self.body_pos_w: Tensor
        self.body_quat_w: Tensor
        self.body_lin_vel_w: Tensor
        self.body_ang_vel_w: Tensor

    def frame_index(self, clip_ids: Tensor, frame: Tensor) -> Tensor:
        """Global rows (N,) of the frames (N,) of the clips (N,), clamped to [0, length - 1]; no host reads."""
        last = self.clip_length[clip_ids] - 1
        return self.clip_start[clip_ids] + torch.minimum(frame.clamp(min=0), last)

    def future_frame_index(self, clip_ids: Tensor, frame: Tensor, offsets: Tensor) -> Tensor:
        """Global rows (N, S) of frame + offsets[s], clamped within each clip (held at its last frame)."""
        last = (self.clip_length[clip_ids] - 1).unsqueeze(-1)
        wanted = frame.unsqueeze(-1) + offsets.to(frame.device).unsqueeze(0)
        return self.clip_start[clip_ids].unsqueeze(-1) + torch.minimum(wanted.clamp(min=0), last)

    def clip_duration(self) -> Tensor:
        """(C,) seconds from each clip's first to its last frame."""
        return (self.clip_length - 1).to(torch.float32) * self.dt


_ROOT_KEYS = ("joint_pos", "joint_vel", "root_pos", "root_quat", "root_lin_vel", "root_ang_vel")
_BODY_KEYS = ("body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")
_FRAME_KEYS = _ROOT_KEYS + _BODY_KEYS


def motion_files(paths: Sequence[str | Path] | str | Path) -> list[Path]:
    """The files named, a directory standing for all its `*.npz` files (sorted by name)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files: list[Path] = []
    for entry in paths:
        path = Path(entry).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.glob("*.npz") if p.is_file())
            if not found:
                raise UserError(f"motion directory {path}: no *.npz files in it")
            files.extend(found)
        else:
            files.append(path)
    return files


def load_motions(paths: Sequence[str | Path] | str | Path | None, robot: RobotModel, body_names: Sequence[str],
                 device: torch.device | str, control_dt: float = 0.02, joint_order: Sequence[str] | None = None,
                 seed: int = 0, recompute_bodies: bool = False) -> MotionLibrary:
    """A MotionLibrary of the clips in `paths` (files, or directories of `*.npz`), or with None / no paths the
    generated clip set of `generate_clips(robot, seed=seed)`. `joint_order` and `recompute_bodies` go to
    `load_clip`."""
    if not paths:
        clips = generate_clips(robot, seed=seed)
    else:
        clips = [load_clip(path, robot, joint_order, recompute_bodies=recompute_bodies) for path in motion_files(paths)]
    return MotionLibrary(clips, robot, body_names, device, control_dt)


def holosoma_clip_dir() -> Path | None:
    """The G1 whole-body-tracking clips shipped by the `holosoma` package, if it is installed (not imported)."""
    try:
        spec = importlib.util.find_spec("holosoma")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        folder = Path(location) / "data" / "motions" / "g1_29dof" / "whole_body_tracking"
        if folder.is_dir():
            return folder
    return None
