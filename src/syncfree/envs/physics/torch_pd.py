"""Fast, device-agnostic physics: PD-driven joints integrated in torch, the root driven along a reference.

Each joint is a PD-actuated rotor with the diagonal joint-space inertia of the robot at its reference pose
(MuJoCo's `dof_M0`, armature included). The PD law is integrated implicitly (stable at any gain), the joint
torque is clipped to the actuator's effort limit, positions stop at the joint limits. There are no contacts
and no gravity: the root follows the reference motion, so this backend trains joint-space tracking, not
balance. Body poses come from forward kinematics.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from syncfree.envs.physics.base import Physics
from syncfree.envs.robots import Kinematics, RobotModel
from syncfree.errors import UserError


def pd_gains(robot: RobotModel, natural_freq_hz: float = 10.0, damping_ratio: float = 2.0) -> tuple[Tensor, Tensor]:
    """Stiffness and damping from each joint's armature (its rotor inertia), as Isaac Lab G1 tracking configs set
    them. A joint without armature (MuJoCo's default) is tuned on its joint-space inertia at the reference pose
    instead (`dof_M0`: the links it moves), so that it is driven at the same natural frequency; a joint with
    neither cannot be driven and is refused by name."""
    reflected = gain_inertia(robot)
    omega = 2.0 * math.pi * natural_freq_hz
    return reflected * omega**2, 2.0 * damping_ratio * reflected * omega


def gain_inertia(robot: RobotModel) -> Tensor:
    """(J,) the inertia each joint's PD gains are tuned on: its armature, or without one its `dof_M0`."""
    inertia = torch.where(robot.armature > 0, robot.armature, robot.joint_inertia)
    massless = (~(inertia > 0)).nonzero().flatten().tolist()
    if massless:
        raise UserError(f"{robot.path}: joint {robot.joint_names[massless[0]]!r} moves no mass and has no armature "
                        "(its joint-space inertia is 0); give it an armature or its bodies an inertial")
    return inertia


class TorchPDPhysics(Physics):
    def __init__(self, robot: RobotModel, num_envs: int, device: torch.device, sim_dt: float = 0.005) -> None:
        self.robot, self.num_envs, self.device, self.sim_dt = robot, num_envs, device, sim_dt
        self.kinematics = Kinematics(robot, device)
        joints = len(robot.joint_names)
        stiffness, damping = pd_gains(robot)
        self.stiffness, self.damping = stiffness.to(device), damping.to(device)
        self.inertia = robot.joint_inertia.to(device)
        self.effort_limit = robot.effort_limit.to(device)
        self.lower, self.upper = robot.joint_lower.to(device), robot.joint_upper.to(device)

        def zeros(*shape: int) -> Tensor:
            return torch.zeros(num_envs, *shape, device=device)

        self.joint_pos, self.joint_vel, self.targets = zeros(joints), zeros(joints), zeros(joints)
        self.root_pos, self.root_lin_vel, self.root_ang_vel = zeros(3), zeros(3), zeros(3)
        self.root_quat = zeros(4)
        self.root_quat[:, 0] = 1.0
        self.root_pos[:, 2] = robot.root_height
        self.update_kinematics()

    def set_joint_targets(self, targets: Tensor) -> None:
        self.targets.copy_(targets)

    def step(self) -> None:
        dt, q, v = self.sim_dt, self.joint_pos, self.joint_vel
        # implicit PD: (I + dt·kd + dt²·kp) v' = I·v + dt·kp·(target − q)
        lhs = self.inertia + dt * self.damping + dt * dt * self.stiffness
        v_implicit = (self.inertia * v + dt * self.stiffness * (self.targets - q)) / lhs
        torque = (self.inertia * (v_implicit - v) / dt).clamp(-self.effort_limit, self.effort_limit)
        v.add_(torque * dt / self.inertia)
        q.add_(v * dt)
        below, above = q < self.lower, q > self.upper
        q.copy_(torch.maximum(torch.minimum(q, self.upper), self.lower))
        v.masked_fill_((below & (v < 0)) | (above & (v > 0)), 0.0)

    def follow_root(self, root_pos: Tensor, root_quat: Tensor, root_lin_vel: Tensor, root_ang_vel: Tensor) -> None:
        self.root_pos.copy_(root_pos)
        self.root_quat.copy_(root_quat)
        self.root_lin_vel.copy_(root_lin_vel)
        self.root_ang_vel.copy_(root_ang_vel)

    _STATE = ("joint_pos", "joint_vel", "targets", "root_pos", "root_quat", "root_lin_vel", "root_ang_vel")

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).clone() for name in self._STATE}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self._STATE:
            getattr(self, name).copy_(state[name])
        self.update_kinematics()
