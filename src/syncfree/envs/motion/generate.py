"""A small procedural clip set, so a tracking task runs with no motion download.

Each clip is a whole-body motion around a slightly knee-bent standing pose built from smooth sums of sinusoids:

- walk: alternating legs (hip pitch swing, knee flexion in swing, feet kept parallel to the pelvis), opposite arm
  swing, waist counter-rotation, the root moving forward along a slowly turning heading with a little sway;
- squat: knees bending up to about a right angle with the hips and ankles keeping the feet flat, arms forward;
- reach: large arm motions (forward, sideways, elbows) with waist yaw / pitch and a light knee bend;
- twist: waist yaw with arm swing, hip yaw and a small root yaw oscillation.

The root stays mostly upright (a few degrees of pitch / roll). Its height follows the legs: the lower foot is kept
at the height the feet have in the model's zero pose (a soft minimum over the two lowest bodies of that pose);
outside the walk, the root also moves horizontally so that the point between the feet stays still. There are
no contacts: this is a plausible kinematic approximation, not a dynamically consistent motion.

Joint velocities and the root angular velocity are analytic derivatives; the root linear velocity is a central
difference of the root positions; the body arrays (all model bodies) come from `Kinematics`.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch

from syncfree.envs.math import quat_apply, quat_from_axis_angle, quat_mul
from syncfree.envs.motion.clips import MotionClip
from syncfree.envs.robots import Kinematics, RobotModel
from syncfree.errors import UserError

KINDS = ("walk", "squat", "reach", "twist")
"""Clip i is of kind KINDS[i % 4], named f"gen_{kind}_{i}"."""

STANDING_POSE = {
    "left_hip_pitch_joint": -0.3, "right_hip_pitch_joint": -0.3,
    "left_knee_joint": 0.6, "right_knee_joint": 0.6,
    "left_ankle_pitch_joint": -0.3, "right_ankle_pitch_joint": -0.3,
    "left_elbow_joint": 0.9, "right_elbow_joint": 0.9,
    "left_shoulder_roll_joint": 0.2, "right_shoulder_roll_joint": -0.2,
}
"""The slightly knee-bent standing pose the motions move around (G1 joint names; others at 0)."""

_FOOT_SOFTNESS = 0.005  # metres: temperature of the soft minimum over the feet heights
_LIMIT_MARGIN = 0.1  # radians kept from each joint limit (at most 10 % of the range)


def generate_clips(robot: RobotModel, num_clips: int = 4, seconds: float = 6.0, fps: float = 50.0,
                   seed: int = 0) -> list[MotionClip]:
    """`num_clips` clips of `seconds` at `fps` (kinds cycling walk, squat, reach, twist), deterministic from `seed`.

    Joint names follow the Unitree G1; joints a model lacks are left out, those the motions do not use stay at 0.
    """
    if num_clips < 1:
        raise UserError(f"generate_clips: num_clips={num_clips} is invalid; allowed: an integer >= 1")
    if not (fps > 0 and seconds > 0 and seconds * fps >= 1):
        raise UserError(f"generate_clips: seconds={seconds}, fps={fps} give fewer than 2 frames")
    frames = round(seconds * fps) + 1
    t = np.arange(frames, dtype=np.float64) / fps
    kin = Kinematics(robot, "cpu", dtype=torch.float64)
    feet, ground = _feet(robot, kin)
    clips = []
    for i in range(num_clips):
        kind = KINDS[i % len(KINDS)]
        rng = np.random.default_rng([seed, i])
        clips.append(_make_clip(robot, kin, kind, f"gen_{kind}_{i}", t, fps, rng, feet, ground))
    return clips


class _Signals:
    """Joint positions q (T, J) and their exact time derivatives dq, built term by term."""

    def __init__(self, robot: RobotModel, t: np.ndarray) -> None:
        self.t = t
        self.index = {name: j for j, name in enumerate(robot.joint_names)}
        self.base = np.zeros(len(robot.joint_names))
        for name, value in STANDING_POSE.items():
            if name in self.index:
                self.base[self.index[name]] = value
        self.q = np.tile(self.base, (len(t), 1))
        self.dq = np.zeros_like(self.q)

    def sine(self, name: str, amplitude: float, hz: float, phase: float = 0.0) -> None:
        """q += amplitude · sin(2π hz t + phase)."""
        if name in self.index:
            w = 2.0 * math.pi * hz
            j = self.index[name]
            self.q[:, j] += amplitude * np.sin(w * self.t + phase)
            self.dq[:, j] += amplitude * w * np.cos(w * self.t + phase)

    def bend(self, name: str, amplitude: float, hz: float, phase: float = 0.0) -> None:
        """q += amplitude · (1 - cos(2π hz t + phase)) / 2: between 0 and amplitude."""
        if name in self.index:
            self.q[:, self.index[name]] += 0.5 * amplitude
        self.sine(name, -0.5 * amplitude, hz, phase + 0.5 * math.pi)

    def follow(self, name: str, sources: dict[str, float]) -> None:
        """q[name] += Σ gain · (q[source] - base[source]): e.g. an ankle keeping the foot flat."""
        if name not in self.index:
            return
        j = self.index[name]
        for source, gain in sources.items():
            if source in self.index:
                s = self.index[source]
                self.q[:, j] += gain * (self.q[:, s] - self.base[s])
                self.dq[:, j] += gain * self.dq[:, s]

    def texture(self, rng: np.random.Generator, amplitude: float) -> None:
        """Two small random sinusoids on every joint."""
        for name in self.index:
            for _ in range(2):
                self.sine(name, amplitude * rng.uniform(0.5, 1.0), rng.uniform(0.2, 1.2), rng.uniform(0, 2 * math.pi))

    def within_limits(self, robot: RobotModel) -> None:
        """Scale each joint's motion about its base so that it stays inside the limits minus a margin."""
        lower = robot.joint_lower.double().numpy()
        upper = robot.joint_upper.double().numpy()
        margin = np.minimum(_LIMIT_MARGIN, 0.1 * (upper - lower))
        lo = np.where(np.isfinite(lower), lower + margin, -np.inf)
        hi = np.where(np.isfinite(upper), upper - margin, np.inf)
        base = np.clip(self.base, lo, hi)
        dev = self.q - self.base
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.where(dev > 0, (hi - base) / dev, np.where(dev < 0, (lo - base) / dev, np.inf))
        scale = np.clip(room.min(axis=0), 0.0, 1.0)
        self.q = base + scale * dev
        self.dq = scale * self.dq
        self.q = np.clip(self.q, lo, hi)  # rounding only


