"""The small interface between a task and the physics that moves the robot.

A backend owns the robot's state as device tensors, updated in place. Tasks read them, write reset states
through `write_state`, and set joint position targets; they never see how the backend integrates.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from syncfree.envs.managers.select import assign_rows_
from syncfree.envs.robots import Kinematics, RobotModel


class Physics(ABC):
    robot: RobotModel
    num_envs: int
    device: torch.device
    sim_dt: float
    # robot state, [num_envs, ...], world frame, updated in place
    joint_pos: Tensor
    joint_vel: Tensor
    root_pos: Tensor
    root_quat: Tensor
    root_lin_vel: Tensor
    root_ang_vel: Tensor
    body_pos_w: Tensor
    """[num_envs, num_bodies, 3], every body of `robot` in its order."""
    body_quat_w: Tensor
    body_lin_vel_w: Tensor
    body_ang_vel_w: Tensor
    kinematics: Kinematics
    """Body poses and velocities from root and joint state (`update_kinematics`)."""
    lower: Tensor
    upper: Tensor
    """[num_joints] joint position limits."""
    # contacts, for backends that simulate them (None otherwise)
    contact_bodies: tuple[str, ...] = ()
    """Bodies expected to touch the floor (the feet)."""
    contact_forces: Tensor | None = None
    """[num_envs, len(contact_bodies), 3] net force the floor exerts on each contact body, world frame."""
    if TYPE_CHECKING:  # read-only to tasks: a backend may compute it in a property
        @property
        def other_contacts(self) -> Tensor | None:
            """[num_envs] number of floor contacts of robot bodies other than `contact_bodies` (falls, knees,
            hands)."""
    else:
        other_contacts: Tensor | None = None

    @abstractmethod
    def set_joint_targets(self, targets: Tensor) -> None:
        """PD position targets [num_envs, num_joints] for the following `step()` calls."""

    @abstractmethod
    def step(self) -> None:
        """Advance by `sim_dt`."""

    def update_kinematics(self) -> None:
        """Recompute body poses and velocities from the root and joint state (through `kinematics`)."""
        self.body_pos_w, self.body_quat_w = self.kinematics.forward(self.root_pos, self.root_quat, self.joint_pos)
        self.body_lin_vel_w, self.body_ang_vel_w = self.kinematics.velocities(
            self.body_pos_w, self.body_quat_w, self.root_lin_vel, self.root_ang_vel, self.joint_vel)

    def write_state(self, selection: Tensor, root_pos: Tensor, root_quat: Tensor, root_lin_vel: Tensor,
                    root_ang_vel: Tensor, joint_pos: Tensor, joint_vel: Tensor) -> None:
        """Put the selected envs in the given state, joint positions clamped to their limits: `selection` holds
        int64 env ids (one argument row per id) or a bool mask over all envs (one argument row per env)."""
        assign_rows_(self.root_pos, selection, root_pos)
        assign_rows_(self.root_quat, selection, root_quat)
        assign_rows_(self.root_lin_vel, selection, root_lin_vel)
        assign_rows_(self.root_ang_vel, selection, root_ang_vel)
        assign_rows_(self.joint_pos, selection, torch.maximum(torch.minimum(joint_pos, self.upper), self.lower))
        assign_rows_(self.joint_vel, selection, joint_vel)

    def follow_root(self, root_pos: Tensor, root_quat: Tensor, root_lin_vel: Tensor, root_ang_vel: Tensor) -> None:  # noqa: B027
        """Backends without contacts drive the root along a reference; real-physics backends ignore this."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
