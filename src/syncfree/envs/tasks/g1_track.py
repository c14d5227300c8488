"""g1-track: a Unitree G1 (29 joints) tracks reference whole-body motions.

The task is declared as term tables (observations, rewards, terminations, events) over a motion command
that starts episodes where the adaptive sampler says the policy fails. Physics sits behind
`syncfree.envs.physics.Physics`: the default backend is the torch PD backend (no contacts, root driven along
the reference); `mujoco` and `mujoco-warp` simulate the whole robot with gravity and floor contacts, so the
root moves by itself, falls end episodes, pushes act on the root, friction and torso mass are randomized per
episode and contact terms join the reward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from syncfree.config import PerfConfig
from syncfree.envs.api import ActionSpec
from syncfree.envs.managers.commands import CommandTerm
from syncfree.envs.managers.env import JointPositionAction, ManagerBasedEnv
from syncfree.envs.managers.events import EventTerm
from syncfree.envs.managers.observations import ObsGroup, ObsTerm
from syncfree.envs.managers.rewards import RewardTerm, TerminationTerm
from syncfree.envs.managers.select import assign_, is_mask
from syncfree.envs.math import (
    matrix_first_two_columns,
    quat_apply,
    quat_apply_inverse,
    quat_conjugate,
    quat_error_magnitude,
    quat_mul,
    yaw_quat,
)
from syncfree.envs.motion.library import MotionLibrary, load_motions
from syncfree.envs.motion.sampler import AdaptiveSampler
from syncfree.envs.physics import MujocoPhysics, MujocoWarpPhysics, Physics, TorchPDPhysics
from syncfree.envs.robots import RobotModel, load_robot
from syncfree.errors import UserError

TRACKED_BODIES = (
    "pelvis", "left_hip_roll_link", "left_knee_link", "left_ankle_roll_link", "right_hip_roll_link",
    "right_knee_link", "right_ankle_roll_link", "torso_link", "left_shoulder_roll_link", "left_elbow_link",
    "left_wrist_yaw_link", "right_shoulder_roll_link", "right_elbow_link", "right_wrist_yaw_link",
)
END_EFFECTORS = ("left_ankle_roll_link", "right_ankle_roll_link", "left_wrist_yaw_link", "right_wrist_yaw_link")
KEYPOINTS = ("torso_link", "left_wrist_yaw_link", "right_wrist_yaw_link", "left_ankle_roll_link",
             "right_ankle_roll_link")
DEFAULT_POSE = {  # slightly bent knees, arms relaxed (radians)
    "left_hip_pitch_joint": -0.312, "right_hip_pitch_joint": -0.312, "left_knee_joint": 0.669,
    "right_knee_joint": 0.669, "left_ankle_pitch_joint": -0.363, "right_ankle_pitch_joint": -0.363,
    "left_elbow_joint": 0.6, "right_elbow_joint": 0.6, "left_shoulder_roll_joint": 0.2,
    "right_shoulder_roll_joint": -0.2, "left_shoulder_pitch_joint": 0.2, "right_shoulder_pitch_joint": 0.2,
}


@dataclass
class G1TrackConfig:
    robot: str = ""
    """MJCF file of the robot; empty: the G1 29-DoF description shipped with the package."""
    motions: list[str] = field(default_factory=list)
    """npz clips or folders of them; empty: the procedurally generated clip set."""
    episode_seconds: float = 10.0
    sim_dt: float = 0.005
    decimation: int = 4
    anchor_body: str = "torso_link"
    policy_command_frames: tuple[int, ...] = (0, 1, 4)
    """Reference frames (offsets from the current target frame) in the policy's command."""
    critic_command_frames: tuple[int, ...] = (0, 1, 4, 10, 20)
    tokenizer_frames: tuple[int, ...] = tuple(range(1, 11))
    history: int = 10
    """History length of the policy's proprioceptive terms."""
    observation_groups: tuple[str, ...] = ("policy", "critic")
    """Groups computed each step (add `tokenizer` for token-encoder policies)."""
    num_encoders: int = 2
    """Encoder types a token-encoder policy chooses from, drawn per episode (0: joints, 1: keypoints)."""
    reset_joint_noise: float = 0.1
    push_joint_velocity: float = 0.5
    """Torch backend: the largest joint-velocity kick of a push (rad/s)."""
    push_root_velocity: tuple[float, ...] = (0.5, 0.5, 0.2, 0.52, 0.52, 0.78)
    """Real-physics backends: the largest root velocity change of a push, per component (x, y, z m/s;
    roll, pitch, yaw rad/s, world frame)."""
    push_interval_s: tuple[float, float] = (1.0, 3.0)
    backend: str = "torch"
    """Physics: `torch` (PD joints, root along the reference, no contacts), `mujoco` (C MuJoCo on CPU threads,
    contacts) or `mujoco-warp` (MuJoCo Warp on the env's device, contacts)."""


