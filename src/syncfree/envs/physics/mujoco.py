"""Real physics on the CPU: MuJoCo steps every env's robot, with gravity and floor contacts, in C threads.

The scene is the robot's MJCF file (it must carry a floor: a plane geom on the world body) compiled once with
position actuators that mirror `TorchPDPhysics` (same stiffness, damping and effort limits, so the same action
scale applies) and contact sensors on the feet. `mujoco.rollout` advances all envs in one call per control
step, `substeps` MuJoCo steps of `timestep` each with the PD targets held, on a pool of native threads that
run without the GIL.

The host boundary is one explicit copy each way per `step()`: the state (root, joints, velocities), the PD
targets and each env's model variant go to a preallocated float64 host buffer with one `copy_`, and the
resulting state and sensor values come back with one `copy_`. Between them only numpy and MuJoCo touch the
buffers (no torch op, no per-env Python loop). On a CUDA device the copy to the host is the env step's one
host sync (MuJoCo must see the state); the copy back, from page-locked memory, does not wait.

Body poses and velocities come from the torch forward kinematics of the stepped state, as in `TorchPDPhysics`
(they match MuJoCo's own). Contact values are those MuJoCo computed in the control step's last substep.

Friction and the mass added to one body are randomized per episode by choosing one of a grid of compiled model
variants (`choose_variants`); pushes write the root velocity (`root_lin_vel`, `root_ang_vel`) like any state.
"""

from __future__ import annotations

import copy
import itertools
import os
from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
import torch
from mujoco import rollout
from torch import Tensor

from syncfree.envs.managers.select import assign_
from syncfree.envs.math import quat_apply, quat_apply_inverse
from syncfree.envs.physics.base import Physics
from syncfree.envs.physics.torch_pd import pd_gains
from syncfree.envs.robots import Kinematics, RobotModel
from syncfree.errors import UserError

FEET = ("left_ankle_roll_link", "right_ankle_roll_link")
"""Bodies whose floor contacts are expected (the G1's feet)."""

_FLOOR_TYPES = (mujoco.mjtGeom.mjGEOM_PLANE, mujoco.mjtGeom.mjGEOM_HFIELD)


def floor_geom(spec: mujoco.MjSpec) -> mujoco.MjsGeom | None:
    """The first plane or height field on the world body, if any."""
    return next((g for g in spec.worldbody.geoms if g.type in _FLOOR_TYPES), None)


def build_scene(robot: RobotModel, timestep: float, contact_bodies: Sequence[str] = FEET) -> mujoco.MjModel:
    """The robot's MJCF compiled for simulation: `timestep`, implicit damping, one PD position actuator per joint
    (gains from `pd_gains`, force clipped to the effort limit) and contact sensors against the floor.

    Sensors, in order: for each contact body, [contacts found, net force (3, world frame) the floor exerts on
    it]; then the number of contacts between any robot body and the floor.
    """
    spec = mujoco.MjSpec.from_file(robot.path)
    floor = floor_geom(spec)
    if floor is None:
        raise UserError(f"{robot.path}: no floor for MuJoCo physics: add a plane geom under <worldbody> "
                        f"(e.g. <geom name=\"floor\" type=\"plane\" size=\"0 0 0.05\"/>)")
    robot.body_index(list(contact_bodies))  # a UserError naming an unknown body
    if not floor.name:
        floor.name = "floor"
    floor_name = floor.name
    spec.option.timestep = timestep
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    for actuator in list(spec.actuators):
        spec.delete(actuator)
    for sensor in list(spec.sensors):
        spec.delete(sensor)
    stiffness, damping = pd_gains(robot)
    for j, name in enumerate(robot.joint_names):
        actuator = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        actuator.set_to_position(kp=float(stiffness[j]), kv=float(damping[j]))
        limit = float(robot.effort_limit[j])
        if np.isfinite(limit):
            actuator.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
            actuator.forcerange = [-limit, limit]
    found_and_net_force = [3, 3, 1]  # data: found | force; reduce: netforce; one result
    for body in contact_bodies:
        spec.add_sensor(name=f"{body}_floor_contact", type=mujoco.mjtSensor.mjSENS_CONTACT,
                        objtype=mujoco.mjtObj.mjOBJ_GEOM, objname=floor_name,
                        reftype=mujoco.mjtObj.mjOBJ_BODY, refname=body, intprm=found_and_net_force)
    spec.add_sensor(name="robot_floor_contacts", type=mujoco.mjtSensor.mjSENS_CONTACT,
                    objtype=mujoco.mjtObj.mjOBJ_GEOM, objname=floor_name,
                    reftype=mujoco.mjtObj.mjOBJ_XBODY, refname=robot.body_names[0], intprm=[1, 0, 1])
    return spec.compile()


