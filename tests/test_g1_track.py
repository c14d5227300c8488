"""g1-track: observation terms, seeded resets, env state round trips, and that tracking is rewarded."""

from __future__ import annotations

import copy

import pytest
import torch

from conftest import assert_same_state
from syncfree.config import PerfConfig
from syncfree.envs.builtin.g1_track import G1TrackConfig, G1TrackEnv
from syncfree.errors import UserError

ALL_GROUPS = ("policy", "critic", "tokenizer")


def make(num_envs: int = 8, seed: int = 0, perf: PerfConfig | None = None, **cfg) -> G1TrackEnv:
    return G1TrackEnv(num_envs, "cpu", seed, cfg=G1TrackConfig(**cfg), perf=perf)


def run(env: G1TrackEnv, steps: int, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    results = []
    for _ in range(steps):
        results.append(env.step(torch.randn(env.num_envs, 29, generator=g)))
    return results


def test_every_term_has_its_documented_shape():
    env = make(observation_groups=ALL_GROUPS)
    joints, bodies, h = 29, 14, 10
    expected = {
        "policy": {"command": 3 * 2 * joints, "motion_anchor_ori_b": 6, "projected_gravity": 3 * h,
                   "base_ang_vel": 3 * h, "joint_pos": joints * h, "joint_vel": joints * h, "actions": joints * h},
        "critic": {"command": 5 * 2 * joints, "motion_anchor_pos_b": 3, "motion_anchor_ori_b": 6,
                   "body_pos": 3 * bodies, "body_ori": 6 * bodies, "base_lin_vel": 3, "base_ang_vel": 3,
                   "projected_gravity": 3, "joint_pos": joints, "joint_vel": joints, "actions": joints},
        "tokenizer": {"encoder_index": 1, "future_joint_pos": 10 * joints, "future_joint_vel": 10 * joints,
                      "future_keypoints": 10 * 5 * 3},
    }
    terms = env.observations._terms
    for group, dims in expected.items():
        got = {name: s.dim * max(s.spec.history, 1) for name, s in terms[group].items()}
        assert got == dims, group
    obs = env.reset()
    assert obs["policy"].shape == (8, sum(expected["policy"].values()))
    assert obs["critic"].shape == (8, sum(expected["critic"].values()))
    for name, dim in expected["tokenizer"].items():
        assert obs[f"tokenizer/{name}"].shape == (8, dim)
    assert env.obs_shapes == {k: tuple(v.shape[1:]) for k, v in obs.items()}
    step = run(env, 1)[0]
    assert step.reward.shape == (8,) and step.terminated.dtype == torch.bool
    assert all(torch.isfinite(v).all() for v in step.obs.values())
    assert set(obs["tokenizer/encoder_index"].flatten().tolist()) <= {0.0, 1.0}


def test_resets_are_seeded():
    a, b, c = make(seed=4), make(seed=4), make(seed=5)
    obs_a, obs_b, obs_c = a.reset(), b.reset(), c.reset()
    assert torch.equal(obs_a["policy"], obs_b["policy"])
    assert not torch.equal(a.command.time_steps, c.command.time_steps)
    for ra, rb in zip(run(a, 30), run(b, 30), strict=True):
        assert torch.equal(ra.obs["policy"], rb.obs["policy"]) and torch.equal(ra.reward, rb.reward)
    assert not torch.equal(obs_a["policy"], obs_c["policy"])


def test_env_state_round_trips():
    a = make(num_envs=16, seed=1)
    a.reset()
    run(a, 20, seed=1)
    a.end_iteration()  # sampling weights leave their uniform start
    state = copy.deepcopy(a.state_dict())
    b = make(num_envs=16, seed=99)
    b.reset()
    b.load_state_dict(state)
    assert_same_state(a.state_dict(), b.state_dict())
    for ra, rb in zip(run(a, 30, seed=2), run(b, 30, seed=2), strict=True):
        assert torch.equal(ra.obs["policy"], rb.obs["policy"])
        assert torch.equal(ra.obs["critic"], rb.obs["critic"])
        assert torch.equal(ra.reward, rb.reward) and torch.equal(ra.terminated, rb.terminated)


def test_state_of_another_env_count_is_refused():
    a, b = make(num_envs=4), make(num_envs=8)
    with pytest.raises(UserError, match="4 envs saved"):
        b.load_state_dict(a.state_dict())


def tracking_run(env: G1TrackEnv, steps: int, oracle: bool) -> tuple[float, float]:
    """Mean reward and mean joint error with reference-following or random actions."""
    env.reset()
    g = torch.Generator().manual_seed(0)
    rewards, errors = [], []
    for _ in range(steps):
        if oracle:
            actions = (env.command.joint_pos - env.default_joint_pos) / env.action.scale
        else:
            actions = torch.randn(env.num_envs, 29, generator=g)
        step = env.step(actions)
        rewards.append(step.reward.mean())
        errors.append((env.command.joint_pos - env.physics.joint_pos).norm(dim=-1).mean())
    return float(torch.stack(rewards).mean()), float(torch.stack(errors).mean())


def test_following_the_reference_is_rewarded():
    oracle = tracking_run(make(num_envs=32, seed=2), 100, oracle=True)
    random = tracking_run(make(num_envs=32, seed=2), 100, oracle=False)
    assert oracle[0] > random[0] + 0.02
    assert oracle[1] < 0.5 * random[1]


def test_conventional_env_side_logging():
    env = make(num_envs=4, perf=PerfConfig.preset("baseline"))
    env.reset()
    actions = torch.randn(4, 29)
    env.step(actions)
    assert torch.equal(env.extras["env_actions"], actions) and env.extras["env_actions"].device.type == "cpu"
    log = env.pop_log()
    assert {"sampling/min_prob", "sampling/max_prob", "sampling/mean_prob"} <= set(log)
    assert {"metrics/error_joint_pos", "episode_reward/body_pos", "episode_termination/time_out"} <= set(log)
    quiet = make(num_envs=4)  # the optimized defaults
    quiet.reset()
    quiet.step(actions)
    assert "env_actions" not in quiet.extras and "sampling/min_prob" not in quiet.pop_log()


def test_unknown_observation_group_is_named():
    with pytest.raises(ValueError, match="unknown observation group"):
        make(observation_groups=("policy", "vision"))


def test_gains_of_a_joint_without_armature_come_from_its_inertia():
    import dataclasses

    from syncfree.envs.physics.torch_pd import pd_gains
    from syncfree.envs.robots import load_robot

    robot = load_robot()
    stiffness, damping = pd_gains(robot)
    bare = dataclasses.replace(robot, armature=torch.where(torch.arange(len(robot.joint_names)) == 2, 0.0,
                                                           robot.armature))
    bare_stiffness, bare_damping = pd_gains(bare)
    others = torch.arange(len(robot.joint_names)) != 2
    assert torch.equal(bare_stiffness[others], stiffness[others]) and torch.equal(bare_damping[others], damping[others])
    assert torch.allclose(bare_stiffness[2] / stiffness[2], robot.joint_inertia[2] / robot.armature[2])
    massless = dataclasses.replace(bare, joint_inertia=torch.where(others, robot.joint_inertia, 0.0))
    with pytest.raises(UserError, match=f"joint {robot.joint_names[2]!r} moves no mass and has no armature"):
        pd_gains(massless)


def test_soft_limits_leave_an_unlimited_joint_unlimited():
    from syncfree.envs.builtin.g1_track.env import soft_limits

    inf = float("inf")
    lower, upper = soft_limits(torch.tensor([-1.0, -inf]), torch.tensor([3.0, inf]))
    assert torch.allclose(lower, torch.tensor([1.0 - 1.8, -inf])) and torch.allclose(upper, torch.tensor([2.8, inf]))


def test_state_of_another_clip_set_is_refused():
    env = G1TrackEnv(4, cfg=G1TrackConfig())
    state = env.state_dict()
    state["command"]["clip_names"] = ["walk", *state["command"]["clip_names"][1:]]
    with pytest.raises(UserError, match=r"trained on \d+ clips \(walk, .*resume with the clips the run was trained on"):
        env.load_state_dict(state)
    state = env.state_dict()
    state["command"]["clip_length"][0] += 1
    with pytest.raises(UserError, match="their lengths differ"):
        env.load_state_dict(state)


def test_the_config_section_reaches_the_env_and_its_defaults_change_nothing():
    from syncfree.envs.builtin.g1_track import G1TrackOptions, make_g1_track
    from syncfree.tasks import make_env

    plain, configured = make_env("g1-track", 4, seed=1), make_g1_track(4, seed=1, options=G1TrackOptions())
    actions = torch.randn(5, 4, len(plain.robot.joint_names), generator=torch.Generator().manual_seed(0))
    for a in actions:
        one, two = plain.step(a), configured.step(a)
        assert all(torch.equal(one.obs[k], two.obs[k]) for k in one.obs) and torch.equal(one.reward, two.reward)

    options = G1TrackOptions(history=3, num_encoders=1, tokenizer_frames=[1, 2], sampler_bin_frames=25,
                             sampler_uniform_ratio=0.5, sampler_cap=2.0, sampler_decay=0.5)
    env = make_g1_track(4, seed=1, options=options, tokenizer=True)
    per_step = plain.obs_shapes["policy"][0] - env.obs_shapes["policy"][0]
    assert per_step > 0 and per_step % 7 == 0  # 10 -> 3 steps of every proprioceptive term
    assert env.command.sampler.num_bins > plain.command.sampler.num_bins  # 25-frame bins instead of 50
    assert (env.command.sampler.cap, env.command.sampler.decay, env.command.sampler.uniform_ratio) == (2.0, 0.5, 0.5)
    assert list(env.cfg.tokenizer_frames) == [1, 2] and env.cfg.num_encoders == 1
    env.reset()
    assert bool((env.command.encoder_index == 0).all())