class MotionCommand(CommandTerm):
    """The reference frame each env must reach this step, and where episodes start."""

    metric_names = ("error_anchor_pos", "error_anchor_rot", "error_body_pos", "error_body_rot", "error_joint_pos",
                    "error_joint_vel")

    def __init__(self, env: G1TrackEnv, motions: MotionLibrary, sampler: AdaptiveSampler) -> None:
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
                     encoder_index=self.encoder_index.clone(), sampler=self.sampler.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.clip_ids.copy_(state["clip_ids"])
        self.time_steps.copy_(state["time_steps"])
        self.encoder_index.copy_(state["encoder_index"])
        self.sampler.load_state_dict(state["sampler"])
        self.frame.copy_(self.motions.frame_index(self.clip_ids, self.time_steps))
        self._update_relative_targets()


# -- observation terms: pure functions of the env ---------------------------------------------------------

Term = Callable[["G1TrackEnv"], Tensor]

def projected_gravity(env: G1TrackEnv) -> Tensor:
    return quat_apply_inverse(env.physics.root_quat, env.down)


def base_lin_vel(env: G1TrackEnv) -> Tensor:
    return quat_apply_inverse(env.physics.root_quat, env.physics.root_lin_vel)


def base_ang_vel(env: G1TrackEnv) -> Tensor:
    return quat_apply_inverse(env.physics.root_quat, env.physics.root_ang_vel)


def joint_pos_rel(env: G1TrackEnv) -> Tensor:
    return env.physics.joint_pos - env.default_joint_pos


def joint_vel_rel(env: G1TrackEnv) -> Tensor:
    return env.physics.joint_vel


def last_action(env: G1TrackEnv) -> Tensor:
    return env.action.raw


def motion_anchor_pos_b(env: G1TrackEnv) -> Tensor:
    c = env.command
    return quat_apply_inverse(env.body_quat[:, c.anchor], c.anchor_pos_w - env.body_pos[:, c.anchor])


def motion_anchor_ori_b(env: G1TrackEnv) -> Tensor:
    c = env.command
    return matrix_first_two_columns(quat_mul(quat_conjugate(env.body_quat[:, c.anchor]), c.anchor_quat_w))


def robot_body_pos_b(env: G1TrackEnv) -> Tensor:
    a = env.command.anchor
    anchor_quat = env.body_quat[:, a : a + 1].expand(-1, len(TRACKED_BODIES), -1)
    return quat_apply_inverse(anchor_quat, env.body_pos - env.body_pos[:, a : a + 1]).reshape(env.num_envs, -1)


def robot_body_ori_b(env: G1TrackEnv) -> Tensor:
    a = env.command.anchor
    anchor_quat = env.body_quat[:, a : a + 1].expand(-1, len(TRACKED_BODIES), -1)
    return matrix_first_two_columns(quat_mul(quat_conjugate(anchor_quat), env.body_quat)).reshape(env.num_envs, -1)


def command_frames(offsets: tuple[int, ...]) -> Term:
    def term(env: G1TrackEnv) -> Tensor:
        return torch.cat([env.command.future("joint_pos", offsets), env.command.future("joint_vel", offsets)], -1)
    return term


def future_field(name: str, offsets: tuple[int, ...]) -> Term:
    def term(env: G1TrackEnv) -> Tensor:
        return env.command.future(name, offsets)
    return term


