"""`syncfree play`: a checkpoint's deterministic policy acting in one env, drawn frame by frame into a video.

Each task draws itself (its spec's renderer: `syncfree.envs.render`). Frames go to an MP4 (through imageio's
ffmpeg) or a GIF.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from PIL import Image

from syncfree.envs import VecEnv
from syncfree.errors import UserError, allocating
from syncfree.outputs import check_output_file
from syncfree.policy.actor_critic import PolicyBase
from syncfree.tasks.spec import Drawer

VIDEO_SUFFIXES = (".mp4", ".gif")


@torch.inference_mode()
def play(policy: PolicyBase, env: VecEnv, steps: int, draw: Drawer,
         progress: Callable[[int], object] | None = None) -> list[np.ndarray]:
    """The frames of `steps` env steps under the policy's deterministic action (the first frame: after reset)."""
    obs = env.reset()
    frames = [draw()]
    for _ in range(steps):
        obs = env.step(policy.act_deterministic(policy.actor_input(obs))).obs
        frames.append(draw())
        if progress is not None:
            progress(1)
    return frames


def real_time_fps(env: VecEnv) -> float:
    """Frames per second that play one env step per frame in real time: the env's control step (`step_dt`; the
    classic tasks' `dt` or `tau`), a Gymnasium env's `render_fps`; else 30."""
    for name in ("step_dt", "dt", "tau"):
        dt = getattr(env, name, None)
        if isinstance(dt, int | float) and dt > 0:
            return 1.0 / dt
    vector_env = getattr(env, "vector_env", None)
    fps = (getattr(vector_env, "metadata", None) or {}).get("render_fps")
    return float(fps) if fps else 30.0


def check_video_path(path: Path) -> str:
    """The video format `path` names by its suffix (`.mp4` or `.gif`); a UserError for any other."""
    suffix = path.suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        raise UserError(f"--video {path}: unknown format {suffix or '(no suffix)'!r}; allowed: "
                        f"{', '.join(VIDEO_SUFFIXES)}")
    return suffix


def write_video(frames: list[np.ndarray], path: Path, fps: float) -> Path:
    """Write `frames` to `path` (`.mp4` or `.gif`, by its suffix), atomically (a temporary file, then a rename)."""
    suffix = check_video_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{suffix}")
    try:
        if suffix == ".gif":
            images = gif_frames(frames)
            images[0].save(tmp, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0,
                           optimize=True)
        else:
            try:
                import imageio.v2 as imageio
            except ImportError:
                raise UserError("--video: writing MP4 needs imageio and its ffmpeg (pip install 'syncfree[play]'); "
                                "a .gif needs nothing more") from None
            with cast(Any, imageio).get_writer(tmp, fps=fps, codec="libx264", macro_block_size=1, pixelformat="yuv420p",
                                    ffmpeg_log_level="error") as writer:
                for frame in frames:
                    writer.append_data(frame)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


GIF_COLORS = 128


def gif_frames(frames: list[np.ndarray], samples: int = 4) -> list[Image.Image]:
    """The frames in one palette of `GIF_COLORS` colours, chosen from a few frames across the video, without
    dithering: a palette per frame with dithering noise compresses about 3x worse, and flickers."""
    picked = [frames[i] for i in np.linspace(0, len(frames) - 1, min(samples, len(frames))).round().astype(int)]
    palette = Image.fromarray(np.concatenate(picked, axis=0)).quantize(
        colors=GIF_COLORS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    return [Image.fromarray(frame).quantize(palette=palette, dither=Image.Dither.NONE) for frame in frames]


FRAMES_MEMORY = "lower --steps or --width/--height (play keeps every frame until it writes the video)"


def available_memory() -> int | None:
    """Bytes of physical memory free now (None where the system does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def check_frames_fit(steps: int, width: int, height: int) -> None:
    """`play` holds every RGB frame until it writes the video: one line, before anything is built or drawn, when they
    would not fit in the memory free now."""
    needed, free = (steps + 1) * width * height * 3, available_memory()
    if free is not None and needed > free:
        raise UserError(f"play: --steps {steps} at {width}x{height} keeps {needed / 2**30:.1f} GiB of frames until the "
                        f"video is written, more than the {free / 2**30:.1f} GiB of memory free; {FRAMES_MEMORY}")


def record(checkpoint: str | Path, video: Path, steps: int, fps: float, width: int, height: int,
           device: str = "cpu", seed: int = 12345) -> str:
    """`syncfree play`: the checkpoint's policy acting in one env of its task for `steps` steps, drawn by the task's
    renderer into `video` (`fps` 0: real time); returns the line that says what was written."""
    from tqdm import tqdm

    from syncfree.train.evaluate import load_policy

    check_output_file(video, "--video")  # before anything is built
    check_video_path(video)
    check_frames_fit(steps, width, height)
    loaded = load_policy(checkpoint, device)
    task = loaded.task
    if not isinstance(loaded.policy, PolicyBase):
        raise UserError(f"play: {loaded.cfg.task}: its {type(loaded.policy).__name__} acts with a state `play` does not "
                        "carry; `syncfree eval` measures its return")
    if task is None or task.render is None:
        why = task.cannot_render if task is not None else "it is not a registered task"
        raise UserError(f"play: {loaded.cfg.task} cannot be drawn ({why})")
    env, draw = task.render(loaded.cfg, loaded.device, seed, width, height)
    try:
        fps = fps or real_time_fps(env)
        with tqdm(total=steps, desc="play", unit="step", disable=not sys.stderr.isatty()) as bar, \
                allocating(FRAMES_MEMORY):
            frames = play(loaded.policy, env, steps, draw, lambda n: bar.update(n))
    finally:
        close = getattr(draw, "close", None)
        if close is not None:
            close()
        env.close()
    write_video(frames, video, fps)
    frame_height, frame_width = frames[0].shape[:2]
    return (f"wrote {video} ({len(frames)} frames, {frame_width}x{frame_height}, {fps:g} fps; {loaded.cfg.task}, "
            f"checkpoint at iteration {loaded.iteration})")


DESCRIPTION = ("Record a checkpoint's deterministic policy acting in one env as a video, drawn by the task (g1-track by "
               "MuJoCo: the policy's robot beside its translucent reference, headless through EGL or OSMesa; Gymnasium "
               "envs by their own renderer; the classic tasks as 2-D drawings).")


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """`syncfree play`'s options on `parser` (which takes the checkpoint and `--device`), parsed and checked."""
    parser.add_argument("--video", type=Path, default=None,
                        help="output file, .mp4 or .gif (default: play.mp4 beside the checkpoint)")
    parser.add_argument("--steps", type=int, default=300, help="env steps to record (default 300)")
    parser.add_argument("--fps", type=float, default=0.0,
                        help="frames per second (default: real time for the env's control step, else 30)")
    parser.add_argument("--width", type=int, default=640, help="frame width in pixels (default 640)")
    parser.add_argument("--height", type=int, default=480, help="frame height in pixels (default 480)")
    parser.add_argument("--seed", type=int, default=12345, help="environment seed (default 12345)")
    args = parser.parse_args(argv)
    for name, low in (("steps", 1), ("width", 16), ("height", 16)):
        if getattr(args, name) < low:
            raise UserError(f"--{name}={getattr(args, name)} is invalid; allowed: an integer >= {low}")
    return args
