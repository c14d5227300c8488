"""Load a free-floating robot from an MJCF file into a kinematic tree of torch tensors.

MuJoCo compiles the file (defaults, classes, includes, `autolimits`), then the compiled arrays are read. The tree
must be a single free-floating root body attached to the world with at most one hinge joint on every other body;
anything else is a `UserError` naming the file and the culprit.
"""

from __future__ import annotations

import functools
import math
import os
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from syncfree.envs.render import importing_mujoco
from syncfree.errors import UserError

with importing_mujoco():  # the first import of MuJoCo here: it reads MUJOCO_GL as it is imported
    import mujoco

_JOINT_TYPE_NAMES = {
    int(mujoco.mjtJoint.mjJNT_FREE): "free",
    int(mujoco.mjtJoint.mjJNT_BALL): "ball",
    int(mujoco.mjtJoint.mjJNT_SLIDE): "slide",
    int(mujoco.mjtJoint.mjJNT_HINGE): "hinge",
}


@dataclass(frozen=True, eq=False)
class RobotModel:
    """Kinematic tree and joint properties of a robot, as compiled by MuJoCo (float32 / int64 CPU tensors).

    `load_robot` may return the same instance for the same unchanged file: treat the tensors as read-only
    (copy before modifying, e.g. `robot.joint_lower.clone()`).
    """

    path: str
    """File it came from (resolved)."""
    joint_names: tuple[str, ...]
    """Actuated hinge joints (every joint below the root), MJCF (qpos) order, length J."""
    body_names: tuple[str, ...]
    """All bodies except MuJoCo's world body, MJCF order; body 0 is the root (it has the free joint)."""
    parent: torch.Tensor
    """(B,) int64 index into `body_names`, -1 for the root."""
    body_offset_pos: torch.Tensor
    """(B, 3) body frame origin in the parent frame (MuJoCo `model.body_pos`)."""
    body_offset_quat: torch.Tensor
    """(B, 4) wxyz body frame orientation in the parent frame (`model.body_quat`)."""
    body_joint: torch.Tensor
    """(B,) int64 index into `joint_names` of the hinge moving the body, -1 if welded or the root."""
    joint_axis: torch.Tensor
    """(J, 3) unit axis in the child body frame (`model.jnt_axis`)."""
    joint_anchor: torch.Tensor
    """(J, 3) joint position in the child body frame (`model.jnt_pos`)."""
    joint_lower: torch.Tensor
    """(J,) radians, -inf if unlimited."""
    joint_upper: torch.Tensor
    """(J,) radians, inf if unlimited."""
    effort_limit: torch.Tensor
    """(J,) N·m: the joint's `actuatorfrcrange` if set, else the force range of an actuator on it (its
    `forcerange`, or for a motor its `ctrlrange` times the gear), inf if none."""
    armature: torch.Tensor
    """(J,) rotor inertia added to the joint (`model.dof_armature`)."""
    joint_inertia: torch.Tensor
    """(J,) diagonal of the joint-space inertia matrix at qpos0 (`model.dof_M0`, armature included)."""
    root_height: float
    """Root body z position in the model (`model.body_pos` of the root)."""
    joint_ref: torch.Tensor | None = field(default=None)
    """(J,) MJCF joint `ref` (`model.qpos0`): MuJoCo rotates a hinge by q - ref; None means zeros."""

    def body_index(self, names: Sequence[str]) -> torch.Tensor:
        """int64 indices into `body_names` of the given names; UserError naming an unknown body."""
        return _indices(self.path, "body", self.body_names, names)

    def joint_index(self, names: Sequence[str]) -> torch.Tensor:
        """int64 indices into `joint_names` of the given names; UserError naming an unknown joint."""
        return _indices(self.path, "joint", self.joint_names, names)

    def breadth_first_joint_order(self) -> tuple[str, ...]:
        """Joints in breadth-first order over the body tree, children in MJCF order (Isaac Lab / PhysX order)."""
        parent = self.parent.tolist()
        children: list[list[int]] = [[] for _ in parent]
        for b, p in enumerate(parent):
            if p >= 0:
                children[p].append(b)
        body_joint = self.body_joint.tolist()
        order: list[str] = []
        queue = deque(b for b, p in enumerate(parent) if p < 0)
        while queue:
            b = queue.popleft()
            if body_joint[b] >= 0:
                order.append(self.joint_names[body_joint[b]])
            queue.extend(children[b])
        return tuple(order)


def _indices(path: str, kind: str, known: tuple[str, ...], names: Sequence[str]) -> torch.Tensor:
    if isinstance(names, str):
        names = [names]
    lookup = {name: i for i, name in enumerate(known)}
    missing = [name for name in names if name not in lookup]
    if missing:
        raise UserError(f"{path}: no {kind} named {missing[0]!r} (the {kind}s are: {', '.join(known)})")
    return torch.tensor([lookup[name] for name in names], dtype=torch.int64)


def default_robot_path() -> Path:
    """The Unitree G1 (29 joints) MJCF file shipped with the package."""
    return Path(str(resources.files("syncfree.envs.robots") / "assets" / "g1_29dof.xml"))


