"""Quaternion helpers, convention wxyz, batched over leading dims.

Every function is pure torch, free of host syncs (no `.item()`, no Python branch on a tensor value, no boolean-mask
indexing), so it runs unchanged on any device, under `torch.inference_mode()` and inside captured graphs.
Quaternions are expected to be unit quaternions unless a docstring says otherwise.
"""

from __future__ import annotations

import torch
from torch import Tensor

_EPS = 1e-9
_SMALL_ANGLE = 1e-6


def quat_normalize(q: Tensor, eps: float = _EPS) -> Tensor:
    """Scale q (..., 4) to unit norm (a zero quaternion stays finite)."""
    return q / q.norm(dim=-1, keepdim=True).clamp_min(eps)


def quat_conjugate(q: Tensor) -> Tensor:
    """Conjugate (the inverse of a unit quaternion): (w, -x, -y, -z)."""
    return torch.cat((q[..., :1], -q[..., 1:]), dim=-1)


def quat_mul(a: Tensor, b: Tensor) -> Tensor:
    """Hamilton product a ⊗ b (..., 4): the rotation b followed by the rotation a."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        (
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ),
        dim=-1,
    )


def quat_apply(q: Tensor, v: Tensor) -> Tensor:
    """Rotate the vectors v (..., 3) by the unit quaternions q (..., 4)."""
    u = q[..., 1:]
    if u.dim() != v.dim():  # linalg.cross broadcasts only between tensors of equal rank
        shape = (*torch.broadcast_shapes(u.shape[:-1], v.shape[:-1]), 3)
        u, v = u.expand(shape), v.expand(shape)
    t = 2.0 * torch.linalg.cross(u, v, dim=-1)
    return v + q[..., :1] * t + torch.linalg.cross(u, t, dim=-1)


def quat_apply_inverse(q: Tensor, v: Tensor) -> Tensor:
    """Rotate the vectors v (..., 3) by the inverse of the unit quaternions q (..., 4)."""
    return quat_apply(quat_conjugate(q), v)


def quat_from_axis_angle(axis: Tensor, angle: Tensor) -> Tensor:
    """Quaternion (..., 4) of a rotation by angle (...) radians about the unit axis (..., 3)."""
    half = 0.5 * angle.unsqueeze(-1)
    return torch.cat((torch.cos(half), axis * torch.sin(half)), dim=-1)


def quat_to_matrix(q: Tensor) -> Tensor:
    """Rotation matrix (..., 3, 3) of the unit quaternion q (..., 4)."""
    w, x, y, z = q.unbind(-1)
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    return torch.stack(
        (
            1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy),
            2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx),
            2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy),
        ),
        dim=-1,
    ).unflatten(-1, (3, 3))


def matrix_first_two_columns(q: Tensor) -> Tensor:
    """6-D orientation (..., 6): the first two rotation-matrix columns, [R00, R10, R20, R01, R11, R21]."""
    return quat_to_matrix(q)[..., :, :2].transpose(-1, -2).flatten(-2)


def quat_error_magnitude(a: Tensor, b: Tensor) -> Tensor:
    """Angle (...) in radians, in [0, π], of the rotation a⁻¹ ⊗ b (q and -q give 0)."""
    d = quat_mul(quat_conjugate(a), b)
    return 2.0 * torch.atan2(d[..., 1:].norm(dim=-1), d[..., 0].abs())


def yaw_quat(q: Tensor) -> Tensor:
    """Heading part of q: the rotation about world z by q's yaw angle, as (cos, 0, 0, sin) of half the yaw."""
    w, x, y, z = q.unbind(-1)
    yaw = torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    half = 0.5 * yaw
    zero = torch.zeros_like(half)
    return torch.stack((torch.cos(half), zero, zero, torch.sin(half)), dim=-1)


def quat_slerp(a: Tensor, b: Tensor, t: Tensor | float) -> Tensor:
    """Spherical interpolation along the shortest arc; t (broadcastable to a's leading dims) in [0, 1]."""
    t = torch.as_tensor(t, dtype=a.dtype, device=a.device).unsqueeze(-1)
    dot = (a * b).sum(dim=-1, keepdim=True)
    b = torch.where(dot < 0, -b, b)
    cos = dot.abs().clamp(max=1.0)
    theta = torch.acos(cos)
    sin = torch.sin(theta)
    small = sin < _SMALL_ANGLE
    safe_sin = torch.where(small, torch.ones_like(sin), sin)
    wa = torch.where(small, 1.0 - t, torch.sin((1.0 - t) * theta) / safe_sin)
    wb = torch.where(small, t, torch.sin(t * theta) / safe_sin)
    return quat_normalize(wa * a + wb * b)


def axis_angle_from_quat(q: Tensor) -> Tensor:
    """Rotation vector (..., 3): unit axis times angle in [0, π] (the sign of q does not matter)."""
    q = torch.where(q[..., :1] < 0, -q, q)
    v = q[..., 1:]
    s = v.norm(dim=-1, keepdim=True)
    w = q[..., :1]
    angle = 2.0 * torch.atan2(s, w)
    # angle / sin(angle / 2) -> 2 / w as the angle goes to 0
    scale = torch.where(s > _SMALL_ANGLE, angle / s.clamp_min(_SMALL_ANGLE), 2.0 / w.clamp_min(_SMALL_ANGLE))
    return v * scale
