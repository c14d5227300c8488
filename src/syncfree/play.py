"""`syncfree play`: a checkpoint's deterministic policy acting in one env, drawn frame by frame into a video.

Each task draws itself (its spec's renderer: `syncfree.envs.render`). A recurrent policy carries its state from
step to step, zeroed where an episode ends. Frames go to an MP4 (through imageio's ffmpeg) or a GIF.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch
from PIL import Image

from syncfree.core.imports import user_names
from syncfree.core.memory import available_memory
from syncfree.envs import VecEnv
from syncfree.errors import UserError, allocating
from syncfree.outputs import check_output_file
from syncfree.policy.deploy import restart
from syncfree.tasks.spec import Drawer

VIDEO_SUFFIXES = (".mp4", ".gif")


class Actor(Protocol):
    """What play asks of a policy (every policy answers): its actor's input, and its deterministic action one step
    on from the state it carries (none for a feed-forward policy)."""

    def actor_input(self, obs: dict[str, torch.Tensor]) -> torch.Tensor: ...
    def initial_actor_state(self, batch: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]: ...
    def act_carrying(self, actor_obs: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[
        torch.Tensor, tuple[torch.Tensor, ...]]: ...


def play(policy: Actor, env: VecEnv, steps: int, draw: Drawer,
         progress: Callable[[int], object] | None = None) -> Iterator[np.ndarray]:
    """The frames of `steps` env steps under the policy's deterministic action (the first frame: after reset), each
    drawn when the reader asks for it (an MP4 writer keeps none of them). The policy's state is carried from step to
    step and zeroed where an episode ends."""
    with torch.inference_mode():
        obs = env.reset()
        state = policy.initial_actor_state(env.num_envs, env.device)
        frame = draw()
    yield frame
    for _ in range(steps):
        with torch.inference_mode():
            actions, state = policy.act_carrying(policy.actor_input(obs), state)
            step = env.step(actions)
            obs, state = step.obs, restart(state, step.terminated | step.truncated)
            frame = draw()
        if progress is not None:
            progress(1)
        yield frame


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


def write_video(frames: Iterable[np.ndarray], path: Path, fps: float) -> tuple[int, tuple[int, int]]:
    """Write `frames` to `path` (`.mp4` or `.gif`, by its suffix), atomically (a temporary file, then a rename):
    an MP4 frame by frame as they come, a GIF once all are there (its palette is chosen from frames across the
    video). Returns the number of frames and their (width, height)."""
    suffix = check_video_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{suffix}")
    count, size = 0, (0, 0)
    try:
        if suffix == ".gif":
            kept = list(frames)
            images = gif_frames(kept)
            count, size = len(kept), images[0].size
            images[0].save(tmp, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0,
                           optimize=True)
        else:
            imageio = mp4_writer_module()
            with imageio.get_writer(tmp, fps=fps, codec="libx264", macro_block_size=1, pixelformat="yuv420p",
                                    ffmpeg_log_level="error") as writer:
                for frame in frames:
                    writer.append_data(frame)
                    count, size = count + 1, (frame.shape[1], frame.shape[0])
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return count, size


def mp4_writer_module() -> Any:
    """`imageio.v2`, which writes MP4 through its ffmpeg; one line naming what to install where it is missing."""
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise UserError("--video: writing MP4 needs imageio and its ffmpeg (pip install 'syncfree[play]'); "
                        "a .gif needs nothing more") from None
    return cast(Any, imageio)


GIF_COLORS = 128


def gif_frames(frames: list[np.ndarray], samples: int = 4) -> list[Image.Image]:
    """The frames in one palette of `GIF_COLORS` colours, chosen from a few frames across the video, without
    dithering: a palette per frame with dithering noise compresses about 3x worse, and flickers."""
    picked = [frames[i] for i in np.linspace(0, len(frames) - 1, min(samples, len(frames))).round().astype(int)]
    palette = Image.fromarray(np.concatenate(picked, axis=0)).quantize(
        colors=GIF_COLORS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    return [Image.fromarray(frame).quantize(palette=palette, dither=Image.Dither.NONE) for frame in frames]


FRAMES_MEMORY = "lower --steps or --width/--height, or write an .mp4 (a .gif keeps every frame until it is written)"


def check_frames_fit(steps: int, width: int, height: int) -> None:
    """A GIF holds every RGB frame until it is written: one line, before anything is built or drawn, when they would
    not fit in the memory free now."""
    needed, free = (steps + 1) * width * height * 3, available_memory()
    if free is not None and needed > free:
        raise UserError(f"play: --steps {steps} at {width}x{height} keeps {needed / 2**30:.1f} GiB of frames until the "
                        f"GIF is written, more than the {free / 2**30:.1f} GiB of memory free; {FRAMES_MEMORY}")


def record(checkpoint: str | Path, video: Path, steps: int, fps: float, width: int, height: int,
           device: str = "cpu", seed: int = 12345) -> str:
    """`syncfree play`: the checkpoint's policy acting in one env of its task for `steps` steps, drawn by the task's
    renderer into `video` (`fps` 0: real time); returns the line that says what was written."""
    from tqdm import tqdm

    from syncfree.train.evaluate import load_policy

    check_output_file(video, "--video")  # before anything is built
    if check_video_path(video) == ".gif":  # an MP4 is written frame by frame; a GIF keeps them all
        check_frames_fit(steps, width, height)
    else:
        mp4_writer_module()
    loaded = load_policy(checkpoint, device)
    task = loaded.task
    if task is None or task.render is None:
        why = task.cannot_render if task is not None else "it is not a registered task"
        raise UserError(f"play: {loaded.cfg.task} cannot be drawn ({why})")
    with user_names(loaded.names):  # the code the checkpoint's task names, only if the user named it
        env, draw = task.render(loaded.cfg, loaded.device, seed, width, height)
    try:
        loaded.check_env(env)
        fps = fps or real_time_fps(env)
        with tqdm(total=steps, desc="play", unit="step", disable=not sys.stderr.isatty()) as bar, \
                allocating(FRAMES_MEMORY):
            frames = play(cast(Actor, loaded.policy), env, steps, draw, bar.update)
            count, (frame_width, frame_height) = write_video(frames, video, fps)
    finally:
        close = getattr(draw, "close", None)
        if close is not None:
            close()
        env.close()
    return (f"wrote {video} ({count} frames, {frame_width}x{frame_height}, {fps:g} fps; {loaded.cfg.task}, "
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
