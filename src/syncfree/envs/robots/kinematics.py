"""Batched forward kinematics of a free-floating robot in torch, vectorized over environments and tree levels.

Conventions follow MuJoCo: quaternions wxyz, a hinge on body b with parent p rotates b about the joint anchor
(`jnt_pos`, in b's frame) by q - ref, so

    R_b   = R_p · R_offset · R(axis, q - ref)
    pos_b = pos_p + R_p · (offset_pos + R_offset · anchor) - R_b · anchor

Both methods run without host syncs, under `torch.inference_mode()` and on any device.
"""

from __future__ import annotations

import torch
from torch import Tensor

from syncfree.envs.math import quat_apply, quat_from_axis_angle, quat_mul
from syncfree.envs.robots.mjcf import RobotModel


def _right_mul_matrix(q: Tensor) -> Tensor:
    """(..., 4, 4) matrix M(q) with a ⊗ q = M(q) @ a."""
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        (
            torch.stack((w, -x, -y, -z), dim=-1),
            torch.stack((x, w, z, -y), dim=-1),
            torch.stack((y, -z, w, x), dim=-1),
            torch.stack((z, y, -x, w), dim=-1),
        ),
        dim=-2,
    )


class Kinematics:
    """Batched forward kinematics of a RobotModel on one device.

    Bodies are processed one tree level at a time (one gather of the parents' poses and a few batched ops per
    level); velocities need no level loop (a sum over ancestors, as one matmul).
    """

    def __init__(self, robot: RobotModel, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        self.robot = robot
        self.device = torch.device(device)
        self.dtype = dtype
        self.num_bodies = len(robot.body_names)
        self.num_joints = len(robot.joint_names)
        B, J = self.num_bodies, self.num_joints

        f64 = torch.float64
        parent = robot.parent.tolist()
        body_joint = robot.body_joint.tolist()
        depth = [0] * B
        for b in range(B):  # MJCF order lists a parent before its children
            depth[b] = 0 if parent[b] < 0 else depth[parent[b]] + 1
        if parent[0] >= 0 or any(d == 0 for d in depth[1:]):
            raise ValueError("RobotModel: body 0 must be the only root")

        # per-body joint data; a welded body gets the padded joint slot J (angle 0, zero axis and anchor)
        slot = torch.tensor([j if j >= 0 else J for j in body_joint], dtype=torch.int64)
        zero = torch.zeros(1, 3, dtype=f64)
        axis = torch.cat((robot.joint_axis.to(f64), zero))[slot]
        anchor = torch.cat((robot.joint_anchor.to(f64), zero))[slot]
        ref = torch.zeros(J + 1, dtype=f64)
        if robot.joint_ref is not None:
            ref[:J] = robot.joint_ref.to(f64)
        ref = ref[slot]
        offset_pos = robot.body_offset_pos.to(f64)
        offset_quat = robot.body_offset_quat.to(f64)
        offset_quat = offset_quat / offset_quat.norm(dim=-1, keepdim=True)
        axis_unit = axis / axis.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        # the rest rotation by -ref folds into the offset: R_offset · R(axis, q - ref) = R_rest · R(axis, q)
        rest_quat = quat_mul(offset_quat, quat_from_axis_angle(axis_unit, -ref))
        # R_rest ⊗ (cos(q/2), sin(q/2) axis) = cos(q/2) R_rest + sin(q/2) (R_rest ⊗ (0, axis))
        spin_quat = quat_mul(rest_quat, torch.cat((torch.zeros(B, 1, dtype=f64), axis_unit), dim=-1))
        # child quat = parent ⊗ (c rest + s spin) = (c M(rest) + s M(spin)) @ parent
        mix = torch.stack((_right_mul_matrix(rest_quat), _right_mul_matrix(spin_quat)), dim=1)  # (B, 2, 4, 4)
        lever = offset_pos + quat_apply(offset_quat, anchor)  # in the parent frame

        def put(x: Tensor, dtype: torch.dtype = dtype) -> Tensor:
            return x.to(device=self.device, dtype=dtype).contiguous()

        levels = [[b for b in range(B) if depth[b] == d] for d in range(max(depth) + 1)]
        position = {}  # body -> (level, index within the level)
        for d, bodies in enumerate(levels):
            for i, b in enumerate(bodies):
                position[b] = (d, i)
        self._levels = []
        for bodies in levels[1:]:
            idx = torch.tensor(bodies, dtype=torch.int64)
            has_anchor = bool(anchor[idx].abs().max() > 0)
            self._levels.append(
                (
                    put(torch.tensor([position[parent[b]][1] for b in bodies]), torch.int64),
                    put(slot[idx], torch.int64),
                    put(mix[idx].reshape(len(bodies), 2, 4, 4)),
                    put(lever[idx]),
                    put(anchor[idx]) if has_anchor else None,
                )
            )
        flat = [b for bodies in levels for b in bodies]
        self._to_mjcf_order = put(torch.tensor(flat).argsort(), torch.int64)
        self._welded_cos_sin = put(torch.tensor([[[1.0, 0.0]]]))

        # velocities: ancestor-or-self matrix, joint axes and anchors per body (zero when welded)
        ancestors = torch.zeros(B, B, dtype=f64)
        for b in range(B):
            a = b
            while a >= 0:
                ancestors[b, a] = 1.0
                a = parent[a]
        self._ancestors = put(ancestors)
        self._body_slot = put(slot, torch.int64)
        self._axis = put(axis)
        self._anchor = put(anchor) if bool(anchor.abs().max() > 0) else None

    def forward(self, root_pos: Tensor, root_quat: Tensor, joint_pos: Tensor) -> tuple[Tensor, Tensor]:
        """(N,3),(N,4),(N,J) → body_pos_w (N,B,3), body_quat_w (N,B,4) (world frame, body frame origins).

        root_quat must be a unit quaternion (wxyz); joint_pos follows `robot.joint_names`.
        """
        half = 0.5 * joint_pos
        # (N, J+1, 2): (cos, sin) of half the angle, the padded slot J holding a welded body's (1, 0)
        welded = self._welded_cos_sin.expand(joint_pos.shape[0], 1, 2)
        cos_sin = torch.cat((torch.stack((torch.cos(half), torch.sin(half)), dim=-1), welded), dim=1)
        pos, quat = root_pos.unsqueeze(1), root_quat.unsqueeze(1)
        all_pos, all_quat = [pos], [quat]
        for parent, slot, mix, lever, anchor in self._levels:
            parent_pos = pos[:, parent]
            parent_quat = quat[:, parent]
            cs = cos_sin[:, slot]  # (N, L, 2)
            # (N, L, 2, 4) = (2, 4, 4) per body @ parent quaternion, then weighted by (cos, sin)
            rotated = (mix * parent_quat[:, :, None, None, :]).sum(-1)
            quat = (rotated * cs.unsqueeze(-1)).sum(-2)
            pos = parent_pos + quat_apply(parent_quat, lever)
            if anchor is not None:
                pos = pos - quat_apply(quat, anchor)
            all_pos.append(pos)
            all_quat.append(quat)
        order = self._to_mjcf_order
        return torch.cat(all_pos, dim=1)[:, order], torch.cat(all_quat, dim=1)[:, order]

    def velocities(
        self, body_pos_w: Tensor, body_quat_w: Tensor, root_lin_vel: Tensor, root_ang_vel: Tensor, joint_vel: Tensor
    ) -> tuple[Tensor, Tensor]:
        """World-frame linear velocity of each body frame origin and angular velocity (N,B,3) each; root_lin_vel /
        root_ang_vel are the root body's world-frame linear velocity (of its origin) and angular velocity."""
        rel = body_pos_w - body_pos_w[:, :1]  # positions relative to the root: no cancellation far from the origin
        rate = torch.nn.functional.pad(joint_vel, (0, 1))[:, self._body_slot].unsqueeze(-1)
        spin = quat_apply(body_quat_w, self._axis) * rate  # (N, B, 3) joint angular velocity, world frame
        pivot = rel if self._anchor is None else rel + quat_apply(body_quat_w, self._anchor)
        # a joint on ancestor a moves the origin x_b at spin_a × (x_b - pivot_a)
        summed = torch.matmul(self._ancestors, torch.cat((spin, torch.linalg.cross(spin, pivot, dim=-1)), dim=-1))
        ang_vel = root_ang_vel.unsqueeze(1) + summed[..., :3]
        lin_vel = root_lin_vel.unsqueeze(1) + torch.linalg.cross(ang_vel, rel, dim=-1) - summed[..., 3:]
        return lin_vel, ang_vel
