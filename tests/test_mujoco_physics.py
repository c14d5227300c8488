"""The MuJoCo backend: reset states, kinematics, contacts, randomization, bad inputs, the env on top, host syncs."""

from __future__ import annotations

import importlib.util
import re
import sys

import mujoco
import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import small_config
from syncfree.bench.timing import count_iteration
from syncfree.config import PerfConfig
from syncfree.envs.builtin.g1_track import DEFAULT_POSE, TRACKED_BODIES, make_g1_track
from syncfree.envs.math import quat_apply_inverse
from syncfree.envs.motion import holosoma_clip_dir, load_clip
from syncfree.envs.physics import MujocoPhysics, MujocoWarpPhysics
from syncfree.envs.robots import load_robot
from syncfree.errors import UserError
from syncfree.train.runner import Runner

STAND_HEIGHT = 0.76
"""Pelvis height at which the default pose's soles touch the floor."""


@pytest.fixture(scope="module")
def robot():
    return load_robot()


@pytest.fixture(scope="module")
def physics(robot):
    physics = MujocoPhysics(robot, 4, num_threads=2)
    yield physics
    physics.close()


def everyone(n: int) -> torch.Tensor:
    return torch.ones(n, dtype=torch.bool)


def stand(physics: MujocoPhysics) -> torch.Tensor:
    """Put every env upright in the default pose, soles on the floor; returns the default joint positions."""
    n, robot = physics.num_envs, physics.robot
    default = torch.tensor([DEFAULT_POSE.get(j, 0.0) for j in robot.joint_names]).expand(n, -1)
    zeros = torch.zeros(n, 3)
    upright = torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(n, 4)
    physics.write_state(everyone(n), torch.tensor([0.0, 0.0, STAND_HEIGHT]).expand(n, 3), upright, zeros, zeros,
                        default, torch.zeros(n, len(robot.joint_names)))
    physics.update_kinematics()
    return default


def mujoco_bodies(physics: MujocoPhysics, env: int) -> mujoco.MjData:
    """MuJoCo's own kinematics and velocities of one env's state as the backend holds it."""
    data = mujoco.MjData(physics.model)
    data.qpos[:] = torch.cat((physics.root_pos[env], physics.root_quat[env], physics.joint_pos[env])).double()
    local_ang_vel = quat_apply_inverse(physics.root_quat[env:env + 1], physics.root_ang_vel[env:env + 1])[0]
    data.qvel[:] = torch.cat((physics.root_lin_vel[env], local_ang_vel, physics.joint_vel[env])).double()
    mujoco.mj_forward(physics.model, data)
    return data


@pytest.mark.skipif(holosoma_clip_dir() is None, reason="holosoma is not installed")
def test_reset_from_a_clip_frame_reproduces_the_clip_bodies(robot, physics) -> None:
    clip = load_clip(holosoma_clip_dir() / "sub3_largebox_003_mj.npz", robot)
    frames = np.array([0, 100, 200, 300])
    rows = {name: torch.as_tensor(getattr(clip, name)[frames]) for name in
            ("root_pos", "root_quat", "root_lin_vel", "root_ang_vel", "joint_pos", "joint_vel")}
    physics.write_state(everyone(4), rows["root_pos"], rows["root_quat"], rows["root_lin_vel"], rows["root_ang_vel"],
                        rows["joint_pos"], rows["joint_vel"])
    physics.update_kinematics()
    # the file's G1 revision puts the waist pivots about 1 cm off the shipped model's (see test_motion)
    tolerance = np.array([0.012 if name == "torso_link" else 0.01 for name in TRACKED_BODIES])
    file_rows = [clip.body_names.index(name) for name in TRACKED_BODIES]
    model_rows = robot.body_index(TRACKED_BODIES).numpy()
    for env, frame in enumerate(frames):
        data = mujoco_bodies(physics, env)
        reference = clip.body_pos_w[frame, file_rows]
        assert (np.linalg.norm(data.xpos[1:][model_rows] - reference, axis=-1) < tolerance).all()
        ours = physics.body_pos_w[env, model_rows].numpy()
        assert (np.linalg.norm(ours - reference, axis=-1) < tolerance).all()


