"""The motion command of g1-track: the reference frame each env must reach, and where episodes start."""

from __future__ import annotations

from typing import Any, Protocol, cast

import torch
from torch import Tensor

from syncfree.envs.builtin.g1_track.config import TRACKED_BODIES, G1TrackConfig
from syncfree.envs.managers.commands import CommandTerm
from syncfree.envs.managers.env import JointPositionAction
from syncfree.envs.managers.select import assign_, is_mask
from syncfree.envs.math import quat_apply, quat_conjugate, quat_error_magnitude, quat_mul, yaw_quat
from syncfree.envs.motion.library import MotionLibrary
from syncfree.envs.motion.sampler import AdaptiveSampler
from syncfree.envs.physics import Physics
from syncfree.envs.robots import RobotModel
from syncfree.errors import UserError


class TrackingEnv(Protocol):
    """The env as its command, terms and events read it (`G1TrackEnv`)."""

    cfg: G1TrackConfig
    num_envs: int
    device: torch.device
    generator: torch.Generator
    physics: Physics
    robot: RobotModel
    action: JointPositionAction
    command: MotionCommand
    episode_length: Tensor
    max_episode_length: int
    body_pos: Tensor
    """Tracked bodies' world positions [num_envs, bodies, 3]."""
    body_quat: Tensor
    down: Tensor
    default_joint_pos: Tensor
    soft_lower: Tensor
    soft_upper: Tensor
    push_scale: Tensor
    tracked_ids: Tensor
    keypoint_ids: Tensor
    end_effector_ids: Tensor


