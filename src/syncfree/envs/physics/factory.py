"""The physics backend an env asks for by name."""

from __future__ import annotations

import torch

from syncfree.envs.physics.base import Physics
from syncfree.envs.physics.mujoco import MujocoPhysics
from syncfree.envs.physics.mujoco_warp import MujocoWarpPhysics
from syncfree.envs.physics.torch_pd import TorchPDPhysics
from syncfree.envs.robots import RobotModel
from syncfree.errors import UserError

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
