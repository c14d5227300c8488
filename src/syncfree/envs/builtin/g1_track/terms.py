"""g1-track's terms: observations, rewards, terminations and events as small pure functions of the env."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor

from syncfree.envs.builtin.g1_track.command import TrackingEnv
from syncfree.envs.builtin.g1_track.config import KEYPOINTS, TRACKED_BODIES
from syncfree.envs.managers.select import assign_
from syncfree.envs.math import (
    matrix_first_two_columns,
    quat_apply_inverse,
    quat_conjugate,
    quat_error_magnitude,
    quat_mul,
)

if TYPE_CHECKING:
    from syncfree.envs.physics import MujocoPhysics, MujocoWarpPhysics

# -- observation terms: pure functions of the env ---------------------------------------------------------

Term = Callable[[TrackingEnv], Tensor]

def projected_gravity(env: TrackingEnv) -> Tensor:
    return quat_apply_inverse(env.physics.root_quat, env.down)


def base_lin_vel(env: TrackingEnv) -> Tensor:
    return quat_apply_inverse(env.physics.root_quat, env.physics.root_lin_vel)


def base_ang_vel(env: TrackingEnv) -> Tensor:
    return quat_apply_inverse(env.physics.root_quat, env.physics.root_ang_vel)


def joint_pos_rel(env: TrackingEnv) -> Tensor:
    return env.physics.joint_pos - env.default_joint_pos


def joint_vel_rel(env: TrackingEnv) -> Tensor:
    return env.physics.joint_vel


def last_action(env: TrackingEnv) -> Tensor:
    return env.action.raw


def motion_anchor_pos_b(env: TrackingEnv) -> Tensor:
    c = env.command
    return quat_apply_inverse(env.body_quat[:, c.anchor], c.anchor_pos_w - env.body_pos[:, c.anchor])


def motion_anchor_ori_b(env: TrackingEnv) -> Tensor:
    c = env.command
    return matrix_first_two_columns(quat_mul(quat_conjugate(env.body_quat[:, c.anchor]), c.anchor_quat_w))


def robot_body_pos_b(env: TrackingEnv) -> Tensor:
    a = env.command.anchor
    anchor_quat = env.body_quat[:, a : a + 1].expand(-1, len(TRACKED_BODIES), -1)
    return quat_apply_inverse(anchor_quat, env.body_pos - env.body_pos[:, a : a + 1]).reshape(env.num_envs, -1)


def robot_body_ori_b(env: TrackingEnv) -> Tensor:
    a = env.command.anchor
    anchor_quat = env.body_quat[:, a : a + 1].expand(-1, len(TRACKED_BODIES), -1)
    return matrix_first_two_columns(quat_mul(quat_conjugate(anchor_quat), env.body_quat)).reshape(env.num_envs, -1)


def command_frames(offsets: tuple[int, ...]) -> Term:
    def term(env: TrackingEnv) -> Tensor:
        return torch.cat([env.command.future("joint_pos", offsets), env.command.future("joint_vel", offsets)], -1)
    return term


def future_field(name: str, offsets: tuple[int, ...]) -> Term:
    def term(env: TrackingEnv) -> Tensor:
        return env.command.future(name, offsets)
    return term


def future_keypoints(offsets: tuple[int, ...]) -> Term:
    """Reference keypoint positions in the reference anchor's frame at future frames (the reduced command)."""
    def term(env: TrackingEnv) -> Tensor:
        c, n, s = env.command, env.num_envs, len(offsets)
        idx = c.motions.future_frame_index(c.clip_ids, c.time_steps, c.offsets(offsets))
        bodies_pos, bodies_quat = c.motions.body_pos_w[idx], c.motions.body_quat_w[idx]  # [n, s, k, ·]
        points = bodies_pos[:, :, env.keypoint_ids]
        anchor_pos = bodies_pos[:, :, c.anchor : c.anchor + 1]
        anchor_quat = bodies_quat[:, :, c.anchor : c.anchor + 1].expand(n, s, len(KEYPOINTS), 4)
        return quat_apply_inverse(anchor_quat, points - anchor_pos).reshape(n, -1)
    return term


def encoder_index(env: TrackingEnv) -> Tensor:
    return env.command.encoder_index.unsqueeze(-1).float()


# -- rewards ----------------------------------------------------------------------------------------------

def _kernel(squared_error: Tensor, std: float) -> Tensor:
    return torch.exp(-squared_error / std**2)


def anchor_position(std: float) -> Term:
    def term(env: TrackingEnv) -> Tensor:
        c = env.command
        return _kernel(torch.sum((c.anchor_pos_w - env.body_pos[:, c.anchor]) ** 2, -1), std)
    return term


def anchor_orientation(std: float) -> Term:
    def term(env: TrackingEnv) -> Tensor:
        c = env.command
        return _kernel(quat_error_magnitude(c.anchor_quat_w, env.body_quat[:, c.anchor]) ** 2, std)
    return term


def body_position(std: float) -> Term:
    def term(env: TrackingEnv) -> Tensor:
        return _kernel(torch.sum((env.command.body_pos_relative - env.body_pos) ** 2, -1).mean(-1), std)
    return term


