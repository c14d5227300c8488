"""g1-track, laid out by part: `config` (settings), `command` (the motion command), `terms` (observation, reward,
termination and event functions), `env` (the env that declares its term tables)."""

from syncfree.envs.builtin.g1_track.config import DEFAULT_POSE, TRACKED_BODIES, G1TrackConfig, G1TrackOptions
from syncfree.envs.builtin.g1_track.env import G1TrackEnv, make_g1_track

__all__ = ["DEFAULT_POSE", "TRACKED_BODIES", "G1TrackConfig", "G1TrackEnv", "G1TrackOptions", "make_g1_track"]
