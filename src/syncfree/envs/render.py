"""Pictures of envs for `syncfree play`: the classic tasks as 2-D drawings, g1-track with MuJoCo's offscreen renderer
(the policy's robot, and beside it, translucent, the reference pose it tracks; EGL or OSMesa without a display),
Gymnasium envs by their own renderer. A task's spec picks its drawer (`syncfree.tasks`)."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw

from syncfree.errors import UserError

BACKGROUND = (245, 245, 240)
INK = (40, 40, 40)
ACCENT = (200, 80, 40)


def gymnasium_frame(env: Any) -> np.ndarray:
    try:
        frame = env.vector_env.render()
    except NotImplementedError:  # gymnasium.Env's own `render`, not overridden
        envs = getattr(env.vector_env, "envs", None)
        name = type(envs[0].unwrapped).__name__ if envs else "the env"
        raise UserError(f"play: the Gymnasium env cannot be drawn ({name} does not implement render)") from None
    frame = frame[0] if isinstance(frame, tuple | list) else frame
    if frame is None:
        raise UserError("play: the Gymnasium env returned no frame (was it made with render_mode='rgb_array'?)")
    return np.ascontiguousarray(frame[..., :3], dtype=np.uint8)


# -- the classic tasks, in 2-D ----------------------------------------------------------------------------------


def _canvas(width: int, height: int) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", (width, height), BACKGROUND)
    return image, ImageDraw.Draw(image)


def draw_cartpole(state: list[float], width: int, height: int) -> np.ndarray:
    """Cart on a rail (x in [-2.4, 2.4] m) and its pole (1 m, angle from upright)."""
    from syncfree.envs.builtin.classic import CartPole

    x, _, theta, _ = state
    image, draw = _canvas(width, height)
    scale = width / (2 * CartPole.x_threshold + 1.0)
    rail_y = height * 0.7
    draw.line([(0, rail_y), (width, rail_y)], fill=INK, width=2)
    cx = width / 2 + x * scale
    cart_w, cart_h = 0.5 * scale, 0.3 * scale
    draw.rectangle([cx - cart_w / 2, rail_y - cart_h / 2, cx + cart_w / 2, rail_y + cart_h / 2], fill=INK)
    pole = 2 * CartPole.length * scale
    tip = (cx + pole * math.sin(theta), rail_y - pole * math.cos(theta))
    draw.line([(cx, rail_y), tip], fill=ACCENT, width=max(3, round(0.05 * scale)))
    return np.asarray(image)


def draw_pendulum(state: list[float], width: int, height: int) -> np.ndarray:
    """The pendulum's rod from its pivot (angle 0: upright)."""
    theta, _ = state
    image, draw = _canvas(width, height)
    center, length = (width / 2, height / 2), 0.4 * min(width, height)
    tip = (center[0] + length * math.sin(theta), center[1] - length * math.cos(theta))
    draw.line([center, tip], fill=ACCENT, width=max(4, round(0.04 * min(width, height))))
    r = 0.02 * min(width, height)
    draw.ellipse([center[0] - r, center[1] - r, center[0] + r, center[1] + r], fill=INK)
    return np.asarray(image)


def draw_point_mass(state: list[float], width: int, height: int) -> np.ndarray:
    """The point in its 4 m box, the goal (the origin) marked."""
    image, draw, at = _point_mass_box(width, height)
    (cx, cy), r = at(0.0, 0.0), 0.02 * min(width, height)
    draw.line([(cx - 2 * r, cy), (cx + 2 * r, cy)], fill=INK, width=2)
    draw.line([(cx, cy - 2 * r), (cx, cy + 2 * r)], fill=INK, width=2)
    _draw_point(draw, at(state[0], state[1]), 2 * r)
    return np.asarray(image)


def draw_point_mass_goal(state: list[float], width: int, height: int) -> np.ndarray:
    """The point in point-mass-goal's 4 m box, its goal disc marked."""
    from syncfree.envs.builtin.point_mass import PointMassGoal as Goal

    image, draw, at = _point_mass_box(width, height)
    (gx, gy), gr = at(*Goal.goal), Goal.goal_radius * 0.5 * min(width, height) / Goal.box
    draw.ellipse([gx - gr, gy - gr, gx + gr, gy + gr], outline=ACCENT, width=2)
    _draw_point(draw, at(state[0], state[1]), 0.04 * min(width, height))
    return np.asarray(image)


def _point_mass_box(width: int, height: int) -> tuple[Image.Image, ImageDraw.ImageDraw,
                                                      Callable[[float, float], tuple[float, float]]]:
    """A canvas with point-mass's 4 m box drawn, and the pixel of a point (x, y) in metres."""
    from syncfree.envs.builtin.point_mass import PointMass

    image, draw = _canvas(width, height)
    scale = 0.5 * min(width, height) / PointMass.box

    def at(x: float, y: float) -> tuple[float, float]:
        return width / 2 + x * scale, height / 2 - y * scale

    draw.rectangle([*at(-PointMass.box, PointMass.box), *at(PointMass.box, -PointMass.box)], outline=INK, width=2)
    return image, draw, at


