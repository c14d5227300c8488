"""g1-track's mirror symmetry (`G1TrackEnv.mirror`): the reflection y -> -y of its policy and critic observations and
of its actions.

- it undoes itself, keeps shapes and dtypes (`check_fits`) and moves every term;
- kinematics pins the joint map: forward kinematics of the mirrored joint angles puts every body where its partner's
  mirror image is (position y -> -y, orientation S R S);
- observations: an env in a state and a second env in the mirrored state (root pose and velocities, joint positions
  and velocities, last actions, and a mirrored reference motion library for the command) observe mirror images of
  each other, term by term, over a whole history window.

Not covered: the `tokenizer` group (the token policy is outside symmetry), observation noise (turned off in the
comparison; it is symmetric uniform noise), and the dynamics and rewards of the mirrored states.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from syncfree.algo.symmetry import check_fits
from syncfree.envs.builtin.g1_track import TRACKED_BODIES, G1TrackConfig, G1TrackEnv
from syncfree.envs.builtin.g1_track.mirror import build_reflection, partner_name
from syncfree.envs.math import quat_to_matrix
from syncfree.envs.mirror import Reflection
from syncfree.envs.motion.library import MotionLibrary
from syncfree.envs.robots import Kinematics

GROUPS = ("policy", "critic")
CONFIGS = {"default": {},
           "short history, other frames": {"history": 2, "policy_command_frames": (0, 3), "critic_command_frames": (2,)},
           "no history, one frame": {"history": 1, "policy_command_frames": (5,), "critic_command_frames": (0, 1)}}
FLIP = torch.tensor([1.0, -1.0, 1.0])
"""S = diag(1, -1, 1): a polar vector's reflection."""


def make(**cfg: object) -> G1TrackEnv:
    return G1TrackEnv(4, "cpu", seed=3, cfg=G1TrackConfig(**cfg))  # type: ignore[arg-type]


def body_partners(names: tuple[str, ...] | list[str]) -> list[int]:
    return [list(names).index(partner_name(name)) for name in names]


def reflect_quat(q: torch.Tensor) -> torch.Tensor:
    """The quaternion of S R S (wxyz)."""
    return q * torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=q.dtype)


def term_slices(env: G1TrackEnv, group: str) -> dict[str, slice]:
    """Each term's columns in the group, from the observation manager's own term widths and history lengths."""
    slices, start = {}, 0
    for name, state in env.observations._terms[group].items():
        width = state.dim * max(state.spec.history, 1)
        slices[name] = slice(start, start + width)
        start += width
    assert (start,) == env.obs_shapes[group]
    return slices


@pytest.fixture(scope="module")
def env() -> G1TrackEnv:
    return make()


def test_the_mirror_undoes_itself_and_fits_the_env(env: G1TrackEnv) -> None:
    reflect = env.mirror()
    assert isinstance(reflect, Reflection)
    check_fits(reflect, env, "G1TrackEnv.mirror()")
    generator = torch.Generator().manual_seed(0)
    for group in GROUPS:
        x = torch.randn(5, *env.obs_shapes[group], generator=generator)
        assert torch.equal(reflect.observations(group, reflect.observations(group, x)), x)
        mirrored = reflect.observations(group, x)
        for name, columns in term_slices(env, group).items():
            assert not torch.equal(mirrored[:, columns], x[:, columns]), f"{group}/{name} is left as it is"
    actions = torch.randn(5, env.action_spec.size, generator=generator)
    assert torch.equal(reflect.actions(reflect.actions(actions)), actions)
    with pytest.raises(KeyError):
        reflect.observations("tokenizer", actions)


