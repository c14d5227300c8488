from syncfree.envs.physics.base import Physics
from syncfree.envs.physics.torch_pd import TorchPDPhysics

__all__ = ["Physics", "TorchPDPhysics"]
