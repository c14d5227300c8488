"""g1-track's mirror symmetry: the reflection across the robot's sagittal plane (x-z, y -> -y, S = diag(1, -1, 1))
of its `policy` and `critic` observations and of its actions, as a `syncfree.envs.mirror.Reflection`.

Each quantity reflects by its kind:

- a joint vector (positions, velocities, actions, the command's reference frames): each `left_*` joint trades places
  with its `right_*` partner, a center joint stays; a joint keeps its sign where the partner's axis is the
  reflected axis (pitch) and changes it otherwise (roll, yaw), as the joint axes in the robot's zero pose say;
- a polar vector (positions, linear velocities, gravity): (x, y, z) -> (x, -y, z);
- an axial vector (angular velocities): (x, y, z) -> (-x, y, -z);
- a rotation matrix R -> S R S, entry (i, j) times s_i s_j: the 6-D orientation [R00, R10, R20, R01, R11, R21]
  (`matrix_first_two_columns`) changes the sign of R10, R01 and R21;
- a list of tracked bodies: left and right bodies trade places, then each reflects as its kind.

A term is a row of equal frames (one joint vector or 3-vector or body list per history step, oldest first, or per
command frame, joint positions then velocities), each reflected alike; a group is its terms in order. So each group
is one `SignedPermutation` over its whole width, laid out from the env's own terms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch
from torch import Tensor

from syncfree.envs.builtin.g1_track.config import TRACKED_BODIES
from syncfree.envs.managers.observations import ObservationManager
from syncfree.envs.math import quat_apply, quat_to_matrix
from syncfree.envs.mirror import Reflection, SignedPermutation
from syncfree.envs.robots import Kinematics, RobotModel

Frame = tuple[list[int], list[float]]
"""A signed permutation of one frame: entry i of the reflection is entry index[i] times sign[i]."""

POLAR: Frame = ([0, 1, 2], [1.0, -1.0, 1.0])
AXIAL: Frame = ([0, 1, 2], [-1.0, 1.0, -1.0])
ORIENTATION_6D: Frame = ([0, 1, 2, 3, 4, 5], [1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
MIRRORED_GROUPS = ("policy", "critic")
"""The groups symmetry reads (the token policy's `tokenizer` group is not covered)."""

_SIDES = {"left_": "right_", "right_": "left_"}


def partner_name(name: str) -> str:
    """The name of the mirror partner: `left_*` <-> `right_*`; any other name is its own partner."""
    for side, other in _SIDES.items():
        if name.startswith(side):
            return other + name[len(side):]
    return name


def partners(names: Sequence[str], kind: str) -> list[int]:
    """Index of each name's partner in `names`; a side without its counterpart is a ValueError."""
    lookup = {name: i for i, name in enumerate(names)}
    missing = [name for name in names if partner_name(name) not in lookup]
    if missing:
        raise ValueError(f"g1-track mirror: {kind} {missing[0]!r} has no partner {partner_name(missing[0])!r}")
    return [lookup[partner_name(name)] for name in names]


def joint_reflection(robot: RobotModel, tolerance: float = 1e-3) -> Frame:
    """Each joint's partner and sign. Reflecting a rotation by q about the world axis a gives the rotation by q about
    -S a, so the sign is the partner's axis dotted with -S a (both in the zero pose, root at the origin). Where the
    body a joint moves is not, in the zero pose, the mirror image of its partner's body (position and S R S), or
    the partner's axis is off the reflected line, the robot has no such symmetry: a ValueError."""
    index = partners(robot.joint_names, "joint")
    f64 = torch.float64
    pos, quat = Kinematics(robot, dtype=f64).forward(torch.zeros(1, 3, dtype=f64),
                                                     torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=f64),
                                                     torch.zeros(1, len(robot.joint_names), dtype=f64))
    body = torch.empty(len(robot.joint_names), dtype=torch.int64)
    moved = robot.body_joint >= 0
    body[robot.body_joint[moved]] = moved.nonzero().flatten()
    pos, quat = pos[0, body], quat[0, body]
    flip = torch.tensor([1.0, -1.0, 1.0], dtype=f64)
    reflected = flip[:, None] * quat_to_matrix(quat) * flip[None, :]
    pose_error = ((pos[index] - flip * pos).norm(dim=-1)
                  + (quat_to_matrix(quat[index]) - reflected).abs().flatten(1).max(-1).values)
    axes = quat_apply(quat, robot.joint_axis.to(f64))
    axes = axes / axes.norm(dim=-1, keepdim=True)
    dots = (axes[index] * -(axes * flip)).sum(-1)
    for j in range(len(index)):
        if pose_error[j] > tolerance or abs(abs(float(dots[j])) - 1.0) > tolerance:
            raise ValueError(f"g1-track mirror: {robot.path}: joint {robot.joint_names[j]!r} is not the mirror "
                             f"image of {robot.joint_names[index[j]]!r} in the zero pose (its body's pose, or its "
                             "axis up to sign)")
    return index, [1.0 if d > 0 else -1.0 for d in dots.tolist()]