def test_the_joint_map_mirrors_forward_kinematics(env: G1TrackEnv) -> None:
    """Random joint angles within limits, root at the origin: the mirrored angles move every body (the tracked ones
    among them) to its partner's mirror image. A wrong joint pair or sign moves some body elsewhere."""
    robot, reflect = env.robot, env.mirror()
    kinematics = Kinematics(robot, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    n, joints = 64, len(robot.joint_names)
    q = robot.joint_lower + (robot.joint_upper - robot.joint_lower) * torch.rand(n, joints, generator=generator)
    q_mirrored = reflect.actions(q)
    root_pos, root_quat = torch.zeros(n, 3, dtype=torch.float64), torch.zeros(n, 4, dtype=torch.float64)
    root_quat[:, 0] = 1.0
    pos, quat = kinematics.forward(root_pos, root_quat, q.double())
    pos_m, quat_m = kinematics.forward(root_pos, root_quat, q_mirrored.double())
    partner = body_partners(robot.body_names)
    assert set(TRACKED_BODIES) <= set(robot.body_names)
    assert sum(p != b for b, p in enumerate(partner)) >= 2 * 12  # legs and arms pair up
    flip = FLIP.double()
    torch.testing.assert_close(pos_m, pos[:, partner] * flip, atol=1e-4, rtol=0)  # the model is symmetric to 1e-5 m
    reflected = flip[:, None] * quat_to_matrix(quat[:, partner]) * flip[None, :]
    torch.testing.assert_close(quat_to_matrix(quat_m), reflected, atol=1e-4, rtol=0)
    assert (pos_m - pos * flip).abs().max() > 0.1  # the mirrored pose is not the body-by-body reflection alone


def mirror_motions(motions: MotionLibrary, reflect: Reflection, bodies: list[int]) -> None:
    """Replace the library's frames by their mirror images (bodies listed in TRACKED_BODIES order)."""
    flip, axial = FLIP, -FLIP
    motions.joint_pos = reflect.actions(motions.joint_pos)
    motions.joint_vel = reflect.actions(motions.joint_vel)
    motions.root_pos = motions.root_pos * flip
    motions.root_quat = reflect_quat(motions.root_quat)
    motions.root_lin_vel = motions.root_lin_vel * flip
    motions.root_ang_vel = motions.root_ang_vel * axial
    motions.body_pos_w = motions.body_pos_w[:, bodies] * flip
    motions.body_quat_w = reflect_quat(motions.body_quat_w[:, bodies])
    motions.body_lin_vel_w = motions.body_lin_vel_w[:, bodies] * flip
    motions.body_ang_vel_w = motions.body_ang_vel_w[:, bodies] * axial


def random_state(env: G1TrackEnv, generator: torch.Generator) -> dict[str, torch.Tensor]:
    n, joints = env.num_envs, len(env.robot.joint_names)
    quat = torch.randn(n, 4, generator=generator)
    lower, upper = env.robot.joint_lower, env.robot.joint_upper
    return {"root_pos": torch.randn(n, 3, generator=generator), "root_quat": quat / quat.norm(dim=-1, keepdim=True),
            "root_lin_vel": torch.randn(n, 3, generator=generator),
            "root_ang_vel": torch.randn(n, 3, generator=generator),
            "joint_pos": lower + (upper - lower) * torch.rand(n, joints, generator=generator),
            "joint_vel": torch.randn(n, joints, generator=generator),
            "actions": torch.randn(n, joints, generator=generator)}


def mirror_state(state: dict[str, torch.Tensor], reflect: Reflection) -> dict[str, torch.Tensor]:
    return {"root_pos": state["root_pos"] * FLIP, "root_quat": reflect_quat(state["root_quat"]),
            "root_lin_vel": state["root_lin_vel"] * FLIP, "root_ang_vel": state["root_ang_vel"] * -FLIP,
            "joint_pos": reflect.actions(state["joint_pos"]), "joint_vel": reflect.actions(state["joint_vel"]),
            "actions": reflect.actions(state["actions"])}


def put(env: G1TrackEnv, state: dict[str, torch.Tensor]) -> None:
    physics = env.physics
    for name in ("root_pos", "root_quat", "root_lin_vel", "root_ang_vel", "joint_pos", "joint_vel"):
        getattr(physics, name).copy_(state[name])
    env.update_kinematics()
    env.action.process(state["actions"])


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_mirrored_state_observes_the_mirrored_observations(cfg: dict[str, object]) -> None:
    """Every policy and critic term, history frames and command frames included: the env put in the mirrored state,
    tracking the mirrored reference motion, observes the mirror of what the env in the original state observes."""
    env, mirrored = make(**cfg), make(**cfg)
    reflect = env.mirror()
    mirror_motions(mirrored.command.motions, reflect, body_partners(TRACKED_BODIES))
    for e in (env, mirrored):
        e.observations.groups = {k: dataclasses.replace(g, noise=False) for k, g in e.observations.groups.items()}
        e.reset()
    generator = torch.Generator().manual_seed(2)
    motions = env.command.motions
    clips = torch.randint(0, motions.num_clips, (env.num_envs,), generator=generator)
    steps = (torch.rand(env.num_envs, generator=generator) * motions.clip_length[clips]).long()
    for e in (env, mirrored):
        e.command.clip_ids.copy_(clips)
        e.command.time_steps.copy_(steps)
        e.command.frame.copy_(motions.frame_index(clips, steps))
    for _ in range(env.cfg.history):  # fills the whole history window with fresh states
        state = random_state(env, generator)
        put(env, state)
        put(mirrored, mirror_state(state, reflect))
        obs, obs_mirrored = env.observations.compute(), mirrored.observations.compute()
    torch.testing.assert_close(mirrored.action.targets, reflect.actions(env.action.targets))
    for group in GROUPS:
        expected = reflect.observations(group, obs[group])
        for name, columns in term_slices(env, group).items():
            error = float((obs_mirrored[group][:, columns] - expected[:, columns]).abs().max())
            assert error < 1e-4, f"{group}/{name}: the mirrored env observes the mirror image only within {error:.2e}"
            assert not torch.allclose(obs[group][:, columns], expected[:, columns], atol=1e-3), f"{group}/{name}"


def test_an_unknown_term_or_width_is_refused(env: G1TrackEnv) -> None:
    def build(layout: list[tuple[str, int]]) -> Reflection:
        return build_reflection(env.robot, env.default_joint_pos, {"policy": layout}, "cpu")

    assert len(build([("joint_pos", 3 * 29), ("base_lin_vel", 3)]).groups["policy"]) == 3 * 29 + 3
    with pytest.raises(ValueError, match="no reflection is known for the policy term 'height_scan'"):
        build([("joint_pos", 29), ("height_scan", 10)])
    with pytest.raises(ValueError, match="'base_ang_vel' has 4 entries, not a whole number of 3-entry frames"):
        build([("base_ang_vel", 4)])
    lopsided = env.default_joint_pos.clone()
    lopsided[env.robot.joint_names.index("left_knee_joint")] += 0.1
    with pytest.raises(ValueError, match="default pose is not its own mirror image"):
        build_reflection(env.robot, lopsided, {}, "cpu")