def _legs(sig: _Signals) -> None:
    """Ankle pitch / roll follow minus the hip pitch + knee / hip roll motion: the feet stay parallel to the pelvis."""
    for side in ("left", "right"):
        sig.follow(f"{side}_ankle_pitch_joint", {f"{side}_hip_pitch_joint": -1.0, f"{side}_knee_joint": -1.0})
        sig.follow(f"{side}_ankle_roll_joint", {f"{side}_hip_roll_joint": -1.0})


def _make_clip(robot: RobotModel, kin: Kinematics, kind: str, name: str, t: np.ndarray, fps: float, rng: np.random.Generator,
               feet: list[int], ground: float) -> MotionClip:
    sig = _Signals(robot, t)
    u = rng.uniform
    tau = 2.0 * math.pi
    # root orientation: yaw(t) = yaw0 + rate t + a sin(2π f t + p), small pitch / roll sinusoids
    yaw_terms: list[tuple[float, float, float]] = []
    pitch_terms: list[tuple[float, float, float]] = [(u(0.01, 0.03), u(0.1, 0.3), u(0, tau))]
    roll_terms: list[tuple[float, float, float]] = [(u(0.01, 0.02), u(0.1, 0.3), u(0, tau))]
    yaw0, yaw_rate, pitch0 = u(-math.pi, math.pi), 0.0, u(0.0, 0.05)
    walk_speed = 0.0
    if kind == "walk":
        f = u(0.8, 1.0)  # gait cycles per second (two steps)
        hip, knee, arm = u(0.25, 0.4), u(0.4, 0.6), u(0.25, 0.45)
        sig.sine("left_hip_pitch_joint", -hip, f)  # negative hip pitch: the leg forward
        sig.sine("right_hip_pitch_joint", hip, f)
        sig.bend("left_knee_joint", knee, f, -0.5 * math.pi)  # knee flexes while the leg swings forward
        sig.bend("right_knee_joint", knee, f, 0.5 * math.pi)
        sig.sine("left_hip_roll_joint", 0.04, f, 0.5 * math.pi)
        sig.sine("right_hip_roll_joint", 0.04, f, 0.5 * math.pi)
        sig.sine("left_shoulder_pitch_joint", arm, f)  # arms swing opposite to the legs
        sig.sine("right_shoulder_pitch_joint", -arm, f)
        sig.sine("left_elbow_joint", 0.15, f, 0.3)
        sig.sine("right_elbow_joint", -0.15, f, 0.3)
        sig.sine("waist_yaw_joint", u(0.05, 0.12), f)
        _legs(sig)
        walk_speed = 4.0 * 0.7 * math.sin(hip) * f  # two strides of 2 L sin(hip) per cycle
        yaw_rate = u(-0.25, 0.25)
        yaw_terms.append((u(0.1, 0.3), u(0.08, 0.2), u(0, tau)))
        roll_terms.append((0.03, f, 0.5 * math.pi))  # sway over the stance leg
        pitch_terms.append((0.01, 2 * f, u(0, tau)))
        pitch0 += 0.03
    elif kind == "squat":
        f, depth = u(0.2, 0.35), u(0.7, 1.1)
        for side in ("left", "right"):
            sig.bend(f"{side}_knee_joint", depth, f)
            sig.bend(f"{side}_hip_pitch_joint", -0.5 * depth, f)
            sig.bend(f"{side}_shoulder_pitch_joint", -u(0.6, 1.0), f)
            sig.bend(f"{side}_elbow_joint", -0.5, f)
        sig.sine("waist_pitch_joint", 0.1, f, -0.5 * math.pi)
        _legs(sig)
        pitch_terms.append((0.04, f, -0.5 * math.pi))
    elif kind == "reach":
        f1, f2 = u(0.2, 0.4), u(0.15, 0.3)
        for side, sign in (("left", 1.0), ("right", -1.0)):
            p = u(0, tau)
            sig.sine(f"{side}_shoulder_pitch_joint", -u(0.7, 1.1), f1, p)
            sig.bend(f"{side}_shoulder_roll_joint", sign * u(0.3, 0.7), f2, u(0, tau))
            sig.sine(f"{side}_shoulder_yaw_joint", u(0.2, 0.5), f2, u(0, tau))
            sig.sine(f"{side}_elbow_joint", u(0.4, 0.7), f1, p + 0.5 * math.pi)
            sig.sine(f"{side}_wrist_roll_joint", u(0.3, 0.6), f1, u(0, tau))
            bend = u(0.15, 0.3)
            sig.bend(f"{side}_knee_joint", bend, f2)
            sig.bend(f"{side}_hip_pitch_joint", -0.5 * bend, f2)
        sig.sine("waist_yaw_joint", u(0.3, 0.6), f2, u(0, tau))
        sig.bend("waist_pitch_joint", u(0.15, 0.35), f1)
        sig.sine("waist_roll_joint", u(0.05, 0.15), f2, u(0, tau))
        _legs(sig)
    else:  # twist
        f = u(0.3, 0.5)
        twist = u(0.5, 0.9)
        sig.sine("waist_yaw_joint", twist, f)
        for side, sign in (("left", 1.0), ("right", -1.0)):
            sig.sine(f"{side}_shoulder_pitch_joint", -sign * u(0.3, 0.5), f)
            sig.sine(f"{side}_shoulder_roll_joint", sign * 0.15, f, 0.5 * math.pi)
            sig.sine(f"{side}_elbow_joint", u(0.2, 0.4), f, 0.5 * math.pi)
            sig.sine(f"{side}_hip_yaw_joint", u(0.05, 0.15), f, math.pi)
        bend = u(0.1, 0.25)
        for side in ("left", "right"):
            sig.bend(f"{side}_knee_joint", bend, 2 * f)
            sig.bend(f"{side}_hip_pitch_joint", -0.5 * bend, 2 * f)
        _legs(sig)
        yaw_terms.append((u(0.1, 0.2), f, math.pi))
    sig.texture(rng, 0.03)
    sig.within_limits(robot)

    yaw, yaw_dot = _sines(t, yaw_terms, yaw0, yaw_rate)
    pitch, pitch_dot = _sines(t, pitch_terms, pitch0, 0.0)
    roll, roll_dot = _sines(t, roll_terms, 0.0, 0.0)
    quat, ang_vel = _yaw_pitch_roll(yaw, pitch, roll, yaw_dot, pitch_dot, roll_dot)

    # bodies with the root at the origin, then the root placed from the feet
    with torch.no_grad():
        rel_t, body_quat = kin.forward(torch.zeros(len(t), 3, dtype=torch.float64), quat, torch.as_tensor(sig.q))
    rel = rel_t.numpy()
    root_pos = np.zeros((len(t), 3))
    root_pos[:, 2] = ground - _softmin(rel[:, feet, 2])
    if kind == "walk":
        heading = np.stack((np.cos(yaw), np.sin(yaw)), axis=-1)
        velocity = walk_speed * heading
        root_pos[:, :2] = _integrate(velocity, t)
    else:
        middle = rel[:, feet, :2].mean(axis=1)
        root_pos[:, :2] = middle[0] - middle  # the point between the feet stays where it starts
    # numpy's stubs type the gradient of a 2-D array as one array per axis, even with `axis` naming one
    root_lin_vel = cast(np.ndarray, np.gradient(root_pos, t, axis=0, edge_order=2))

    body_pos = torch.as_tensor(rel + root_pos[:, None, :])
    with torch.no_grad():
        body_lin, body_ang = kin.velocities(body_pos, body_quat, torch.as_tensor(root_lin_vel), ang_vel,
                                            torch.as_tensor(sig.dq))

    def f32(x: np.ndarray | torch.Tensor) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(x), dtype=np.float32)

    return MotionClip(
        name=name, fps=float(fps),
        joint_pos=f32(sig.q), joint_vel=f32(sig.dq),
        root_pos=f32(root_pos), root_quat=f32(quat), root_lin_vel=f32(root_lin_vel), root_ang_vel=f32(ang_vel),
        body_names=tuple(robot.body_names),
        body_pos_w=f32(body_pos), body_quat_w=f32(body_quat), body_lin_vel_w=f32(body_lin), body_ang_vel_w=f32(body_ang),
        joint_names=tuple(robot.joint_names),
    )