def per_body(frame: Frame, body_index: Sequence[int]) -> Frame:
    """`frame` for each body of a list, bodies permuted to their partners."""
    size = len(frame[0])
    index = [b * size + i for b in body_index for i in frame[0]]
    return index, frame[1] * len(body_index)


def term_frames(joints: Frame, body_index: Sequence[int]) -> dict[str, Frame]:
    """One frame's reflection for each term of the `policy` and `critic` groups, by the term's name."""
    return {
        "command": joints,
        "joint_pos": joints,
        "joint_vel": joints,
        "actions": joints,
        "projected_gravity": POLAR,
        "base_lin_vel": POLAR,
        "motion_anchor_pos_b": POLAR,
        "base_ang_vel": AXIAL,
        "motion_anchor_ori_b": ORIENTATION_6D,
        "body_pos": per_body(POLAR, body_index),
        "body_ori": per_body(ORIENTATION_6D, body_index),
    }


def group_reflection(group: str, layout: Sequence[tuple[str, int]], frames: Mapping[str, Frame],
                     device: torch.device | str) -> SignedPermutation:
    """The signed permutation of a group of terms `(name, width)` in order, each a row of its frames."""
    index: list[int] = []
    sign: list[float] = []
    for name, width in layout:
        if name not in frames:
            raise ValueError(f"g1-track mirror: no reflection is known for the {group} term {name!r} "
                             f"(known: {', '.join(frames)})")
        frame_index, frame_sign = frames[name]
        size = len(frame_index)
        if width % size:
            raise ValueError(f"g1-track mirror: the {group} term {name!r} has {width} entries, not a whole number "
                             f"of {size}-entry frames")
        start = len(index)
        index.extend(start + k * size + i for k in range(width // size) for i in frame_index)
        sign.extend(frame_sign * (width // size))
    return SignedPermutation(index, sign, device)


def build_reflection(robot: RobotModel, default_joint_pos: Tensor, layouts: Mapping[str, Sequence[tuple[str, int]]],
                     device: torch.device | str, tracked_bodies: Sequence[str] = TRACKED_BODIES) -> Reflection:
    """The reflection of the groups laid out in `layouts` (group -> its terms' `(name, width)` in order) and of the
    actions. Joint positions enter as offsets from `default_joint_pos`, which must be its own mirror image."""
    joints = joint_reflection(robot)
    default = default_joint_pos.detach().to("cpu", torch.float64)
    mirrored = default[joints[0]] * torch.tensor(joints[1], dtype=torch.float64)
    if not torch.allclose(mirrored, default, atol=1e-6):
        worst = int((mirrored - default).abs().argmax())
        raise ValueError(f"g1-track mirror: the default pose is not its own mirror image (joint "
                         f"{robot.joint_names[worst]!r} and its partner)")
    frames = term_frames(joints, partners(tracked_bodies, "tracked body"))
    groups = {group: group_reflection(group, layout, frames, device) for group, layout in layouts.items()}
    return Reflection(groups, SignedPermutation(*joints, device))


class TrackingEnvLayout(Protocol):
    """What the reflection reads of a g1-track env (its class imports this module)."""

    observations: ObservationManager
    obs_shapes: dict[str, tuple[int, ...]]
    robot: RobotModel
    default_joint_pos: Tensor
    device: torch.device


def g1_track_reflection(env: TrackingEnvLayout) -> Reflection:
    """The env's reflection, laid out from its observation groups: each term's width is one evaluation of the term
    times its history length."""
    layouts: dict[str, list[tuple[str, int]]] = {}
    for group in MIRRORED_GROUPS:
        spec = env.observations.groups.get(group)
        if spec is None:
            continue
        if not spec.concatenate:
            raise ValueError(f"g1-track mirror: the {group} group is not one concatenated vector")
        layout = [(name, term.func(env).shape[-1] * max(term.history, 1)) for name, term in spec.terms.items()]
        width = sum(w for _, w in layout)
        if (width,) != env.obs_shapes[group]:
            raise ValueError(f"g1-track mirror: the {group} terms add up to {width} entries, the group has "
                             f"{env.obs_shapes[group]}")
        layouts[group] = layout
    return build_reflection(env.robot, env.default_joint_pos, layouts, env.device)