def _draw_point(draw: ImageDraw.ImageDraw, p: tuple[float, float], r: float) -> None:
    draw.ellipse([p[0] - r, p[1] - r, p[0] + r, p[1] + r], fill=ACCENT)


def draw_point_mass_maze(state: list[float], width: int, height: int) -> np.ndarray:
    """The point in point-mass-maze's corridor: the outer walls, the wall between the lanes and the goal disc."""
    from syncfree.envs.builtin.point_mass import PointMassMaze as Maze

    x, y, _, _ = state
    image, draw = _canvas(width, height)
    (left, bottom), (right, top) = Maze.low, Maze.high
    margin = 0.1 * min(width, height)
    scale = min((width - 2 * margin) / (right - left), (height - 2 * margin) / (top - bottom))

    def at(px: float, py: float) -> tuple[float, float]:
        return (width / 2 + (px - (left + right) / 2) * scale, height / 2 - (py - (bottom + top) / 2) * scale)

    draw.rectangle([*at(left, top), *at(right, bottom)], outline=INK, width=2)
    draw.line([at(left, Maze.wall_y), at(Maze.wall_end, Maze.wall_y)], fill=INK, width=3)
    (gx, gy), gr = at(*Maze.goal), Maze.goal_radius * scale
    draw.ellipse([gx - gr, gy - gr, gx + gr, gy + gr], outline=ACCENT, width=2)
    _draw_point(draw, at(x, y), 0.03 * min(width, height))
    return np.asarray(image)


# -- g1-track, with MuJoCo --------------------------------------------------------------------------------------


GL_BACKENDS = {"egl": ("headless, on a GPU or through Mesa", "libegl1 libgl1-mesa-dri"),
               "osmesa": ("headless, in software", "libosmesa6"),
               "glfw": ("with a display", "")}
"""The values of `MUJOCO_GL` that MuJoCo renders with here: where each works, and the Debian packages it needs."""


def gl_choices(but: str = "") -> str:
    """The `MUJOCO_GL` values other than `but`, each with what it needs, as a phrase."""
    named = [f"{name} ({where}{f'; Debian: apt-get install {packages}' if packages else ''})"
             for name, (where, packages) in GL_BACKENDS.items() if name != but]
    return ", ".join(named[:-1]) + f" or {named[-1]}" if len(named) > 1 else named[0]


def mujoco_gl_error(error: BaseException) -> UserError:
    """One line for a `MUJOCO_GL` that MuJoCo cannot render with: the value, MuJoCo's reason, and what to do."""
    value = os.environ.get("MUJOCO_GL", "")
    backend = value.strip().lower()
    text = str(error).strip()
    reason = f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
    if backend not in GL_BACKENDS:
        return UserError(f"MUJOCO_GL={value!r} is not an OpenGL backend MuJoCo can render with ({reason}); set "
                         f"MUJOCO_GL to {gl_choices()}, or unset it")
    where, packages = GL_BACKENDS[backend]
    remedy = f"install it (Debian: apt-get install {packages})" if packages else f"it renders only {where}"
    return UserError(f"MUJOCO_GL={value!r}: MuJoCo cannot load its {backend} OpenGL library ({reason}); {remedy}, "
                     f"or set MUJOCO_GL to {gl_choices(backend)}")


@contextlib.contextmanager
def importing_mujoco() -> Iterator[None]:
    """Around `import mujoco`: MuJoCo loads the OpenGL backend `MUJOCO_GL` names as it is imported, and a value it
    does not know or a backend whose library is missing fails that import with a traceback from inside PyOpenGL;
    this makes it one line (`mujoco_gl_error`)."""
    try:
        yield
    except (RuntimeError, AttributeError, OSError) as e:
        if not os.environ.get("MUJOCO_GL", "").strip():
            raise
        raise mujoco_gl_error(e) from None


def gl_backend() -> str:
    """The OpenGL backend play renders with: `MUJOCO_GL` if set (egl, osmesa, glfw), else GLFW with a display and
    EGL without one."""
    return os.environ.get("MUJOCO_GL", "").strip().lower() or ("glfw" if os.environ.get("DISPLAY") else "egl")


