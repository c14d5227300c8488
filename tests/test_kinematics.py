"""MJCF loading and batched forward kinematics, checked against MuJoCo's own kinematics."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

from conftest import TEST_DEVICE
from syncfree.core.counters import count_syncs, cuda_sync_errors
from syncfree.envs.math import (
    axis_angle_from_quat,
    matrix_first_two_columns,
    quat_apply,
    quat_apply_inverse,
    quat_conjugate,
    quat_error_magnitude,
    quat_from_axis_angle,
    quat_mul,
    quat_normalize,
    quat_slerp,
    quat_to_matrix,
    yaw_quat,
)
from syncfree.envs.robots import Kinematics, RobotModel, default_robot_path, load_robot
from syncfree.errors import UserError

DEVICE = torch.device(TEST_DEVICE)

TREE_XML = """<mujoco>
  <compiler angle="radian"/>
  <worldbody>
    <geom type="plane" size="1 1 0.1"/>
    <body name="base" pos="0 0 1" quat="0.9 0.1 0.2 0.3">
      <freejoint/>
      <geom size="0.1"/>
      <body name="a" pos="0.1 0.2 0.3" quat="0.7 0.2 -0.3 0.1">
        <joint name="ja" axis="1 2 3" pos="0.05 -0.1 0.2" ref="0.4"/>
        <geom size="0.05"/>
        <body name="welded" pos="0.2 0 0" euler="0.3 0.2 0.1">
          <geom size="0.05"/>
          <body name="c" pos="0 0.1 0">
            <joint name="jc" axis="0 1 0" pos="0.1 0 0" range="-1 1"/>
            <geom size="0.05"/>
          </body>
        </body>
      </body>
      <body name="b" pos="-0.1 0 0">
        <joint name="jb" axis="0 0 1"/>
        <geom size="0.05"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="jb" ctrlrange="-2 2" gear="3"/>
    <position joint="jc" kp="10" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""
"""A small tree with what G1 lacks: joint anchors off the body origin, a joint `ref`, a welded body between two
jointed ones, an oblique axis, and rotated body frames."""


@pytest.fixture(scope="module")
def g1() -> RobotModel:
    return load_robot()


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> RobotModel:
    path = tmp_path_factory.mktemp("tree") / "tree.xml"
    path.write_text(TREE_XML)
    return load_robot(path)


def random_states(robot: RobotModel, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """MuJoCo qpos (n, 7 + J) with random root poses, joints uniform within limits, and qvel (n, 6 + J)."""
    rng = np.random.default_rng(seed)
    num_joints = len(robot.joint_names)
    qpos = np.zeros((n, 7 + num_joints))
    qpos[:, :3] = rng.normal(size=(n, 3))
    quat = rng.normal(size=(n, 4))
    qpos[:, 3:7] = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
    lower = np.maximum(robot.joint_lower.numpy(), -math.pi)
    upper = np.minimum(robot.joint_upper.numpy(), math.pi)
    qpos[:, 7:] = rng.uniform(lower, upper, size=(n, num_joints))
    qvel = rng.normal(size=(n, 6 + num_joints))
    return qpos, qvel


def mujoco_reference(robot: RobotModel, qpos: np.ndarray, qvel: np.ndarray) -> dict[str, np.ndarray]:
    """MuJoCo's body frame poses and world velocities of the body frame origins."""
    model = mujoco.MjModel.from_xml_path(robot.path)
    data = mujoco.MjData(model)
    out = {key: [] for key in ("pos", "quat", "lin_vel", "ang_vel")}
    res = np.zeros(6)
    for qp, qv in zip(qpos, qvel, strict=True):
        data.qpos[:] = qp
        data.qvel[:] = qv
        mujoco.mj_forward(model, data)
        out["pos"].append(data.xpos[1:].copy())
        out["quat"].append(data.xquat[1:].copy())
        lin, ang = [], []
        for body in range(1, model.nbody):
            # [angular; linear] in the world frame, the linear part at the body's centre of mass (xipos),
            # not at its frame origin (that is what mjOBJ_XBODY would give): shift it to the origin
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_BODY, body, res, 0)
            ang.append(res[:3].copy())
            lin.append(res[3:] + np.cross(res[:3], data.xpos[body] - data.xipos[body]))
        out["lin_vel"].append(lin)
        out["ang_vel"].append(ang)
    return {key: np.asarray(value) for key, value in out.items()}