def future_keypoints(offsets: tuple[int, ...]) -> Term:
    """Reference keypoint positions in the reference anchor's frame at future frames (the reduced command)."""
    def term(env: G1TrackEnv) -> Tensor:
        c, n, s = env.command, env.num_envs, len(offsets)
        idx = c.motions.future_frame_index(c.clip_ids, c.time_steps, c.offsets(offsets))
        bodies_pos, bodies_quat = c.motions.body_pos_w[idx], c.motions.body_quat_w[idx]  # [n, s, k, ·]
        points = bodies_pos[:, :, env.keypoint_ids]
        anchor_pos = bodies_pos[:, :, c.anchor : c.anchor + 1]
        anchor_quat = bodies_quat[:, :, c.anchor : c.anchor + 1].expand(n, s, len(KEYPOINTS), 4)
        return quat_apply_inverse(anchor_quat, points - anchor_pos).reshape(n, -1)
    return term


def encoder_index(env: G1TrackEnv) -> Tensor:
    return env.command.encoder_index.unsqueeze(-1).float()


# -- rewards ----------------------------------------------------------------------------------------------

def _kernel(squared_error: Tensor, std: float) -> Tensor:
    return torch.exp(-squared_error / std**2)


def anchor_position(std: float) -> Term:
    def term(env: G1TrackEnv) -> Tensor:
        c = env.command
        return _kernel(torch.sum((c.anchor_pos_w - env.body_pos[:, c.anchor]) ** 2, -1), std)
    return term


def anchor_orientation(std: float) -> Term:
    def term(env: G1TrackEnv) -> Tensor:
        c = env.command
        return _kernel(quat_error_magnitude(c.anchor_quat_w, env.body_quat[:, c.anchor]) ** 2, std)
    return term


def body_position(std: float) -> Term:
    def term(env: G1TrackEnv) -> Tensor:
        return _kernel(torch.sum((env.command.body_pos_relative - env.body_pos) ** 2, -1).mean(-1), std)
    return term


def body_orientation(std: float) -> Term:
    def term(env: G1TrackEnv) -> Tensor:
        error = quat_error_magnitude(env.command.body_quat_relative, env.body_quat) ** 2
        return _kernel(error.mean(-1), std)
    return term


def body_velocity(kind: str, std: float) -> Term:
    def term(env: G1TrackEnv) -> Tensor:
        reference = getattr(env.command.motions, f"body_{kind}_vel_w")[env.command.frame]
        robot = getattr(env.physics, f"body_{kind}_vel_w")[:, env.tracked_ids]
        return _kernel(torch.sum((reference - robot) ** 2, -1).mean(-1), std)
    return term


def action_rate(env: G1TrackEnv) -> Tensor:
    return torch.sum((env.action.raw - env.action.previous) ** 2, dim=-1)


def undesired_contacts(env: G1TrackEnv) -> Tensor:
    """Floor contacts of bodies other than the feet (knees, hands, torso); needs a backend with contacts."""
    return env.physics.other_contacts


def joint_limits(env: G1TrackEnv) -> Tensor:
    q = env.physics.joint_pos
    below = (env.soft_lower - q).clamp(min=0.0)
    above = (q - env.soft_upper).clamp(min=0.0)
    return torch.sum(below + above, dim=-1)


# -- terminations ---------------------------------------------------------------------------------------

def time_out(env: G1TrackEnv) -> Tensor:
    return env.episode_length >= env.max_episode_length


def clip_end(env: G1TrackEnv) -> Tensor:
    c = env.command
    return c.time_steps >= c.motions.clip_length[c.clip_ids] - 1


def anchor_height(threshold: float) -> Term:
    def term(env: G1TrackEnv) -> Tensor:
        c = env.command
        return torch.abs(c.anchor_pos_w[:, 2] - env.body_pos[:, c.anchor, 2]) > threshold
    return term


def anchor_tilt(threshold: float) -> Term:
    """The anchor's gravity direction differs from the reference's (z component) by more than `threshold`."""
    def term(env: G1TrackEnv) -> Tensor:
        c = env.command
        reference = quat_apply_inverse(c.anchor_quat_w, env.down)
        robot = quat_apply_inverse(env.body_quat[:, c.anchor], env.down)
        return torch.abs(reference[:, 2] - robot[:, 2]) > threshold
    return term


