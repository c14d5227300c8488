"""Reference motions for tracking tasks: clip files, a generated clip set, and the on-device motion library."""

from syncfree.envs.motion.clips import MotionClip, load_clip, resample_clip, save_clip, with_model_bodies
from syncfree.envs.motion.generate import generate_clips
from syncfree.envs.motion.library import MotionLibrary, holosoma_clip_dir, load_motions, motion_files

__all__ = [
    "MotionClip",
    "MotionLibrary",
    "generate_clips",
    "holosoma_clip_dir",
    "load_clip",
    "load_motions",
    "motion_files",
    "resample_clip",
    "save_clip",
    "with_model_bodies",
]