class MotionCommand(CommandTerm):
    """The reference frame each env must reach this step, and where episodes start."""

    metric_names = ("error_anchor_pos", "error_anchor_rot", "error_body_pos", "error_body_rot", "error_joint_pos",
                    "error_joint_vel")

    def __init__(self, env: TrackingEnv, motions: MotionLibrary, sampler: AdaptiveSampler) -> None:
        super().__init__(env)
        self.motions, self.sampler = motions, sampler
        n, device = env.num_envs, env.device
        self.clip_ids = torch.zeros(n, dtype=torch.int64, device=device)
        self.time_steps = torch.zeros(n, dtype=torch.int64, device=device)
        self.encoder_index = torch.zeros(n, dtype=torch.int64, device=device)
        self.frame = torch.zeros(n, dtype=torch.int64, device=device)
        self.body_pos_relative = torch.zeros(n, len(TRACKED_BODIES), 3, device=device)
        self.body_quat_relative = torch.zeros(n, len(TRACKED_BODIES), 4, device=device)
        self.anchor = TRACKED_BODIES.index(env.cfg.anchor_body)
        self._offsets: dict[tuple[int, ...], Tensor] = {}

    # reference quantities at the target frame
    @property
    def joint_pos(self) -> Tensor:
        return self.motions.joint_pos[self.frame]

    @property
    def joint_vel(self) -> Tensor:
        return self.motions.joint_vel[self.frame]

    @property
    def body_pos_w(self) -> Tensor:
        return self.motions.body_pos_w[self.frame]

    @property
    def body_quat_w(self) -> Tensor:
        return self.motions.body_quat_w[self.frame]

    @property
    def anchor_pos_w(self) -> Tensor:
        return self.motions.body_pos_w[self.frame, self.anchor]

    @property
    def anchor_quat_w(self) -> Tensor:
        return self.motions.body_quat_w[self.frame, self.anchor]

    @property
    def command(self) -> Tensor:
        return torch.cat([self.joint_pos, self.joint_vel], dim=-1)

    def offsets(self, offsets: tuple[int, ...]) -> Tensor:
        """Frame offsets as a device tensor, made once (a per-step `torch.tensor` would copy from the host)."""
        if offsets not in self._offsets:
            self._offsets[offsets] = torch.tensor(offsets, device=self.env.device)
        return self._offsets[offsets]

    def future(self, field_name: str, offsets: tuple[int, ...]) -> Tensor:
        """[num_envs, len(offsets) · dim] of a reference field at the given frame offsets."""
        idx = self.motions.future_frame_index(self.clip_ids, self.time_steps, self.offsets(offsets))
        return getattr(self.motions, field_name)[idx].reshape(self.env.num_envs, -1)

    def draw(self) -> None:
        clips, frames = self.sampler.sample()
        encoders = torch.randint(0, self.env.cfg.num_encoders, (self.env.num_envs,), generator=self.env.generator,
                                 device=self.env.device)
        self._fresh = (clips, frames, encoders)

    def resample(self, selection: Tensor) -> None:
        clips, frames, encoders = self._fresh
        assign_(self.clip_ids, selection, clips)
        assign_(self.time_steps, selection, frames)
        assign_(self.encoder_index, selection, encoders)
        self.frame.copy_(self.motions.frame_index(self.clip_ids, self.time_steps))
        # until `update` re-anchors them, a fresh episode's targets are its reference frame itself (the robot was
        # just put there), not the previous episode's
        assign_(self.body_pos_relative, selection, self.body_pos_w)
        assign_(self.body_quat_relative, selection, self.body_quat_w)
        m = self.motions
        rows = self.frame if is_mask(selection) else self.frame[selection]
        self.env.physics.write_state(selection, m.root_pos[rows], m.root_quat[rows], m.root_lin_vel[rows],
                                     m.root_ang_vel[rows], m.joint_pos[rows], m.joint_vel[rows])

    def update(self) -> None:
        self.time_steps.add_(1)
        self.time_steps.copy_(torch.minimum(self.time_steps, self.motions.clip_length[self.clip_ids] - 1))
        self.frame.copy_(self.motions.frame_index(self.clip_ids, self.time_steps))
        self._update_relative_targets()

    def _update_relative_targets(self) -> None:
        """Reference bodies re-anchored at the robot's anchor (its x, y and heading; the reference's height)."""
        env = self.env
        robot_anchor_pos, robot_anchor_quat = env.body_pos[:, self.anchor], env.body_quat[:, self.anchor]
        ref_anchor_pos, ref_anchor_quat = self.anchor_pos_w, self.anchor_quat_w
        delta_pos = torch.cat([robot_anchor_pos[:, :2], ref_anchor_pos[:, 2:]], dim=-1)
        delta_quat = yaw_quat(quat_mul(robot_anchor_quat, quat_conjugate(ref_anchor_quat)))
        k = len(TRACKED_BODIES)
        delta_quat_k = delta_quat.unsqueeze(1).expand(-1, k, -1)
        self.body_quat_relative.copy_(quat_mul(delta_quat_k, self.body_quat_w))
        offset = self.body_pos_w - ref_anchor_pos.unsqueeze(1)
        self.body_pos_relative.copy_(delta_pos.unsqueeze(1) + quat_apply(delta_quat_k, offset))

    def update_metrics(self) -> None:
        env, m = self.env, self.metrics
        m["error_anchor_pos"] += torch.norm(self.anchor_pos_w - env.body_pos[:, self.anchor], dim=-1)
        m["error_anchor_rot"] += quat_error_magnitude(self.anchor_quat_w, env.body_quat[:, self.anchor])
        m["error_body_pos"] += torch.norm(self.body_pos_relative - env.body_pos, dim=-1).mean(-1)
        m["error_body_rot"] += quat_error_magnitude(self.body_quat_relative, env.body_quat).mean(-1)
        m["error_joint_pos"] += torch.norm(self.joint_pos - env.physics.joint_pos, dim=-1)
        m["error_joint_vel"] += torch.norm(self.joint_vel - env.physics.joint_vel, dim=-1)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(clip_ids=self.clip_ids.clone(), time_steps=self.time_steps.clone(),
                     encoder_index=self.encoder_index.clone(), sampler=self.sampler.state_dict(),
                     clip_length=self.motions.clip_length.clone(), clip_names=list(self.motions.clip_names))
        return state

    def check_clips(self, state: Any) -> None:
        """A saved state of another clip set is one line naming both (before anything is restored); a state too
        malformed to say is left to the checkpoint's schema."""
        if not isinstance(state, dict):
            return
        saved_names, saved_lengths = state.get("clip_names"), state.get("clip_length")  # absent in checkpoints of earlier versions
        if not (saved_lengths is None or isinstance(saved_lengths, Tensor)) or not (
                saved_names is None or (isinstance(saved_names, list) and all(isinstance(n, str) for n in saved_names))):
            return
        names, lengths = self.motions.clip_names, self.motions.clip_length
        same = (saved_lengths is None or (saved_lengths.shape == lengths.shape
                                          and torch.equal(saved_lengths.to(lengths.device), lengths)))
        if not same or (saved_names is not None and list(saved_names) != names):
            # the lengths are missing only where the names differ (an empty list of names is not expected)
            saved_names = saved_names or [f"clip {i}" for i in range(cast(Tensor, saved_lengths).numel())]
            raise UserError(f"env state: the run was trained on {len(saved_names)} clips ({_summary(saved_names)}) "
                            f"but this run's clips (env.motions) are {len(names)} ({_summary(names)}), or their "
                            "lengths differ; resume with the clips the run was trained on")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.check_clips(state)
        super().load_state_dict(state)
        self.clip_ids.copy_(state["clip_ids"])
        self.time_steps.copy_(state["time_steps"])
        self.encoder_index.copy_(state["encoder_index"])
        self.sampler.load_state_dict(state["sampler"])
        self.frame.copy_(self.motions.frame_index(self.clip_ids, self.time_steps))
        self._update_relative_targets()


def _summary(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