def end_effector_height(threshold: float) -> Term:
    def term(env: G1TrackEnv) -> Tensor:
        error = env.command.body_pos_relative[:, env.end_effector_ids, 2] - env.body_pos[:, env.end_effector_ids, 2]
        return torch.any(torch.abs(error) > threshold, dim=-1)
    return term


# -- events ---------------------------------------------------------------------------------------------

def uniform_per_joint(env: G1TrackEnv) -> Tensor:
    """[num_envs, joints] uniform in [-1, 1]."""
    u = torch.rand(env.num_envs, len(env.robot.joint_names), generator=env.generator, device=env.device)
    return 2.0 * u - 1.0


def reset_joint_noise(env: G1TrackEnv, selection: Tensor, drawn: Tensor) -> None:
    noisy = env.physics.joint_pos + drawn * env.cfg.reset_joint_noise
    assign_(env.physics.joint_pos, selection, torch.maximum(torch.minimum(noisy, env.soft_upper), env.soft_lower))


def push_joints(env: G1TrackEnv, selection: Tensor, drawn: Tensor) -> None:
    """A random joint-velocity kick (the torch backend's root follows the reference, so pushes act on joints)."""
    assign_(env.physics.joint_vel, selection, env.physics.joint_vel + drawn * env.cfg.push_joint_velocity)


def uniform_root_velocity(env: G1TrackEnv) -> Tensor:
    """[num_envs, 6] uniform in [-1, 1]: linear then angular velocity change, before scaling."""
    return 2.0 * torch.rand(env.num_envs, 6, generator=env.generator, device=env.device) - 1.0


def push_root(env: G1TrackEnv, selection: Tensor, drawn: Tensor) -> None:
    """A random change of the root's world-frame velocity (Isaac Lab's `push_by_setting_velocity`)."""
    kick = drawn * env.push_scale
    physics = env.physics
    assign_(physics.root_lin_vel, selection, physics.root_lin_vel + kick[:, :3])
    assign_(physics.root_ang_vel, selection, physics.root_ang_vel + kick[:, 3:])


def uniform_model_variant(env: G1TrackEnv) -> Tensor:
    """[num_envs] int64: a model variant (friction, added torso mass) for each env, uniformly."""
    return torch.randint(0, env.physics.num_variants, (env.num_envs,), generator=env.generator, device=env.device)


def randomize_model(env: G1TrackEnv, selection: Tensor, drawn: Tensor) -> None:
    env.physics.choose_variants(selection, drawn)


# -- physics backends -----------------------------------------------------------------------------------

BACKENDS = ("torch", "mujoco", "mujoco-warp")


def make_physics(backend: str, robot: RobotModel, num_envs: int, device: torch.device, sim_dt: float,
                 decimation: int) -> tuple[Physics, int]:
    """The backend, and how many `physics.step()` calls make one control step (MuJoCo takes all the substeps of a
    control step in one call)."""
    if backend in ("", "torch"):
        return TorchPDPhysics(robot, num_envs, device, sim_dt), decimation
    if backend == "mujoco":
        return MujocoPhysics(robot, num_envs, device, timestep=sim_dt, substeps=decimation), 1
    if backend == "mujoco-warp":
        return MujocoWarpPhysics(robot, num_envs, device, timestep=sim_dt, substeps=decimation), 1
    raise UserError(f"env.backend={backend!r} is not available; allowed: {', '.join(BACKENDS)}")


# -- the env ----------------------------------------------------------------------------------------------

