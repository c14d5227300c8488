from syncfree.envs.physics.base import Physics
from syncfree.envs.physics.mujoco import MujocoPhysics
from syncfree.envs.physics.mujoco_warp import MujocoWarpPhysics
from syncfree.envs.physics.torch_pd import TorchPDPhysics

__all__ = ["MujocoPhysics", "MujocoWarpPhysics", "Physics", "TorchPDPhysics"]
