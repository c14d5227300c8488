"""g1-track's settings: the tracked bodies, the default pose, and `G1TrackConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    sampler: dict[str, float] = field(default_factory=dict)
    """Keyword arguments of the adaptive sampler (`bin_frames`, `uniform_ratio`, `cap`, `decay`); empty: its
    defaults."""
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
