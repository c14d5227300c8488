"""g1-track: a Unitree G1 (29 joints) tracks reference whole-body motions.

The task is declared as term tables (observations, rewards, terminations, events) over a motion command
that starts episodes where the adaptive sampler says the policy fails. Physics sits behind
`syncfree.envs.physics.Physics`: the default backend is the torch PD backend (no contacts, root driven along
the reference); `mujoco` and `mujoco-warp` simulate the whole robot with gravity and floor contacts, so the
root moves by itself, falls end episodes, pushes act on the root, friction and torso mass are randomized per
episode and contact terms join the reward.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor

from syncfree.core.switches import PerfConfig
from syncfree.envs.api import ActionSpec
from syncfree.envs.builtin.g1_track.command import MotionCommand
from syncfree.envs.builtin.g1_track.config import (
    DEFAULT_POSE,
    END_EFFECTORS,
    KEYPOINTS,
    TRACKED_BODIES,
    G1TrackConfig,
    G1TrackOptions,
)
from syncfree.envs.builtin.g1_track.mirror import g1_track_reflection
from syncfree.envs.builtin.g1_track.terms import (
    action_rate,
    anchor_height,
    anchor_orientation,
    anchor_position,
    anchor_tilt,
    base_ang_vel,
    base_lin_vel,
    body_orientation,
    body_position,
    body_velocity,
    clip_end,
    command_frames,
    encoder_index,
    end_effector_height,
    future_field,
    future_keypoints,
    joint_limits,
    joint_pos_rel,
    joint_vel_rel,
    last_action,
    motion_anchor_ori_b,
    motion_anchor_pos_b,
    projected_gravity,
    push_joints,
    push_root,
    randomize_model,
    reset_joint_noise,
    robot_body_ori_b,
    robot_body_pos_b,
    time_out,
    undesired_contacts,
    uniform_model_variant,
    uniform_per_joint,
    uniform_root_velocity,
)
from syncfree.envs.managers.env import JointPositionAction, ManagerBasedEnv, joint_limit_bounds
from syncfree.envs.managers.events import EventTerm
from syncfree.envs.managers.observations import ObsGroup, ObsTerm
from syncfree.envs.managers.rewards import RewardTerm, TerminationTerm
from syncfree.envs.mirror import Reflection
from syncfree.envs.motion.library import load_motions
from syncfree.envs.motion.sampler import AdaptiveSampler
from syncfree.envs.physics import MujocoPhysics, TorchPDPhysics
from syncfree.envs.physics.factory import make_physics
from syncfree.envs.robots import RobotModel, load_robot

if TYPE_CHECKING:
    from syncfree.envs.physics.mujoco import MujocoScene


def soft_limits(lower: Tensor, upper: Tensor, fraction: float = 0.9) -> tuple[Tensor, Tensor]:
    """The middle `fraction` of each joint's range; an unlimited joint (infinite bounds) stays unlimited."""
    limited = torch.isfinite(lower) & torch.isfinite(upper)
    mid = torch.where(limited, (lower + upper) / 2, 0.0)
    half = torch.where(limited, fraction * (upper - lower) / 2, math.inf)
    return torch.where(limited, mid - half, lower), torch.where(limited, mid + half, upper)


class G1TrackEnv(ManagerBasedEnv):
    command: MotionCommand

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
        self.host_threads = isinstance(self.physics, MujocoPhysics)
        robot, device = self.robot, self.device
        self.push_scale = torch.tensor(cfg.push_root_velocity, device=device)
        self.tracked_ids = robot.body_index(TRACKED_BODIES).to(device)
        self.end_effector_ids = torch.tensor([TRACKED_BODIES.index(b) for b in END_EFFECTORS], device=device)
        self.keypoint_ids = torch.tensor([TRACKED_BODIES.index(b) for b in KEYPOINTS], device=device)
        self.default_joint_pos = torch.tensor([DEFAULT_POSE.get(j, 0.0) for j in robot.joint_names], device=device)
        self.down = torch.tensor([0.0, 0.0, -1.0], device=device).expand(num_envs, 3)
        """Gravity's direction in the world frame, one row per env."""
        self.soft_lower, self.soft_upper = soft_limits(robot.joint_lower.to(device), robot.joint_upper.to(device))
        physics = cast("TorchPDPhysics | MujocoScene", self.physics)  # every backend has PD gains
        stiffness = physics.stiffness
        self.action = JointPositionAction(self.physics, self.default_joint_pos,
                                          0.25 * physics.effort_limit / stiffness)
        self.action_spec = ActionSpec("continuous", len(robot.joint_names))
        self.action_bounds = joint_limit_bounds(robot.joint_lower.to(device), robot.joint_upper.to(device),
                                                self.default_joint_pos, self.action.scale)
        # reference bodies come from this robot's kinematics applied to each clip's root and joints: clips made
        # with another revision of the robot stay consistent, and clip files' body velocities are not trusted
        motions = load_motions(cfg.motions or None, robot, TRACKED_BODIES, device, control_dt=step_dt,
                               recompute_bodies=True)
        sampler = AdaptiveSampler(motions.clip_length, num_envs, self.generator,
                                  **cast("dict[str, Any]", cfg.sampler()))  # `bin_frames` is an int
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
                "future_joint_pos": ObsTerm(future_field("joint_pos", tuple(cfg.tokenizer_frames))),
                "future_joint_vel": ObsTerm(future_field("joint_vel", tuple(cfg.tokenizer_frames))),
                "future_keypoints": ObsTerm(future_keypoints(tuple(cfg.tokenizer_frames))),
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

    def mirror(self) -> Reflection:
        """The left/right reflection (y -> -y) of the `policy` and `critic` groups and of the actions
        (`syncfree.envs.builtin.g1_track.mirror`)."""
        return g1_track_reflection(self)

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
                  options: G1TrackOptions | None = None, tokenizer: bool = False, perf: PerfConfig | None = None,
                  **fields: Any) -> G1TrackEnv:
    """`options`: the settings users tune (None: their defaults), any of them replaced by `fields` (e.g.
    `backend="mujoco"`); `tokenizer`: also compute the token policy's observation group."""
    options = dataclasses.replace(options or G1TrackOptions(), **fields)
    options.validate()
    groups = ("policy", "critic", "tokenizer") if tokenizer else ("policy", "critic")
    cfg = G1TrackConfig(**{f.name: getattr(options, f.name) for f in dataclasses.fields(G1TrackOptions)},
                        observation_groups=groups)
    cfg.motions = [str(Path(m)) for m in cfg.motions]
    return G1TrackEnv(num_envs, device, seed, max_episode_length, cfg, perf)