def body_orientation(std: float) -> Term:
    def term(env: TrackingEnv) -> Tensor:
        error = quat_error_magnitude(env.command.body_quat_relative, env.body_quat) ** 2
        return _kernel(error.mean(-1), std)
    return term


def body_velocity(kind: str, std: float) -> Term:
    def term(env: TrackingEnv) -> Tensor:
        reference = getattr(env.command.motions, f"body_{kind}_vel_w")[env.command.frame]
        robot = getattr(env.physics, f"body_{kind}_vel_w")[:, env.tracked_ids]
        return _kernel(torch.sum((reference - robot) ** 2, -1).mean(-1), std)
    return term


def action_rate(env: TrackingEnv) -> Tensor:
    return torch.sum((env.action.raw - env.action.previous) ** 2, dim=-1)


def undesired_contacts(env: TrackingEnv) -> Tensor:
    """Floor contacts of bodies other than the feet (knees, hands, torso); needs a backend with contacts."""
    return cast(Tensor, env.physics.other_contacts)


def joint_limits(env: TrackingEnv) -> Tensor:
    q = env.physics.joint_pos
    below = (env.soft_lower - q).clamp(min=0.0)
    above = (q - env.soft_upper).clamp(min=0.0)
    return torch.sum(below + above, dim=-1)


# -- terminations ---------------------------------------------------------------------------------------

def time_out(env: TrackingEnv) -> Tensor:
    return env.episode_length >= env.max_episode_length


def clip_end(env: TrackingEnv) -> Tensor:
    c = env.command
    return c.time_steps >= c.motions.clip_length[c.clip_ids] - 1


def anchor_height(threshold: float) -> Term:
    def term(env: TrackingEnv) -> Tensor:
        c = env.command
        return torch.abs(c.anchor_pos_w[:, 2] - env.body_pos[:, c.anchor, 2]) > threshold
    return term


def anchor_tilt(threshold: float) -> Term:
    """The anchor's gravity direction differs from the reference's (z component) by more than `threshold`."""
    def term(env: TrackingEnv) -> Tensor:
        c = env.command
        reference = quat_apply_inverse(c.anchor_quat_w, env.down)
        robot = quat_apply_inverse(env.body_quat[:, c.anchor], env.down)
        return torch.abs(reference[:, 2] - robot[:, 2]) > threshold
    return term


def end_effector_height(threshold: float) -> Term:
    def term(env: TrackingEnv) -> Tensor:
        error = env.command.body_pos_relative[:, env.end_effector_ids, 2] - env.body_pos[:, env.end_effector_ids, 2]
        return torch.any(torch.abs(error) > threshold, dim=-1)
    return term


# -- events ---------------------------------------------------------------------------------------------

def uniform_per_joint(env: TrackingEnv) -> Tensor:
    """[num_envs, joints] uniform in [-1, 1]."""
    u = torch.rand(env.num_envs, len(env.robot.joint_names), generator=env.generator, device=env.device)
    return 2.0 * u - 1.0


def reset_joint_noise(env: TrackingEnv, selection: Tensor, drawn: Tensor) -> None:
    noisy = env.physics.joint_pos + drawn * env.cfg.reset_joint_noise
    assign_(env.physics.joint_pos, selection, torch.maximum(torch.minimum(noisy, env.soft_upper), env.soft_lower))


def push_joints(env: TrackingEnv, selection: Tensor, drawn: Tensor) -> None:
    """A random joint-velocity kick (the torch backend's root follows the reference, so pushes act on joints)."""
    assign_(env.physics.joint_vel, selection, env.physics.joint_vel + drawn * env.cfg.push_joint_velocity)


def uniform_root_velocity(env: TrackingEnv) -> Tensor:
    """[num_envs, 6] uniform in [-1, 1]: linear then angular velocity change, before scaling."""
    return 2.0 * torch.rand(env.num_envs, 6, generator=env.generator, device=env.device) - 1.0


def push_root(env: TrackingEnv, selection: Tensor, drawn: Tensor) -> None:
    """A random change of the root's world-frame velocity (Isaac Lab's `push_by_setting_velocity`)."""
    kick = drawn * env.push_scale
    physics = env.physics
    assign_(physics.root_lin_vel, selection, physics.root_lin_vel + kick[:, :3])
    assign_(physics.root_ang_vel, selection, physics.root_ang_vel + kick[:, 3:])


def uniform_model_variant(env: TrackingEnv) -> Tensor:
    """[num_envs] int64: a model variant (friction, added torso mass) for each env, uniformly."""
    physics = cast("MujocoPhysics | MujocoWarpPhysics", env.physics)  # the event of the real-physics backends
    return torch.randint(0, physics.num_variants, (env.num_envs,), generator=env.generator, device=env.device)


def randomize_model(env: TrackingEnv, selection: Tensor, drawn: Tensor) -> None:
    cast("MujocoPhysics | MujocoWarpPhysics", env.physics).choose_variants(selection, drawn)