def load_robot(path: str | Path | None = None) -> RobotModel:
    """Compile an MJCF file with MuJoCo and read its kinematic tree; None loads the shipped G1.

    The result is cached per file (path, modification time, size): callers must not modify its tensors in place.
    """
    resolved = Path(default_robot_path() if path is None else path).expanduser().resolve()
    if not resolved.is_file():
        raise UserError(f"{resolved}: robot MJCF file not found")
    stat = resolved.stat()
    return _load_cached(str(resolved), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _load_cached(path: str, mtime_ns: int, size: int) -> RobotModel:
    del mtime_ns, size  # cache keys only: an edited file is compiled again
    try:
        model = mujoco.MjModel.from_xml_path(path)
    except ValueError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        message = "; ".join(line.rstrip(":") for line in lines[:2]) if lines else type(error).__name__  # MuJoCo's summary, then its detail
        raise UserError(f"{path}: MuJoCo cannot compile it: {message}") from None
    return _read_model(path, model)


def _name(model: mujoco.MjModel, objtype: mujoco.mjtObj, index: int, fallback: str) -> str:
    name = mujoco.mj_id2name(model, objtype, index)
    return name if name else f"{fallback}{index}"


def _read_model(path: str, model: mujoco.MjModel) -> RobotModel:
    where = os.fspath(path)
    body_name = functools.partial(_name, model, mujoco.mjtObj.mjOBJ_BODY, fallback="body")
    joint_name = functools.partial(_name, model, mujoco.mjtObj.mjOBJ_JOINT, fallback="joint")
    parent_id = model.body_parentid
    top = [b for b in range(1, model.nbody) if parent_id[b] == 0]
    free = int(mujoco.mjtJoint.mjJNT_FREE)
    hinge = int(mujoco.mjtJoint.mjJNT_HINGE)
    roots = [b for b in top if model.body_jntnum[b] == 1 and model.jnt_type[model.body_jntadr[b]] == free]
    if not roots:
        raise UserError(f"{where}: no free-floating root body (a body under <worldbody> with a <freejoint/>)")
    root = roots[0]
    others = [b for b in top if b != root]
    if others:
        raise UserError(
            f"{where}: body {body_name(others[0])!r} is attached to the world besides the root "
            f"{body_name(root)!r}; only one free-floating tree is supported"
        )

    body_joint_id = np.full(model.nbody, -1, dtype=np.int64)
    for b in range(2, model.nbody):
        count, first = int(model.body_jntnum[b]), int(model.body_jntadr[b])
        if count > 1:
            names = ", ".join(joint_name(j) for j in range(first, first + count))
            raise UserError(
                f"{where}: body {body_name(b)!r} has {count} joints ({names}); at most one hinge per body is supported"
            )
        if count == 1:
            kind = int(model.jnt_type[first])
            if kind != hinge:
                raise UserError(
                    f"{where}: joint {joint_name(first)!r} on body {body_name(b)!r} is a "
                    f"{_JOINT_TYPE_NAMES.get(kind, str(kind))} joint; only hinge joints are supported below the root"
                )
            body_joint_id[b] = first
    joint_ids = sorted(int(j) for j in body_joint_id if j >= 0)
    if not joint_ids:
        raise UserError(f"{where}: no actuated (hinge) joints below the root body {body_name(root)!r}")
    joint_slot = {j: i for i, j in enumerate(joint_ids)}
    jid = np.asarray(joint_ids)
    dof = model.jnt_dofadr[jid]

    limited = model.jnt_limited[jid].astype(bool)
    lower = np.where(limited, model.jnt_range[jid, 0], -math.inf)
    upper = np.where(limited, model.jnt_range[jid, 1], math.inf)

    def f32(x: np.ndarray | list[float]) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=torch.float32).clone()

    bodies = np.arange(1, model.nbody)
    return RobotModel(
        path=where,
        joint_names=tuple(joint_name(j) for j in joint_ids),
        body_names=tuple(body_name(int(b)) for b in bodies),
        parent=torch.as_tensor(parent_id[bodies].astype(np.int64) - 1),
        body_offset_pos=f32(model.body_pos[bodies]),
        body_offset_quat=f32(model.body_quat[bodies]),
        body_joint=torch.tensor([joint_slot.get(int(j), -1) for j in body_joint_id[bodies]], dtype=torch.int64),
        joint_axis=f32(model.jnt_axis[jid]),
        joint_anchor=f32(model.jnt_pos[jid]),
        joint_lower=f32(lower),
        joint_upper=f32(upper),
        effort_limit=f32([_effort_limit(model, j) for j in joint_ids]),
        armature=f32(model.dof_armature[dof]),
        joint_inertia=f32(model.dof_M0[dof]),
        root_height=float(model.body_pos[root, 2]),
        joint_ref=f32(model.qpos0[model.jnt_qposadr[jid]]),
    )


def _effort_limit(model: mujoco.MjModel, joint: int) -> float:
    if model.jnt_actfrclimited[joint]:
        return float(np.abs(model.jnt_actfrcrange[joint]).max())
    for a in range(model.nu):
        if model.actuator_trntype[a] != mujoco.mjtTrn.mjTRN_JOINT or model.actuator_trnid[a, 0] != joint:
            continue
        gear = abs(float(model.actuator_gear[a, 0]))
        if model.actuator_forcelimited[a]:
            return gear * float(np.abs(model.actuator_forcerange[a]).max())
        is_motor = (
            model.actuator_gaintype[a] == mujoco.mjtGain.mjGAIN_FIXED
            and model.actuator_biastype[a] == mujoco.mjtBias.mjBIAS_NONE
            and model.actuator_dyntype[a] == mujoco.mjtDyn.mjDYN_NONE
        )
        if is_motor and model.actuator_ctrllimited[a]:
            gain = abs(float(model.actuator_gainprm[a, 0]))
            return gear * gain * float(np.abs(model.actuator_ctrlrange[a]).max())
    return math.inf
