"""Robot descriptions: MJCF loading into torch kinematic trees, and batched forward kinematics."""

from syncfree.envs.robots.kinematics import Kinematics
from syncfree.envs.robots.mjcf import RobotModel, default_robot_path, load_robot

__all__ = ["Kinematics", "RobotModel", "default_robot_path", "load_robot"]