def variant_grid(frictions: Sequence[float], added_masses: Sequence[float]) -> list[tuple[float, float]]:
    """Every (friction, added mass) pair; variant k is the k-th pair (frictions vary slowest)."""
    return list(itertools.product(frictions, added_masses))


def model_variants(model: mujoco.MjModel, grid: Sequence[tuple[float, float]], body: int) -> list[mujoco.MjModel]:
    """One copy of `model` per (friction, added mass) pair: sliding friction of every geom and contact pair set
    to the value, the mass added to `body` with its inertia scaled alike."""
    variants = []
    for friction, added in grid:
        variant = copy.copy(model)
        variant.geom_friction[:, 0] = friction
        variant.pair_friction[:, :2] = friction
        scale = mass_scale(model, body, added)
        variant.body_mass[body] = model.body_mass[body] * scale
        variant.body_inertia[body] = model.body_inertia[body] * scale
        variants.append(variant)
    return variants


def mass_scale(model: mujoco.MjModel, body: int, added: float) -> float:
    """Factor on the body's mass (and inertia) that adds `added` kg; UserError if the body would weigh <= 0."""
    mass = float(model.body_mass[body])
    if mass + added <= 0:
        raise UserError(f"added mass {added} kg leaves body {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body)!r}"
                        f" ({mass:.3f} kg) without mass; allowed: more than {-mass:.3f} kg")
    return (mass + added) / mass


class MujocoScene(Physics):
    """What the MuJoCo backends share: the compiled scene, PD gains, model variants, the state tensors' layout
    (views of MuJoCo's qpos / qvel / sensordata / ctrl, wherever they live) and the torch kinematics."""

    def _build(self, robot: RobotModel, num_envs: int, device: torch.device | str, timestep: float, substeps: int,
               contact_bodies: Sequence[str], frictions: Sequence[float], added_masses: Sequence[float],
               randomized_body: str) -> None:
        self.robot, self.num_envs, self.device = robot, num_envs, torch.device(device)
        self.timestep, self.substeps = timestep, substeps
        self.sim_dt = timestep * substeps
        self.model = build_scene(robot, timestep, contact_bodies)
        self.contact_bodies = tuple(contact_bodies)
        self.randomized_body = int(robot.body_index([randomized_body])[0]) + 1  # MuJoCo's body 0 is the world
        self.variant_grid = variant_grid(frictions, added_masses)
        """(friction, added mass) of each model variant."""
        if not self.variant_grid:
            raise UserError("MuJoCo physics: frictions and added_masses need at least one value each")
        self.num_variants = len(self.variant_grid)
        self.kinematics = Kinematics(robot, self.device)
        self.stiffness, self.damping = (g.to(self.device) for g in pd_gains(robot))
        self.effort_limit = robot.effort_limit.to(self.device)
        self.lower, self.upper = robot.joint_lower.to(self.device), robot.joint_upper.to(self.device)

    def _bind(self, qpos: Tensor, qvel: Tensor, sensordata: Tensor, ctrl: Tensor) -> None:
        """Name the state: views of [num_envs, nq] qpos, [num_envs, nv] qvel (MuJoCo's root angular velocity is in
        the root frame; the world-frame `root_ang_vel` is kept beside it), sensordata and ctrl."""
        nq, nv, k = self.model.nq, self.model.nv, len(self.contact_bodies)
        self.root_pos, self.root_quat, self.joint_pos = qpos[:, 0:3], qpos[:, 3:7], qpos[:, 7:nq]
        self.root_lin_vel, self._root_ang_vel_b, self.joint_vel = qvel[:, 0:3], qvel[:, 3:6], qvel[:, 6:nv]
        per_body = sensordata[:, :4 * k].unflatten(1, (k, 4))
        self.contact_forces = per_body[..., 1:]
        """[num_envs, len(contact_bodies), 3] net force the floor exerts on each contact body (world frame)."""
        self.contact_counts = per_body[..., 0]
        """[num_envs, len(contact_bodies)] number of floor contacts of each contact body."""
        self._robot_contact_count = sensordata[:, 4 * k]
        self.targets = ctrl
        self.root_ang_vel = torch.zeros(self.num_envs, 3, device=self.device)
        self.root_quat[:, 0] = 1.0
        self.root_pos[:, 2] = self.robot.root_height

    @property
    def other_contacts(self) -> Tensor:
        """[num_envs] number of floor contacts of robot bodies other than the contact bodies."""
        return self._robot_contact_count - self.contact_counts.sum(-1)

    def set_joint_targets(self, targets: Tensor) -> None:
        self.targets.copy_(targets)

    def _root_ang_vel_to_root_frame(self) -> None:
        self._root_ang_vel_b.copy_(quat_apply_inverse(self.root_quat, self.root_ang_vel))

    def _root_ang_vel_to_world_frame(self) -> None:
        self.root_ang_vel.copy_(quat_apply(self.root_quat, self._root_ang_vel_b))