def _sines(t: np.ndarray, terms: list[tuple[float, float, float]], offset: float,
           rate: float) -> tuple[np.ndarray, np.ndarray]:
    """offset + rate t + Σ a sin(2π f t + p), and its derivative."""
    value = offset + rate * t
    deriv = np.full_like(t, rate)
    for a, f, p in terms:
        w = 2.0 * math.pi * f
        value = value + a * np.sin(w * t + p)
        deriv = deriv + a * w * np.cos(w * t + p)
    return value, deriv


def _yaw_pitch_roll(yaw: np.ndarray, pitch: np.ndarray, roll: np.ndarray, yaw_dot: np.ndarray,
                    pitch_dot: np.ndarray, roll_dot: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """q = Rz(yaw) Ry(pitch) Rx(roll) and its world-frame angular velocity."""
    n = len(yaw)
    ex, ey, ez = (torch.eye(3, dtype=torch.float64)[i].expand(n, 3) for i in range(3))
    qz = quat_from_axis_angle(ez, torch.as_tensor(yaw))
    qy = quat_from_axis_angle(ey, torch.as_tensor(pitch))
    qx = quat_from_axis_angle(ex, torch.as_tensor(roll))
    qzy = quat_mul(qz, qy)
    quat = quat_mul(qzy, qx)
    col = torch.as_tensor
    ang = (ez * col(yaw_dot)[:, None] + quat_apply(qz, ey) * col(pitch_dot)[:, None]
           + quat_apply(qzy, ex) * col(roll_dot)[:, None])
    return quat, ang


def _softmin(z: np.ndarray) -> np.ndarray:
    """Smooth minimum over the last axis: the minimum when all are equal, at most softness · log(count) above it."""
    low = z.min(axis=-1)
    return low - _FOOT_SOFTNESS * np.log(np.exp(-(z - low[..., None]) / _FOOT_SOFTNESS).mean(axis=-1))


def _integrate(velocity: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Positions from velocities (trapezoid rule), starting at the origin."""
    steps = 0.5 * (velocity[1:] + velocity[:-1]) * np.diff(t)[:, None]
    return np.concatenate((np.zeros((1, velocity.shape[1])), np.cumsum(steps, axis=0)))


def _feet(robot: RobotModel, kin: Kinematics) -> tuple[list[int], float]:
    """The two lowest bodies of the zero pose (standing at the model's root height) and their height."""
    root = torch.tensor([[0.0, 0.0, robot.root_height]], dtype=torch.float64)
    with torch.no_grad():
        pos, _ = kin.forward(root, torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64),
                             torch.zeros(1, len(robot.joint_names), dtype=torch.float64))
    z = pos[0, :, 2].numpy()
    feet = [int(i) for i in np.argsort(z, kind="stable")[:2]]
    return feet, float(z[feet].min())
