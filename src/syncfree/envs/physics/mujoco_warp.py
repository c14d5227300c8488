"""MuJoCo Warp: the scene of `MujocoPhysics`, one Warp world per env, its state shared with torch without copies.

The state tensors are torch views (`wp.to_torch`) of MuJoCo Warp's `qpos`, `qvel`, `sensordata` and `ctrl`
arrays, so a step is `substeps` calls of `mujoco_warp.step` and nothing crosses a host boundary. Friction and
the added mass are per-world model fields (batched `geom_friction`, `pair_friction`, `body_mass`,
`body_inertia`) written at reset from the same variant grid as `MujocoPhysics`. On a CUDA device the steps run
on torch's current stream.

Warp also runs on the CPU (slowly: for tests). Its kernels compile on first use (about 45 s for this scene on
2 CPU cores) and are cached on disk afterwards. Not saved in a checkpoint: the solver's warm start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from syncfree.envs.managers.select import assign_, fill_
from syncfree.envs.physics.mujoco import FEET, MujocoScene, mass_scale
from syncfree.envs.robots import RobotModel
from syncfree.errors import UserError


def import_mujoco_warp() -> tuple[Any, Any]:
    """(warp, mujoco_warp), or a UserError saying what to install."""
    try:
        import mujoco_warp
        import warp
    except ImportError as error:
        raise UserError(f"env.backend='mujoco-warp' needs the {error.name!r} package, which is not installed: "
                        "pip install mujoco-warp") from None
    return warp, mujoco_warp


def warp_device(device: torch.device, wp: Any) -> str:
    """The Warp device holding the same memory as the torch device."""
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda" and wp.is_cuda_available():
        return f"cuda:{torch.cuda.current_device() if device.index is None else device.index}"
    raise UserError(f"env.backend='mujoco-warp' cannot run on device {str(device)!r}: Warp supports cpu and "
                    "cuda" + ("" if device.type != "cuda" else " (Warp finds no CUDA device)"))


class MujocoWarpPhysics(MujocoScene):
    """N robots in MuJoCo Warp, one world per env (`sim_dt` = `timestep` × `substeps`)."""

    def __init__(self, robot: RobotModel, num_envs: int, device: torch.device | str = "cpu",
                 timestep: float = 0.005, substeps: int = 4, contact_bodies: Sequence[str] = FEET,
                 frictions: Sequence[float] = (0.4, 0.8, 1.2, 1.6),
                 added_masses: Sequence[float] = (-1.0, 0.0, 1.5, 3.0), randomized_body: str = "torso_link",
                 contacts_per_world: int = 96, constraints_per_world: int = 512) -> None:
        wp, mjw = import_mujoco_warp()
        self._wp, self._mjw = wp, mjw
        self._build(robot, num_envs, device, timestep, substeps, contact_bodies, frictions, added_masses,
                    randomized_body)
        self._wp_device = warp_device(self.device, wp)
        n, m = num_envs, self.model
        with wp.ScopedDevice(self._wp_device):
            batched = dict.fromkeys(("geom_friction", "pair_friction", "body_mass", "body_inertia"), n)
            self._model = mjw.put_model(m, batch_sizes=batched)
            self._data = mjw.make_data(m, nworld=n, nconmax=contacts_per_world, njmax=constraints_per_world)
        d, to_torch = self._data, wp.to_torch
        self._bind(to_torch(d.qpos), to_torch(d.qvel), to_torch(d.sensordata), to_torch(d.ctrl))
        self._warmstart = to_torch(d.qacc_warmstart)
        self._geom_friction = to_torch(self._model.geom_friction)[..., 0]
        self._pair_friction = to_torch(self._model.pair_friction)[..., :2]
        body = self.randomized_body
        self._body_mass = to_torch(self._model.body_mass)[:, body]
        self._body_inertia = to_torch(self._model.body_inertia)[:, body]

        scales = torch.tensor([mass_scale(m, body, added) for _, added in self.variant_grid], dtype=torch.float64)
        self._variant_friction = torch.tensor([f for f, _ in self.variant_grid], device=self.device)
        self._variant_mass = (float(m.body_mass[body]) * scales).float().to(self.device)
        self._variant_inertia = (torch.as_tensor(m.body_inertia[body]) * scales[:, None]).float().to(self.device)
        self.model_variant = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.choose_variants(torch.ones(n, dtype=torch.bool, device=self.device), self.model_variant)
        self.update_kinematics()

    def _stream(self) -> contextlib.AbstractContextManager:
        if self.device.type != "cuda":
            return contextlib.nullcontext()
        return self._wp.ScopedStream(self._wp.stream_from_torch(torch.cuda.current_stream(self.device)))

    def step(self) -> None:
        """Advance every world by `substeps` MuJoCo Warp steps with the current targets held."""
        self._root_ang_vel_to_root_frame()
        with self._wp.ScopedDevice(self._wp_device), self._stream():
            for _ in range(self.substeps):
                self._mjw.step(self._model, self._data)
        self._root_ang_vel_to_world_frame()

    def choose_variants(self, selection: Tensor, variant: Tensor) -> None:
        """Selected envs simulate with model variant `variant` (int64 [num_envs], in [0, num_variants))."""
        assign_(self.model_variant, selection, variant)
        friction = self._variant_friction[variant]
        assign_(self._geom_friction, selection, friction[:, None].expand_as(self._geom_friction))
        assign_(self._pair_friction, selection, friction[:, None, None].expand_as(self._pair_friction))
        assign_(self._body_mass, selection, self._variant_mass[variant])
        assign_(self._body_inertia, selection, self._variant_inertia[variant])

    def write_state(self, selection: Tensor, root_pos: Tensor, root_quat: Tensor, root_lin_vel: Tensor,
                    root_ang_vel: Tensor, joint_pos: Tensor, joint_vel: Tensor) -> None:
        super().write_state(selection, root_pos, root_quat, root_lin_vel, root_ang_vel, joint_pos, joint_vel)
        fill_(self._warmstart, selection, 0.0)

    _STATE = ("root_pos", "root_quat", "joint_pos", "root_lin_vel", "joint_vel", "root_ang_vel", "targets",
              "model_variant")

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).clone() for name in self._STATE}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self._STATE:
            getattr(self, name).copy_(state[name])
        self.choose_variants(torch.ones(self.num_envs, dtype=torch.bool, device=self.device), self.model_variant)
        self.update_kinematics()