def gl_context(width: int, height: int):
    """An OpenGL context for offscreen rendering, through `gl_backend()`."""
    backend = gl_backend()
    if backend == "glfw" and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise UserError(f"MUJOCO_GL='glfw' renders only with a display, and DISPLAY is not set; set MUJOCO_GL to "
                        f"{gl_choices('glfw')}")
    try:
        if backend == "egl":
            from mujoco.egl import GLContext
        elif backend == "osmesa":
            from mujoco.osmesa import GLContext
        elif backend == "glfw":
            from mujoco.glfw import GLContext
        else:
            raise UserError(f"MUJOCO_GL={backend!r} is not a backend play renders with; set MUJOCO_GL to "
                            f"{gl_choices()}")
        context = GLContext(width, height)
    except (ImportError, RuntimeError, AttributeError) as e:
        raise UserError(f"play: no OpenGL context through {backend} ({str(e).strip().splitlines()[0]}); set "
                        f"MUJOCO_GL to {gl_choices()}") from None
    context.make_current()
    return context


ROBOT_RGBA = (0.85, 0.55, 0.3, 1.0)
REFERENCE_RGBA = (0.3, 0.6, 1.0, 0.35)
"""The policy's robot opaque orange, the reference translucent blue."""


class G1Renderer:
    """The policy's robot (env 0) and, `reference_offset` metres to its left, the reference pose it tracks,
    translucent, seen from the side by a camera that follows the robot."""

    def __init__(self, env, width: int, height: int, reference_offset: float = 1.0) -> None:
        import mujoco

        self.env, self.mujoco = env, mujoco
        self.model = mujoco.MjModel.from_xml_path(env.robot.path)
        self.model.vis.global_.offwidth = max(width, self.model.vis.global_.offwidth)
        self.model.vis.global_.offheight = max(height, self.model.vis.global_.offheight)
        self.robot, self.reference = mujoco.MjData(self.model), mujoco.MjData(self.model)
        self.offset = np.array([0.0, reference_offset, 0.0])
        self.context = gl_context(width, height)
        try:
            self.render_context = mujoco.MjrContext(self.model, mujoco.mjtFontScale.mjFONTSCALE_150)
        except mujoco.FatalError as e:  # the backend made no usable context (GLFW without a working display)
            self.context.free()
            raise UserError(f"play: MuJoCo has no OpenGL context through {gl_backend()} ({e}); set MUJOCO_GL to "
                            f"{gl_choices()}") from None
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self.render_context)
        self.scene = mujoco.MjvScene(self.model, maxgeom=4 * self.model.ngeom + 100)
        self.option, self.perturb, self.camera = mujoco.MjvOption(), mujoco.MjvPerturb(), mujoco.MjvCamera()
        self.option.geomgroup[:4] = 1  # the robot's shapes are its collision geoms (group 3)
        self.camera.distance, self.camera.azimuth, self.camera.elevation = 3.2, 150.0, -15.0
        self.viewport = mujoco.MjrRect(0, 0, width, height)
        self.pixels = np.empty((height, width, 3), dtype=np.uint8)

    def pose(self, data, root_pos: torch.Tensor, root_quat: torch.Tensor, joint_pos: torch.Tensor,
             shift: np.ndarray | None = None) -> None:
        qpos = torch.cat((root_pos, root_quat, joint_pos)).double().cpu().numpy()
        if shift is not None:
            qpos[:3] += shift
        data.qpos[:] = qpos
        self.mujoco.mj_kinematics(self.model, data)

    def __call__(self) -> np.ndarray:
        mujoco, env = self.mujoco, self.env
        physics, command = env.physics, env.command
        self.pose(self.robot, physics.root_pos[0], physics.root_quat[0], physics.joint_pos[0])
        frame = command.frame[0]
        motions = command.motions
        self.pose(self.reference, motions.root_pos[frame], motions.root_quat[frame], motions.joint_pos[frame],
                  self.offset)
        self.camera.lookat[:] = self.robot.qpos[:3] + self.offset / 2
        self.camera.lookat[2] = 0.8  # about the pelvis' height: the camera does not bob with the robot
        mujoco.mjv_updateScene(self.model, self.robot, self.option, self.perturb, self.camera,
                               mujoco.mjtCatBit.mjCAT_ALL, self.scene)
        first = self.scene.ngeom
        for i in range(first):
            if self.scene.geoms[i].category == mujoco.mjtCatBit.mjCAT_DYNAMIC:
                self.scene.geoms[i].rgba[:] = ROBOT_RGBA
        mujoco.mjv_addGeoms(self.model, self.reference, self.option, self.perturb, mujoco.mjtCatBit.mjCAT_DYNAMIC,
                            self.scene)
        for i in range(first, self.scene.ngeom):
            self.scene.geoms[i].rgba[:] = REFERENCE_RGBA
        mujoco.mjr_render(self.viewport, self.scene, self.render_context)
        mujoco.mjr_readPixels(self.pixels, None, self.viewport, self.render_context)
        return np.flipud(self.pixels).copy()

    def close(self) -> None:
        self.render_context.free()
        self.context.free()