def test_torch_kinematics_agree_with_mujoco_for_the_same_state(robot, physics) -> None:
    generator = torch.Generator().manual_seed(0)
    n, joints = 4, len(robot.joint_names)

    def uniform(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return scale * (2 * torch.rand(*shape, generator=generator) - 1)

    lower, upper = robot.joint_lower, robot.joint_upper
    joint_pos = lower + (upper - lower) * torch.rand(n, joints, generator=generator)
    quat = torch.nn.functional.normalize(uniform(n, 4), dim=-1)
    physics.write_state(everyone(n), uniform(n, 3), quat, uniform(n, 3), uniform(n, 3, scale=2.0), joint_pos,
                        uniform(n, joints, scale=3.0))
    physics.update_kinematics()
    for env in range(n):
        data = mujoco_bodies(physics, env)
        np.testing.assert_allclose(physics.body_pos_w[env].numpy(), data.xpos[1:], atol=1e-5)
        dots = np.abs(np.sum(physics.body_quat_w[env].numpy() * data.xquat[1:], axis=-1))
        np.testing.assert_allclose(dots, 1.0, atol=1e-5)
        velocity = np.zeros((physics.model.nbody - 1, 6))
        for body in range(1, physics.model.nbody):
            mujoco.mj_objectVelocity(physics.model, data, mujoco.mjtObj.mjOBJ_XBODY, body, velocity[body - 1], 0)
        np.testing.assert_allclose(physics.body_ang_vel_w[env].numpy(), velocity[:, :3], atol=1e-4)
        np.testing.assert_allclose(physics.body_lin_vel_w[env].numpy(), velocity[:, 3:], atol=1e-4)


def test_pd_control_in_the_default_pose_stands_on_the_feet(robot, physics) -> None:
    default = stand(physics)
    physics.choose_variants(everyone(4), torch.tensor([0, 3, 12, 15]))  # light and heavy torso, both frictions
    weights = []
    for _ in range(25):  # half a second
        physics.set_joint_targets(default)
        physics.step()
        weights.append(physics.contact_forces[..., 2].sum(-1).clone())
    physics.update_kinematics()
    assert (physics.root_pos[:, 2] > 0.65).all()
    assert (physics.body_pos_w[..., 2] > -0.01).all()  # soft contacts: the soles' contact points sink ~2 mm
    assert (physics.contact_counts > 0).all() and (physics.other_contacts == 0).all()
    # averaged over the last steps the floor carries the robot's weight, with the torso's added mass
    carried = torch.stack(weights[-10:]).mean(0)
    masses = torch.tensor([float(physics.variants[v].body_mass.sum()) for v in (0, 3, 12, 15)])
    assert torch.allclose(carried, masses * 9.81, rtol=0.2)
    assert carried[1] > carried[0] and carried[3] > carried[2]


def test_a_scene_without_a_floor_is_refused(tmp_path) -> None:
    path = tmp_path / "no_floor.xml"
    path.write_text("""<mujoco><worldbody><body name="base" pos="0 0 1"><freejoint/><geom size="0.1"/>
        <body name="arm"><joint name="hinge" axis="0 1 0"/><geom size="0.05" pos="0.2 0 0"/></body></body>
        </worldbody></mujoco>""")
    with pytest.raises(UserError, match="no floor") as error:
        MujocoPhysics(load_robot(path), 2, contact_bodies=("arm",))
    assert "\n" not in str(error.value) and str(path) in str(error.value)


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(UserError, match=re.escape("env.backend='bullet' is invalid; allowed: torch, mujoco, mujoco-warp")):
        make_g1_track(2, backend="bullet")


def test_mujoco_warp_without_its_package_is_refused(robot, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # makes `import mujoco_warp` fail
    with pytest.raises(UserError, match=re.escape("env.backend='mujoco-warp' needs the 'mujoco_warp' package")) as error:
        MujocoWarpPhysics(robot, 2)
    assert "\n" not in str(error.value)


def test_g1_track_steps_on_mujoco_with_contacts_and_free_root() -> None:
    env = make_g1_track(8, backend="mujoco")
    assert env.decimation == 1 and env.step_dt == pytest.approx(0.02)
    assert "undesired_contacts" in env.rewards.terms and "push_root" in env.events.terms
    obs = env.reset()
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        result = env.step(0.3 * torch.randn(8, 29, generator=generator))
        assert all(torch.isfinite(v).all() for v in result.obs.values())
        assert torch.isfinite(result.reward).all()
    reference = env.command.motions.root_pos[env.command.frame]
    assert not torch.allclose(env.physics.root_pos, reference, atol=1e-4)  # the root moves by physics alone
    assert obs["policy"].shape == result.obs["policy"].shape


def test_a_saved_state_continues_bitwise_like_the_uninterrupted_run(robot, physics) -> None:
    default = stand(physics)
    physics.choose_variants(everyone(4), torch.tensor([1, 6, 9, 14]))
    saved = physics.state_dict()

    def run() -> torch.Tensor:
        for step in range(3):
            physics.set_joint_targets(default + 0.05 * step)
            physics.step()
        return torch.cat((physics.root_pos, physics.joint_pos, physics.joint_vel, physics.contact_forces.flatten(1)), 1)

    first = run()
    physics.load_state_dict(saved)
    assert torch.equal(run(), first)


def test_mujoco_env_resets_the_same_by_ids_and_by_mask() -> None:
    """The conventional reset (ids from `nonzero()`) and the sync-free one (a mask) write the same states."""
    envs = [make_g1_track(6, max_episode_length=8, backend="mujoco", perf=PerfConfig(reset_without_sync=flag))
            for flag in (False, True)]
    observations = [env.reset() for env in envs]
    assert all(torch.equal(observations[0][k], observations[1][k]) for k in observations[0])
    generator = torch.Generator().manual_seed(2)
    resets = 0
    for _ in range(12):
        actions = 0.3 * torch.randn(6, 29, generator=generator)
        a, b = (env.step(actions) for env in envs)
        assert torch.equal(a.reward, b.reward) and torch.equal(a.obs["critic"], b.obs["critic"])
        resets += int((a.terminated | a.truncated).sum())
    assert resets >= 6
    assert torch.equal(envs[0].physics.model_variant, envs[1].physics.model_variant)


class _HostCopies(TorchDispatchMode):
    """Counts copies that read or write the backend's float64 host buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name == "aten::copy_" and torch.float64 in (args[0].dtype, args[1].dtype):
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_training_on_mujoco_has_no_host_sync_and_one_host_copy_each_way(physics) -> None:
    cfg = small_config("g1-track")
    cfg.env.num_envs, cfg.env.backend, cfg.iterations = 16, "mujoco", 1
    trainer = Runner(cfg)
    trainer.learn()
    counts = count_iteration(trainer)
    boundary = 1 if trainer.device.type == "cuda" else 0  # on a GPU the state's copy to the host waits for it
    assert counts["syncs_per_step"] == boundary and counts["syncs_per_minibatch"] == 0
    stand(physics)
    with _HostCopies() as copies:
        physics.step()
    assert copies.count == 2


@pytest.mark.skipif(importlib.util.find_spec("mujoco_warp") is None,
                    reason="mujoco_warp is not installed (pip install mujoco-warp: runs on Warp's CPU device too)")
def test_mujoco_warp_matches_mujoco_on_the_cpu(robot, physics) -> None:
    """Same scene, variants and targets on Warp's CPU device: the states agree after 10 control steps.

    Warp compiles its kernels on first use (about 45 s on 2 cores, cached on disk afterwards)."""
    warp = MujocoWarpPhysics(robot, 4)
    generator = torch.Generator().manual_seed(0)
    offsets = 0.1 * torch.randn(10, 4, len(robot.joint_names), generator=generator)
    variants = torch.tensor([0, 3, 12, 15])
    for backend in (physics, warp):
        default = stand(backend)
        backend.choose_variants(everyone(4), variants)
    for step in range(10):
        for backend in (physics, warp):
            backend.set_joint_targets(default + offsets[step])
            backend.step()
    for name in ("root_pos", "root_quat", "joint_pos", "root_lin_vel", "root_ang_vel", "joint_vel"):
        torch.testing.assert_close(getattr(warp, name), getattr(physics, name), atol=1e-3, rtol=0, msg=name)
    torch.testing.assert_close(warp.contact_counts, physics.contact_counts, atol=0, rtol=0)
    torch.testing.assert_close(warp.contact_forces, physics.contact_forces, atol=0.5, rtol=0)
    assert (physics.contact_forces[..., 2].sum(-1) > 100).all()  # the feet carry the robot: forces are compared