class MujocoPhysics(MujocoScene):
    """N robots in C MuJoCo, one `mujoco.rollout` call per `step()` (`sim_dt` = `timestep` × `substeps`)."""

    def __init__(self, robot: RobotModel, num_envs: int, device: torch.device | str = "cpu",
                 timestep: float = 0.005, substeps: int = 4, num_threads: int = 0,
                 contact_bodies: Sequence[str] = FEET, frictions: Sequence[float] = (0.4, 0.8, 1.2, 1.6),
                 added_masses: Sequence[float] = (-1.0, 0.0, 1.5, 3.0), randomized_body: str = "torso_link") -> None:
        self._build(robot, num_envs, device, timestep, substeps, contact_bodies, frictions, added_masses,
                    randomized_body)
        self.variants = np.array(model_variants(self.model, self.variant_grid, self.randomized_body), dtype=object)
        m, n = self.model, num_envs
        nq, nv, nu, ns = m.nq, m.nv, m.nu, m.nsensordata
        # device side, float32: [qpos | qvel | sensordata | ctrl | model variant], the env's state in one tensor
        self._io = torch.zeros(n, nq + nv + ns + nu + 1, device=self.device)
        io = self._io
        self._bind(io[:, :nq], io[:, nq:nq + nv], io[:, nq + nv:nq + nv + ns], io[:, nq + nv + ns:nq + nv + ns + nu])
        self.model_variant = io[:, -1]
        """Each env's model variant index (a float so that it travels with the state in the host copy)."""

        # host side, float64: one buffer each way, and the arrays `mujoco.rollout` reads and writes
        nstate = mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS)
        pinned = self.device.type == "cuda"  # page-locked: the copy back can overlap the host's next work
        self._host_in = torch.zeros(n, io.shape[1], dtype=torch.float64, pin_memory=pinned)
        self._host_out = torch.zeros(n, nq + nv + ns, dtype=torch.float64, pin_memory=pinned)
        self._host_in_np, self._host_out_np = self._host_in.numpy(), self._host_out.numpy()
        self._initial_state = np.zeros((n, nstate))
        self._warmstart = np.zeros((n, nv))
        """Each control step's solver starts cold, so results do not depend on which thread's MjData ran an env."""
        self._control = np.zeros((n, substeps, nu))
        self._state = np.zeros((n, substeps, nstate))
        self._sensordata = np.zeros((n, substeps, ns))
        self._qstate = slice(1, 1 + nq + nv)  # qpos and qvel inside MuJoCo's full physics state (after time)
        self._ctrl = slice(nq + nv + ns, nq + nv + ns + nu)
        threads = num_threads or len(os.sched_getaffinity(0))
        self._datas = [mujoco.MjData(m) for _ in range(threads)]
        self._pool = rollout.Rollout(nthread=threads if threads > 1 else 0)
        self.update_kinematics()

    def close(self) -> None:
        """Stop the thread pool (also done when the object is collected)."""
        self._pool.close()

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()

    def step(self) -> None:
        """Advance every env by `substeps` MuJoCo steps with the current targets held."""
        self._root_ang_vel_to_root_frame()
        self._host_in.copy_(self._io)  # the one copy to the host
        host, nqv = self._host_in_np, self._qstate.stop - self._qstate.start
        np.copyto(self._initial_state[:, self._qstate], host[:, :nqv])
        np.copyto(self._control, host[:, None, self._ctrl])
        models = self.variants[host[:, -1].astype(np.int64)].tolist()
        self._pool.rollout(models, self._datas, self._initial_state, self._control, skip_checks=True,
                           nstep=self.substeps, initial_warmstart=self._warmstart, state=self._state,
                           sensordata=self._sensordata)
        np.copyto(self._host_out_np[:, :nqv], self._state[:, -1, self._qstate])
        np.copyto(self._host_out_np[:, nqv:], self._sensordata[:, -1])
        self._io[:, :self._host_out.shape[1]].copy_(self._host_out, non_blocking=True)  # the one copy back
        self._root_ang_vel_to_world_frame()

    def choose_variants(self, selection: Tensor, variant: Tensor) -> None:
        """Selected envs simulate with model variant `variant` (int64 [num_envs], in [0, num_variants))."""
        assign_(self.model_variant, selection, variant.to(self.model_variant.dtype))

    def state_dict(self) -> dict[str, Any]:
        return {"io": self._io.clone(), "root_ang_vel": self.root_ang_vel.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._io.copy_(state["io"])
        self.root_ang_vel.copy_(state["root_ang_vel"])
        self.update_kinematics()