def run_kinematics(robot: RobotModel, qpos: np.ndarray, qvel: np.ndarray, dtype: torch.dtype):
    kin = Kinematics(robot, DEVICE, dtype=dtype)
    qp = torch.tensor(qpos, dtype=dtype, device=DEVICE)
    qv = torch.tensor(qvel, dtype=dtype, device=DEVICE)
    root_quat = qp[:, 3:7]
    pos, quat = kin.forward(qp[:, :3], root_quat, qp[:, 7:])
    # MuJoCo's free joint qvel: world linear velocity of the root origin, then the angular velocity in the root frame
    lin, ang = kin.velocities(pos, quat, qv[:, :3], quat_apply(root_quat, qv[:, 3:6]), qv[:, 6:])
    return {"pos": pos, "quat": quat, "lin_vel": lin, "ang_vel": ang}


def assert_matches(ours: dict[str, torch.Tensor], ref: dict[str, np.ndarray], pose_tol: float, vel_tol: float):
    got = {key: value.double().cpu().numpy() for key, value in ours.items()}
    np.testing.assert_allclose(got["pos"], ref["pos"], atol=pose_tol, rtol=0)
    # q and -q are the same rotation
    np.testing.assert_allclose(np.abs((got["quat"] * ref["quat"]).sum(-1)), 1.0, atol=pose_tol, rtol=0)
    np.testing.assert_allclose(got["lin_vel"], ref["lin_vel"], atol=vel_tol, rtol=0)
    np.testing.assert_allclose(got["ang_vel"], ref["ang_vel"], atol=vel_tol, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_g1_kinematics_match_mujoco(g1: RobotModel, dtype: torch.dtype) -> None:
    qpos, qvel = random_states(g1, 16, seed=0)
    tol = 1e-4 if dtype == torch.float32 else 1e-6  # the model's constants are float32
    assert_matches(run_kinematics(g1, qpos, qvel, dtype), mujoco_reference(g1, qpos, qvel), tol, 10 * tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_anchors_refs_and_welded_bodies_match_mujoco(tree: RobotModel, dtype: torch.dtype) -> None:
    assert tree.body_joint.tolist() == [-1, 0, -1, 1, 2]
    assert tree.parent.tolist() == [-1, 0, 1, 2, 0]
    assert tree.joint_ref.tolist() == pytest.approx([0.4, 0.0, 0.0])
    assert tree.joint_anchor.abs().sum() > 0
    qpos, qvel = random_states(tree, 16, seed=1)
    tol = 1e-4 if dtype == torch.float32 else 1e-6
    assert_matches(run_kinematics(tree, qpos, qvel, dtype), mujoco_reference(tree, qpos, qvel), tol, 10 * tol)


def test_tree_properties(tree: RobotModel) -> None:
    assert tree.breadth_first_joint_order() == ("ja", "jb", "jc")
    assert tree.joint_names == ("ja", "jc", "jb")  # MJCF (depth-first) order
    # ja: no actuator; jc: a position servo, no force range; jb: a motor, ctrlrange times gear
    assert tree.effort_limit.tolist() == [math.inf, math.inf, 6.0]
    assert tree.joint_lower.tolist() == [-math.inf, -1.0, -math.inf]
    assert tree.body_index(["c", "base"]).tolist() == [3, 0]
    assert tree.joint_index(["jc"]).tolist() == [1]
    with pytest.raises(UserError, match="no body named 'nope'"):
        tree.body_index(["base", "nope"])
    with pytest.raises(UserError, match="no joint named 'nope'"):
        tree.joint_index(["nope"])


def test_shipped_g1(g1: RobotModel) -> None:
    path = default_robot_path()
    assert path.is_file() and (path.parent / "NOTICE").is_file()
    assert "mesh=" not in path.read_text()
    model = mujoco.MjModel.from_xml_path(str(path))  # standalone: no include, no mesh files
    assert model.nmesh == 0 and not (model.geom_type == mujoco.mjtGeom.mjGEOM_MESH).any()
    assert (model.geom_contype > 0).sum() == 30  # the floor and the 29 primitive collision geoms
    assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "floor") >= 0
    assert Path(g1.path) == path.resolve()
    assert len(g1.joint_names) == 29 and g1.body_names[0] == "pelvis"
    assert g1.parent[0] == -1 and g1.body_joint[0] == -1
    assert g1.root_height == pytest.approx(0.793)
    order = g1.breadth_first_joint_order()
    assert order[:6] == (
        "left_hip_pitch_joint", "right_hip_pitch_joint", "waist_yaw_joint",
        "left_hip_roll_joint", "right_hip_roll_joint", "waist_roll_joint",
    )
    assert order[-1] == "right_wrist_yaw_joint" and sorted(order) == sorted(g1.joint_names)
    assert g1.effort_limit[g1.joint_index(["left_knee_joint", "right_knee_joint"])].tolist() == [139.0, 139.0]
    assert bool((g1.joint_inertia > 0).all()) and bool((g1.joint_inertia >= g1.armature).all())
    assert bool((g1.joint_lower < g1.joint_upper).all()) and bool(g1.joint_upper.isfinite().all())
    assert load_robot(path) is g1  # cached per unchanged file


def test_holosoma_clip_body_positions(g1: RobotModel) -> None:
    spec = importlib.util.find_spec("holosoma")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("holosoma is not installed")
    clip = Path(next(iter(spec.submodule_search_locations))).joinpath(
        "data", "motions", "g1_29dof", "whole_body_tracking", "sub3_largebox_003_mj.npz"
    )
    if not clip.is_file():
        pytest.skip(f"{clip} is missing")
    data = np.load(clip)
    assert tuple(str(n) for n in data["joint_names"]) == g1.joint_names
    frames = [0, 100, 200, 324]
    qpos = torch.tensor(data["joint_pos"][frames], dtype=torch.float32, device=DEVICE)
    pos, quat = Kinematics(g1, DEVICE).forward(qpos[:, :3], qpos[:, 3:7], qpos[:, 7:])
    names = [str(n) for n in data["body_names"]]
    shared = [name for name in g1.body_names if name in names]
    assert len(shared) >= 29
    index = g1.body_index(shared).to(DEVICE)
    columns = [names.index(name) for name in shared]
    theirs_quat = torch.tensor(data["body_quat_w"][frames][:, columns], dtype=torch.float32, device=DEVICE)
    assert quat_error_magnitude(quat[:, index], theirs_quat).max() < 1e-3
    distance = np.linalg.norm(pos[:, index].cpu().numpy() - data["body_pos_w"][frames][:, columns], axis=-1)
    # The clip was made with Unitree's revised waist (its model has a waist_support_link): the waist roll and
    # pitch joints sit 9 mm higher than in this MJCF, which moves those two frame origins by 9-10.3 mm and the
    # arms, whose offsets from the torso differ as well, by at most 5.3 mm. Every orientation agrees.
    waist = [shared.index("waist_roll_link"), shared.index("torso_link")]
    assert distance.max(axis=0)[waist].max() < 0.011
    assert np.delete(distance, waist, axis=1).max() < 0.01
    assert distance[:, : shared.index("waist_roll_link")].max() < 1e-4  # the legs and the waist yaw: same model


def test_forward_and_velocities_have_no_host_sync(g1: RobotModel) -> None:
    kin = Kinematics(g1, DEVICE)
    n = 64
    generator = torch.Generator().manual_seed(0)
    root_pos = torch.randn(n, 3, generator=generator).to(DEVICE)
    root_quat = quat_normalize(torch.randn(n, 4, generator=generator)).to(DEVICE)
    joint_pos = torch.rand(n, kin.num_joints, generator=generator).to(DEVICE)
    joint_vel = torch.randn(n, kin.num_joints, generator=generator).to(DEVICE)
    with torch.inference_mode(), cuda_sync_errors(DEVICE):
        with count_syncs() as counts:
            pos, quat = kin.forward(root_pos, root_quat, joint_pos)
        assert counts.syncs == 0, counts.sync_ops
        assert counts.num_ops < 300  # one batched pass per tree level, not per body
        with count_syncs() as counts:
            lin, ang = kin.velocities(pos, quat, root_pos, root_pos, joint_vel)
        assert counts.syncs == 0, counts.sync_ops
    assert pos.shape == (n, kin.num_bodies, 3) and quat.shape == (n, kin.num_bodies, 4)
    assert lin.shape == ang.shape == (n, kin.num_bodies, 3)
    assert pos.device.type == DEVICE.type and pos.dtype == torch.float32


BAD_MJCF = {
    "compile": ("<mujoco><worldbody><body name='x'><joint type='spiral'/></body></worldbody></mujoco>", "spiral"),
    "no_free_root": (
        "<mujoco><worldbody><body name='fixed_base'><joint name='j' type='hinge'/><geom size='1'/></body>"
        "</worldbody></mujoco>",
        "no free-floating root body",
    ),
    "slide": (
        "<mujoco><worldbody><body name='root'><freejoint/><geom size='1'/>"
        "<body name='arm'><joint name='rail' type='slide'/><geom size='1'/></body></body></worldbody></mujoco>",
        "'rail'",
    ),
    "two_joints": (
        "<mujoco><worldbody><body name='root'><freejoint/><geom size='1'/>"
        "<body name='elbow'><joint name='j1' axis='1 0 0'/><joint name='j2' axis='0 1 0'/><geom size='1'/></body></body></worldbody></mujoco>",
        "'elbow'",
    ),
    "no_joints": (
        "<mujoco><worldbody><body name='brick'><freejoint/><geom size='1'/></body></worldbody></mujoco>",
        "no actuated (hinge) joints",
    ),
    "second_tree": (
        "<mujoco><worldbody><body name='root'><freejoint/><geom size='1'/>"
        "<body name='arm'><joint name='j'/><geom size='1'/></body></body>"
        "<body name='table'><geom size='1'/></body></worldbody></mujoco>",
        "'table'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_MJCF))
def test_bad_mjcf_is_a_one_line_user_error(tmp_path: Path, case: str) -> None:
    text, culprit = BAD_MJCF[case]
    path = tmp_path / f"{case}.xml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_robot(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path.resolve()) in message and culprit in message


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.xml"
    with pytest.raises(UserError, match="not found") as info:
        load_robot(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def random_quats(n: int, seed: int = 0) -> torch.Tensor:
    return quat_normalize(torch.randn(n, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))


def test_quat_apply_matches_matrix_and_inverse() -> None:
    q = random_quats(32)
    v = torch.randn(32, 3, dtype=torch.float64)
    rotated = quat_apply(q, v)
    torch.testing.assert_close(rotated, (quat_to_matrix(q) @ v.unsqueeze(-1)).squeeze(-1))
    torch.testing.assert_close(quat_apply_inverse(q, rotated), v)
    torch.testing.assert_close(quat_apply(quat_mul(q, quat_conjugate(q)), v), v)
    # broadcasting: one quaternion per row, many vectors
    many = torch.randn(32, 5, 3, dtype=torch.float64)
    torch.testing.assert_close(quat_apply(q[:, None], many)[:, 2], quat_apply(q, many[:, 2]))
    torch.testing.assert_close(quat_apply(q[0], many), (quat_to_matrix(q[0]) @ many.unsqueeze(-1)).squeeze(-1))
    # composition: (a ⊗ b) v = a (b v)
    a, b = random_quats(32, 1), random_quats(32, 2)
    torch.testing.assert_close(quat_apply(quat_mul(a, b), v), quat_apply(a, quat_apply(b, v)))


def test_quat_error_axis_angle_and_yaw() -> None:
    q = random_quats(64)
    assert quat_error_magnitude(q, -q).abs().max() < 1e-6
    axis = torch.nn.functional.normalize(torch.randn(64, 3, dtype=torch.float64), dim=-1)
    angle = torch.linspace(0.0, math.pi - 1e-3, 64, dtype=torch.float64)
    rotation = quat_from_axis_angle(axis, angle)
    torch.testing.assert_close(quat_error_magnitude(q, quat_mul(q, rotation)), angle)
    torch.testing.assert_close(axis_angle_from_quat(rotation), axis * angle[:, None])
    torch.testing.assert_close(axis_angle_from_quat(-rotation), axis * angle[:, None])
    assert axis_angle_from_quat(torch.tensor([1.0, 0.0, 0.0, 0.0])).abs().max() == 0
    yaw = torch.linspace(-3.1, 3.1, 32, dtype=torch.float64)
    pure_yaw = quat_from_axis_angle(torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64).expand(32, 3), yaw)
    torch.testing.assert_close(yaw_quat(pure_yaw), pure_yaw)
    # the heading of a yaw after a tilt is that yaw; the remaining rotation keeps the body x axis in the x-z plane
    tilt = quat_from_axis_angle(torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).expand(32, 3), yaw / 4)
    torch.testing.assert_close(yaw_quat(quat_mul(pure_yaw, tilt)), pure_yaw)
    forward = quat_apply(quat_mul(quat_conjugate(yaw_quat(q)), q), torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    assert forward[:, 1].abs().max() < 1e-9


def test_slerp_and_six_d_layout() -> None:
    a, b = random_quats(16, 3), random_quats(16, 4)
    torch.testing.assert_close(quat_slerp(a, b, 0.0), a)
    torch.testing.assert_close(quat_error_magnitude(quat_slerp(a, b, 1.0), b), torch.zeros(16, dtype=torch.float64))
    middle = quat_slerp(a, b, torch.full((16,), 0.5, dtype=torch.float64))
    torch.testing.assert_close(quat_error_magnitude(a, middle), quat_error_magnitude(b, middle))
    torch.testing.assert_close(quat_slerp(a, a, 0.3), a)  # zero angle: no division by zero
    matrix = quat_to_matrix(a)
    six = matrix_first_two_columns(a)
    torch.testing.assert_close(six, torch.stack([matrix[:, i, j] for j in (0, 1) for i in (0, 1, 2)], dim=-1))
    # 90° about z: x -> y, y -> -x
    quarter = quat_from_axis_angle(torch.tensor([0.0, 0.0, 1.0]), torch.tensor(math.pi / 2))
    torch.testing.assert_close(matrix_first_two_columns(quarter), torch.tensor([0.0, 1.0, 0.0, -1.0, 0.0, 0.0]))