class G1TrackEnv(ManagerBasedEnv):
    def __init__(self, num_envs: int, device: torch.device | str = "cpu", seed: int = 0, max_episode_length: int = 0,
                 cfg: G1TrackConfig | None = None, perf: PerfConfig | None = None) -> None:
        cfg = cfg or G1TrackConfig()
        self.cfg = cfg
        step_dt = cfg.sim_dt * cfg.decimation
        super().__init__(num_envs, device, seed, max_episode_length or round(cfg.episode_seconds / step_dt), perf)
        self.robot: RobotModel = load_robot(cfg.robot or None)
        self.physics, self.decimation = make_physics(cfg.backend, self.robot, num_envs, self.device, cfg.sim_dt,
                                                     cfg.decimation)
        self.real_physics = not isinstance(self.physics, TorchPDPhysics)
        """The robot moves by itself under gravity and contacts (the root does not follow the reference)."""
        robot, device = self.robot, self.device
        self.push_scale = torch.tensor(cfg.push_root_velocity, device=device)
        self.tracked_ids = robot.body_index(TRACKED_BODIES).to(device)
        self.end_effector_ids = torch.tensor([TRACKED_BODIES.index(b) for b in END_EFFECTORS], device=device)
        self.keypoint_ids = torch.tensor([TRACKED_BODIES.index(b) for b in KEYPOINTS], device=device)
        self.default_joint_pos = torch.tensor([DEFAULT_POSE.get(j, 0.0) for j in robot.joint_names], device=device)
        self.down = torch.tensor([0.0, 0.0, -1.0], device=device).expand(num_envs, 3)
        """Gravity's direction in the world frame, one row per env."""
        lower, upper = robot.joint_lower.to(device), robot.joint_upper.to(device)
        mid, half = (lower + upper) / 2, (upper - lower) / 2
        self.soft_lower, self.soft_upper = mid - 0.9 * half, mid + 0.9 * half
        stiffness = self.physics.stiffness
        self.action = JointPositionAction(self.physics, self.default_joint_pos,
                                          0.25 * self.physics.effort_limit / stiffness)
        self.action_spec = ActionSpec("continuous", len(robot.joint_names))
        # reference bodies come from this robot's kinematics applied to each clip's root and joints: clips made
        # with another revision of the robot stay consistent, and clip files' body velocities are not trusted
        motions = load_motions(cfg.motions or None, robot, TRACKED_BODIES, device, control_dt=step_dt,
                               recompute_bodies=True)
        sampler = AdaptiveSampler(motions.clip_length, num_envs, self.generator)
        self.command = MotionCommand(self, motions, sampler)
        self.update_kinematics()
        self.build_managers(self._observation_groups(), self._rewards(), self._terminations(), self._events())

    def update_kinematics(self) -> None:
        super().update_kinematics()
        self.body_pos = self.physics.body_pos_w[:, self.tracked_ids]
        """Tracked bodies' world positions [num_envs, bodies, 3] (gathered once per kinematics update)."""
        self.body_quat = self.physics.body_quat_w[:, self.tracked_ids]

    def _observation_groups(self) -> dict[str, ObsGroup]:
        cfg, h = self.cfg, self.cfg.history
        proprioception = {
            "projected_gravity": ObsTerm(projected_gravity, noise=0.05, history=h),
            "base_ang_vel": ObsTerm(base_ang_vel, noise=0.2, history=h),
            "joint_pos": ObsTerm(joint_pos_rel, noise=0.01, history=h),
            "joint_vel": ObsTerm(joint_vel_rel, noise=0.5, history=h),
            "actions": ObsTerm(last_action, history=h),
        }
        groups = {
            "policy": ObsGroup({"command": ObsTerm(command_frames(cfg.policy_command_frames)),
                                "motion_anchor_ori_b": ObsTerm(motion_anchor_ori_b, noise=0.05),
                                **proprioception}, noise=True),
            "critic": ObsGroup({
                "command": ObsTerm(command_frames(cfg.critic_command_frames)),
                "motion_anchor_pos_b": ObsTerm(motion_anchor_pos_b),
                "motion_anchor_ori_b": ObsTerm(motion_anchor_ori_b),
                "body_pos": ObsTerm(robot_body_pos_b),
                "body_ori": ObsTerm(robot_body_ori_b),
                "base_lin_vel": ObsTerm(base_lin_vel),
                "base_ang_vel": ObsTerm(base_ang_vel),
                "projected_gravity": ObsTerm(projected_gravity),
                "joint_pos": ObsTerm(joint_pos_rel),
                "joint_vel": ObsTerm(joint_vel_rel),
                "actions": ObsTerm(last_action),
            }),
            "tokenizer": ObsGroup({
                "encoder_index": ObsTerm(encoder_index),
                "future_joint_pos": ObsTerm(future_field("joint_pos", cfg.tokenizer_frames)),
                "future_joint_vel": ObsTerm(future_field("joint_vel", cfg.tokenizer_frames)),
                "future_keypoints": ObsTerm(future_keypoints(cfg.tokenizer_frames)),
            }, concatenate=False),
        }
        unknown = set(cfg.observation_groups) - set(groups)
        if unknown:
            raise ValueError(f"g1-track: unknown observation group(s) {sorted(unknown)}; have {sorted(groups)}")
        return {name: groups[name] for name in cfg.observation_groups}

    def _rewards(self) -> dict[str, RewardTerm]:
        contacts = {"undesired_contacts": RewardTerm(undesired_contacts, -0.1)}
        return {
            "anchor_pos": RewardTerm(anchor_position(0.3), 0.5),
            "anchor_ori": RewardTerm(anchor_orientation(0.4), 0.5),
            "body_pos": RewardTerm(body_position(0.3), 1.0),
            "body_ori": RewardTerm(body_orientation(0.4), 1.0),
            "body_lin_vel": RewardTerm(body_velocity("lin", 1.0), 1.0),
            "body_ang_vel": RewardTerm(body_velocity("ang", 3.14), 1.0),
            "action_rate": RewardTerm(action_rate, -0.1),
            "joint_limits": RewardTerm(joint_limits, -10.0),
            **(contacts if self.physics.other_contacts is not None else {}),
        }

    def _terminations(self) -> dict[str, TerminationTerm]:
        return {
            "time_out": TerminationTerm(time_out, time_out=True),
            "clip_end": TerminationTerm(clip_end, time_out=True),
            "anchor_height": TerminationTerm(anchor_height(0.25)),
            "anchor_tilt": TerminationTerm(anchor_tilt(0.8)),
            "end_effector_height": TerminationTerm(end_effector_height(0.25)),
        }

    def _events(self) -> dict[str, EventTerm]:
        if self.real_physics:
            return {
                "reset_joint_noise": EventTerm(uniform_per_joint, reset_joint_noise, "reset"),
                "randomize_model": EventTerm(uniform_model_variant, randomize_model, "reset"),
                "push_root": EventTerm(uniform_root_velocity, push_root, "interval", self.cfg.push_interval_s),
            }
        return {
            "reset_joint_noise": EventTerm(uniform_per_joint, reset_joint_noise, "reset"),
            "push_joints": EventTerm(uniform_per_joint, push_joints, "interval", self.cfg.push_interval_s),
        }

    # -- hooks ------------------------------------------------------------------------------------------

    def before_physics(self) -> None:
        if self.real_physics:
            return
        m, frame = self.command.motions, self.command.frame
        self.physics.follow_root(m.root_pos[frame], m.root_quat[frame], m.root_lin_vel[frame], m.root_ang_vel[frame])

    def after_rewards(self, terminated: Tensor) -> None:
        self.command.sampler.record(self.command.clip_ids, self.command.time_steps, terminated)

    def after_step(self) -> None:
        if self.perf.sampling_diagnostics:
            self.log.add_host(self.command.sampler.diagnostics())

    def end_iteration(self, reduce: Callable[[Tensor], Tensor] | None = None) -> None:
        self.command.sampler.update_probabilities(reduce)


def make_g1_track(num_envs: int, device: torch.device | str = "cpu", seed: int = 0, max_episode_length: int = 0,
                  robot: str = "", motions: list[str] | None = None, backend: str = "", tokenizer: bool = False,
                  perf: PerfConfig | None = None) -> G1TrackEnv:
    if backend not in ("", *BACKENDS):
        raise UserError(f"env.backend={backend!r} is not available; allowed: {', '.join(BACKENDS)}")
    groups = ("policy", "critic", "tokenizer") if tokenizer else ("policy", "critic")
    cfg = G1TrackConfig(robot=robot, motions=[str(Path(m)) for m in motions or []], observation_groups=groups,
                        backend=backend or "torch")
    return G1TrackEnv(num_envs, device, seed, max_episode_length, cfg, perf)
