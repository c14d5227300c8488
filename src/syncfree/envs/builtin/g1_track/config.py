"""g1-track's settings: the tracked bodies, the default pose, the options users tune (`G1TrackOptions`) and
the env's whole config (`G1TrackConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from syncfree.envs.physics.factory import BACKENDS
from syncfree.errors import check

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
class G1TrackOptions:
    """g1-track's settings that whole-body tracking pipelines tune: its task's `env` section, beside `num_envs` and
    `max_episode_length`."""

    robot: str = ""
    """MJCF file of the robot; empty: the G1 29-DoF description shipped with syncfree."""
    motions: list[str] = field(default_factory=list)
    """Motion clips (.npz files or folders of them); empty: syncfree's generated clip set."""
    backend: Literal["torch", "mujoco", "mujoco-warp"] = "torch"
    """Physics: `torch` (PD joints, root driven along the reference; no contacts), `mujoco` (MuJoCo on the CPU, real
    contacts) or `mujoco-warp` (MuJoCo Warp on the env's device: a GPU; Warp's CPU device works but is slow)."""
    history: int = 10
    """Steps of history of the policy's proprioceptive terms (gravity, angular velocity, joint positions and
    velocities, last actions)."""
    num_encoders: int = 2
    """Encoder types drawn per episode for a token-encoder policy (0: joints, 1: keypoints): 1 or 2, at most the
    number of `policy.token.encoders`."""
    tokenizer_frames: list[int] = field(default_factory=lambda: list(range(1, 11)))
    """Future reference frames (offsets >= 1 from the current target) in the token policy's encoder inputs."""
    sampler_bin_frames: int = 50
    """Adaptive start sampling: frames per bin of a clip."""
    sampler_uniform_ratio: float = 0.1
    """Share of the sampling probability kept uniform over clips (every clip weighs the same), in [0, 1]."""
    sampler_cap: float = 5.0
    """A bin's failure rate counts up to this multiple of the mean rate (> 0)."""
    sampler_decay: float = 0.9
    """Per-iteration decay of the bins' visit and failure counts, in [0, 1)."""

    def validate(self, max_encoders: int = 2) -> None:
        """One line naming the first bad option (`max_encoders`: the token policy's encoder count)."""
        check(self.backend in BACKENDS, "env.backend", ", ".join(BACKENDS), self.backend)
        check(self.history >= 1, "env.history", "an integer >= 1", self.history)
        check(1 <= self.num_encoders <= min(2, max_encoders), "env.num_encoders",
              f"1 or 2, at most the {max_encoders} policy.token.encoders", self.num_encoders)
        check(len(self.tokenizer_frames) > 0 and all(f >= 1 for f in self.tokenizer_frames), "env.tokenizer_frames",
              "a non-empty list of frame offsets >= 1", self.tokenizer_frames)
        check(self.sampler_bin_frames >= 1, "env.sampler_bin_frames", "an integer >= 1", self.sampler_bin_frames)
        check(0 <= self.sampler_uniform_ratio <= 1, "env.sampler_uniform_ratio", "a number in [0, 1]",
              self.sampler_uniform_ratio)
        check(self.sampler_cap > 0, "env.sampler_cap", "a number > 0", self.sampler_cap)
        check(0 <= self.sampler_decay < 1, "env.sampler_decay", "a number in [0, 1)", self.sampler_decay)

    def sampler(self) -> dict[str, float]:
        """Keyword arguments of the adaptive sampler (`syncfree.envs.motion.sampler.AdaptiveSampler`)."""
        return {"bin_frames": self.sampler_bin_frames, "uniform_ratio": self.sampler_uniform_ratio,
                "cap": self.sampler_cap, "decay": self.sampler_decay}


@dataclass
class G1TrackConfig(G1TrackOptions):
    """The env's settings: the options users tune, and the fixed ones of the task."""

    episode_seconds: float = 10.0
    sim_dt: float = 0.005
    decimation: int = 4
    anchor_body: str = "torso_link"
    policy_command_frames: tuple[int, ...] = (0, 1, 4)
    """Reference frames (offsets from the current target frame) in the policy's command."""
    critic_command_frames: tuple[int, ...] = (0, 1, 4, 10, 20)
    observation_groups: tuple[str, ...] = ("policy", "critic")
    """Groups computed each step (add `tokenizer` for token-encoder policies)."""
    reset_joint_noise: float = 0.1
    push_joint_velocity: float = 0.5
    """Torch backend: the largest joint-velocity kick of a push (rad/s)."""
    push_root_velocity: tuple[float, ...] = (0.5, 0.5, 0.2, 0.52, 0.52, 0.78)
    """Real-physics backends: the largest root velocity change of a push, per component (x, y, z m/s;
    roll, pitch, yaw rad/s, world frame)."""
    push_interval_s: tuple[float, float] = (1.0, 3.0)
