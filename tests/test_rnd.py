"""Random network distillation (`rnd` settings): the same intrinsic rewards, losses, gradients and predictor steps as
rsl_rl 5.5.1's `RandomNetworkDistillation` on the same observations; the reward stored is the env's plus the intrinsic
one, with feed-forward and recurrent policies; no host read in the rollout or the update; the whole-minibatch graph
agreeing with the eager update; a resume continuing exactly (the weight schedule's step count included); one line for
each configuration it cannot serve."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from conftest import (
    grid_config,
    recurrent_config,
    refused_training,
    small_config,
    trained_host_reads,
    update_on_one_rollout,
)
from syncfree.algo.rnd import RND
from syncfree.algo.settings import RNDConfig
from syncfree.core.switches import PerfConfig
from syncfree.errors import UserError
from syncfree.train import checkpoint
from syncfree.train.run import Run
from syncfree.train.runner import Runner

STATE_DIM, ENVS = 4, 16
SCHEDULES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # (syncfree's settings, rsl_rl's weight_schedule)
    "constant": ({}, {}),
    "step": ({"weight_schedule": "step", "final_step": 5, "final_value": 2.0},
             {"mode": "step", "final_step": 5, "final_value": 2.0}),
    "linear": ({"weight_schedule": "linear", "initial_step": 3, "final_step": 9, "final_value": 2.0},
               {"mode": "linear", "initial_step": 3, "final_step": 9, "final_value": 2.0}),
}


def rsl_rl_and_ours(schedule: str, normalize: bool) -> tuple[Any, RND]:
    """rsl_rl's module and syncfree's, with the same networks."""
    from rsl_rl.extensions import RandomNetworkDistillation

    ours_schedule, theirs_schedule = SCHEDULES[schedule]
    theirs = RandomNetworkDistillation(
        num_states=STATE_DIM, obs_groups={"rnd_state": ["policy"]}, num_outputs=3, predictor_hidden_dims=[8, -1],
        target_hidden_dims=[-1], activation="elu", state_normalization=normalize, reward_normalization=normalize,
        weight=0.5, weight_schedule=theirs_schedule or None, learning_rate=3e-3)
    cfg = RNDConfig(enabled=True, weight=0.5, num_outputs=3, predictor_hidden=[8, -1], target_hidden=[-1],
                    state_normalization=normalize, reward_normalization=normalize, learning_rate=3e-3, **ours_schedule)
    ours = RND(cfg, STATE_DIM, ENVS, PerfConfig(compile="off"), torch.device("cpu"))
    ours.module.predictor.load_state_dict(theirs.predictor.state_dict())
    ours.module.target.load_state_dict(theirs.target.state_dict())
    return theirs, ours


def observations(seed: int, rows: int = ENVS) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 3.0 * torch.randn(rows, STATE_DIM, generator=g) + 1.0


def as_rsl_rl(obs: torch.Tensor) -> TensorDict:
    return TensorDict({"policy": obs}, batch_size=[obs.shape[0]])


@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "normalized"])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_intrinsic_rewards_are_rsl_rls(schedule: str, normalize: bool) -> None:
    """Step after step (the schedule's weight moving, the reward's deviation and, between steps, the input statistics
    learning), the weighted intrinsic rewards agree."""
    theirs, ours = rsl_rl_and_ours(schedule, normalize)
    total = torch.zeros(())
    for t in range(12):
        obs = observations(t)
        expected = theirs.get_intrinsic_reward(as_rsl_rl(obs))
        got = ours.module.intrinsic_reward(obs)
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7, msg=lambda m, t=t: f"step {t}: {m}")
        total += got.sum()
        if t % 4 == 3:  # as after an update: the input statistics learn a rollout
            batch = observations(100 + t, rows=64)
            theirs.update_normalization(as_rsl_rl(batch))
            ours.module.update_normalizer(batch)
    assert int(ours.module.env_steps) == theirs.update_counter == 12
    torch.testing.assert_close(ours.module.reward_sum, total)
    assert total > 0


@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "normalized"])
def test_predictor_loss_gradients_and_steps_are_rsl_rls(normalize: bool) -> None:
    theirs, ours = rsl_rl_and_ours("constant", normalize)
    if normalize:
        batch = observations(7, rows=64)
        theirs.update_normalization(as_rsl_rl(batch))
        ours.module.update_normalizer(batch)
    rollout = observations(8, rows=48)
    expected = theirs.compute_loss(as_rsl_rl(rollout[:16]))
    expected.backward()
    got = ours.module.loss(rollout[:16])
    got.backward()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-8)
    for (name, a), b in zip(ours.module.predictor.named_parameters(), theirs.predictor.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7, msg=lambda m, name=name: f"{name}: {m}")
    ours.module.zero_grad()
    theirs.optimizer.zero_grad()

    ours.begin_update()
    for k in range(3):  # three minibatches of 16 rows: rsl_rl's Adam against syncfree's one-function step
        idx = torch.arange(16 * k, 16 * (k + 1))
        theirs.optimizer.zero_grad()
        theirs.compute_loss(as_rsl_rl(rollout[idx])).backward()
        theirs.optimizer.step()
        ours.update(rollout, idx)
    for (name, a), b in zip(ours.module.predictor.named_parameters(), theirs.predictor.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
    assert not torch.equal(ours.module.predictor[0].weight, ours.module.target[0].weight)
    assert ours.statistics(3, 1)["rnd_loss"] > 0
    for p in ours.module.target.parameters():  # the target never learns
        assert not p.requires_grad


def rnd_config(compile: str = "off", **rnd: Any):
    cfg = small_config("point-mass", compile=compile)
    cfg.rnd = RNDConfig(enabled=True, **{"weight": 0.5, "state_normalization": True, "reward_normalization": True,
                                         "weight_schedule": "linear", "initial_step": 2, "final_step": 20,
                                         "final_value": 0.1, **rnd})
    return cfg


def test_the_reward_learned_from_is_the_envs_plus_the_intrinsic_one() -> None:
    trainer = Runner(rnd_config())
    rnd = trainer.algorithm.rnd
    assert rnd is not None
    replay = copy.deepcopy(rnd.module)
    env_rewards, next_obs = [], []
    step = trainer.env.step

    def recorded(actions: torch.Tensor) -> Any:
        result = step(actions)
        env_rewards.append(result.reward.clone())
        next_obs.append(result.obs["policy"].clone())
        return result

    trainer.env.step = recorded  # type: ignore[method-assign]
    trainer.algorithm.begin_rollout()
    with torch.inference_mode():
        for t in range(trainer.cfg.ppo.steps_per_env):  # 8 steps: no time-out yet (the limit is 10)
            trainer.rollout_step(t)
    intrinsic = torch.stack([replay.intrinsic_reward(obs) for obs in next_obs])
    stored = trainer.algorithm.storage.rewards
    assert bool((intrinsic > 0).all())
    torch.testing.assert_close(stored, torch.stack(env_rewards) + intrinsic, rtol=0, atol=0)
    torch.testing.assert_close(trainer.algorithm.statistics()["rnd_reward"], intrinsic.mean())


def test_rnd_reads_the_host_only_once_per_iteration() -> None:
    trainer, reads = trained_host_reads(rnd_config())
    assert reads == (0, 0, 1)
    stats = trainer.algorithm.statistics()
    assert stats["rnd_loss"] > 0 and stats["rnd_reward"] > 0


def test_the_whole_minibatch_graph_with_rnd_matches_the_eager_update() -> None:
    eager, whole = Runner(rnd_config()), Runner(rnd_config(compile="step"))
    assert eager.algorithm.whole_step is None and whole.algorithm.whole_step is not None
    update_on_one_rollout(eager, whole)
    modules = [(t.policy, t.algorithm.rnd.module) for t in (eager, whole)]  # type: ignore[union-attr]
    for a, b in zip(*modules, strict=True):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
    stats = [t.algorithm.statistics() for t in (eager, whole)]
    for key in ("rnd_loss", "rnd_reward"):
        torch.testing.assert_close(stats[0][key], stats[1][key], rtol=1e-5, atol=1e-7)


def test_a_resume_continues_exactly(tmp_path: Path) -> None:
    """The predictor, its Adam moments, both normalizers and the schedule's step count are saved: a run stopped and
    resumed ends where an unbroken one does, bit for bit."""
    cfg = rnd_config()
    cfg.iterations = 4
    straight = Run(cfg, tmp_path / "straight")
    straight.learn()

    cfg = rnd_config()
    cfg.iterations, cfg.save_every = 2, 100
    first = Run(cfg, tmp_path / "split")
    first.learn()
    first.close()
    cfg.iterations = 4
    second = Run(cfg, tmp_path / "split")
    second.runner.load_state_dict(checkpoint.load(tmp_path / "split" / "latest.pt"))
    second.learn()
    a, b = straight.runner.algorithm.rnd, second.runner.algorithm.rnd
    assert a is not None and b is not None and int(a.module.env_steps) == 4 * cfg.ppo.steps_per_env
    for (name, x), y in zip(a.module.state_dict().items(), b.module.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    for (name, x), y in zip(straight.runner.policy.state_dict().items(), second.runner.policy.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


def test_a_resume_may_turn_rnd_on_or_off(tmp_path: Path) -> None:
    """Turned on at a resume, RND starts new; turned off, its saved state is dropped (as `ppo.normalize_rewards`)."""
    plain = small_config("point-mass")
    Run(plain, tmp_path / "plain").learn()
    with_rnd = Run(rnd_config(), tmp_path / "with")
    fresh = copy.deepcopy(with_rnd.runner.algorithm.rnd.module.state_dict())  # type: ignore[union-attr]
    with_rnd.runner.load_state_dict(checkpoint.load(tmp_path / "plain" / "latest.pt"))
    for key, value in with_rnd.runner.algorithm.rnd.module.state_dict().items():  # type: ignore[union-attr]
        assert torch.equal(value, fresh[key]), key
    with_rnd.cfg.iterations = with_rnd.runner.iteration + 1
    with_rnd.learn()
    without = Run(small_config("point-mass"), tmp_path / "without")
    without.runner.load_state_dict(checkpoint.load(tmp_path / "with" / "latest.pt"))
    assert without.runner.algorithm.rnd is None and without.runner.iteration == with_rnd.runner.iteration


def test_a_checkpoints_rnd_state_is_checked_field_by_field(tmp_path: Path) -> None:
    trainer = Run(rnd_config(), tmp_path)
    trainer.learn()
    state = checkpoint.load(tmp_path / "latest.pt")
    moments = state["algorithm"]["rnd"]["optimizer"]["state"][1]  # the first layer's bias
    moments["exp_avg"] = moments["exp_avg"][:-1]
    fresh = Run(rnd_config(), tmp_path / "again")
    with pytest.raises(UserError, match=r"algorithm\.rnd\.optimizer\.state\[1\]\.exp_avg: expected a float32 tensor "
                       r"of shape \(4,\), found a float32 tensor of shape \(3,\)"):
        fresh.runner.load_state_dict(state)
    state = checkpoint.load(tmp_path / "latest.pt")
    state["algorithm"]["rnd"]["module"]["env_steps"] = torch.tensor(-3)
    with pytest.raises(UserError, match=r"algorithm\.rnd\.module\.env_steps: holds negative values"):
        fresh.runner.load_state_dict(state)


def test_a_resume_keeps_the_runs_own_rnd_optimizer_options(tmp_path: Path) -> None:
    """The predictor's Adam options (learning rate, betas) are the run's config's, whatever the checkpoint holds:
    the moments are loaded, checked; the options would be loaded unchecked."""
    trainer = Run(rnd_config(), tmp_path)
    trainer.learn()
    state = checkpoint.load(tmp_path / "latest.pt")
    group = state["algorithm"]["rnd"]["optimizer"]["param_groups"][0]
    group.update(lr="corrupt", betas=(-1.0, 2.0))
    fresh = Run(rnd_config(), tmp_path / "again")
    fresh.runner.load_state_dict(state)
    rnd = fresh.runner.algorithm.rnd
    assert rnd is not None and len(rnd.optimizer.state) == len(rnd.params)
    (loaded,) = rnd.optimizer.param_groups
    assert (loaded["lr"], loaded["betas"]) == (rnd_config().rnd.learning_rate, (0.9, 0.999))


@pytest.mark.parametrize(("argv", "expected"), [
    (["--task", "point-mass", "--rnd.state", "actor"], "rnd.state"),
    (["--task", "point-mass", "--rnd.weight_schedule", "linear", "--rnd.initial_step", "5", "--rnd.final_step", "5"],
     "rnd.final_step"),
    (["--task", "point-mass", "--rnd.predictor_hidden", "[0]"], "rnd.predictor_hidden"),
    (["--task", "point-mass", "--rnd.learning_rate", "0"], "rnd.learning_rate"),
])
def test_what_rnd_cannot_serve_is_one_line(argv: list[str], expected: str, capsys, tmp_path) -> None:
    assert expected in refused_training(argv, capsys, tmp_path)


@pytest.mark.parametrize(("argv", "warned"), [
    (["--task", "point-mass", "--rnd.weight", "2", "--symmetry.mirror_loss_coef", "0.5"],
     ["rnd.weight=2.0 changes nothing: rnd.enabled is false",
      "symmetry.mirror_loss_coef=0.5 changes nothing: symmetry.mirror_loss is false"]),
    (["--task", "point-mass", "--rnd.weight", "2", "--rnd.enabled", "true"], []),
    (["--task", "point-mass-goal"], []),  # its preset's RND settings wait for rnd.enabled
    (["--task", "point-mass-goal", "--rnd.num_outputs", "8"], ["rnd.num_outputs=8 changes nothing"]),
])
def test_settings_of_a_feature_that_is_off_are_one_warning_each(argv: list[str], warned: list[str], tmp_path: Path,
                                                                caplog) -> None:
    import logging

    from syncfree.cli import main

    with caplog.at_level(logging.WARNING, logger="syncfree"):
        assert main(["train", *argv, "--iterations", "1", "--env.num_envs", "8", "--ppo.steps_per_env", "4",
                     "--ppo.num_minibatches", "1", "--log.dir", str(tmp_path), "--log.progress", "false"]) == 0
    said = [r.getMessage() for r in caplog.records if "changes nothing:" in r.getMessage()
            and r.getMessage().startswith(("rnd.", "symmetry."))]
    assert len(said) == len(warned) and all(w in line for w, line in zip(warned, said, strict=True)), said


def test_a_recurrent_policy_learns_from_the_envs_reward_plus_the_intrinsic_one() -> None:
    """`policy.kind=recurrent`: the reward stored with the next step is the env's plus the intrinsic one; the
    predictor trains on the minibatch's rows; no host read per step or minibatch."""
    cfg = recurrent_config("point-mass")
    cfg.rnd = RNDConfig(enabled=True, weight=0.5, state_normalization=True, reward_normalization=True)
    trainer = Runner(cfg)
    rnd = trainer.algorithm.rnd
    assert rnd is not None
    replay = copy.deepcopy(rnd.module)
    step = trainer.env.step
    seen: list[Any] = []
    trainer.env.step = lambda actions: seen.append(step(actions)) or seen[-1]  # type: ignore[method-assign]
    trainer.algorithm.begin_rollout()
    with torch.inference_mode():
        trainer.rollout_step(0)  # the first step: no time-out
    intrinsic = replay.intrinsic_reward(seen[0].obs["policy"])
    assert bool((intrinsic > 0).all())
    torch.testing.assert_close(trainer.algorithm.reward_in, seen[0].reward + intrinsic, rtol=0, atol=0)

    trainer, reads = trained_host_reads(cfg)
    before = {k: v.clone() for k, v in trainer.algorithm.rnd.module.predictor.state_dict().items()}  # type: ignore[union-attr]
    trainer.cfg.iterations = trainer.iteration + 1
    trainer.learn()  # one more iteration
    assert reads == (0, 0, 1)
    after = trainer.algorithm.rnd.module.predictor.state_dict()  # type: ignore[union-attr]
    assert all(not torch.equal(before[k], after[k]) for k in before)  # the predictor trained
    stats = trainer.algorithm.statistics()
    assert stats["rnd_loss"] > 0 and stats["rnd_reward"] > 0


def test_rnd_on_tokens_is_refused_by_name() -> None:
    """grid-arena's recurrent token policy reads token observations, which the networks do not."""
    pytest.importorskip("mettagrid")
    cfg = grid_config()
    cfg.rnd = RNDConfig(enabled=True, weight=1.0)
    with pytest.raises(UserError, match=r"rnd.state=policy: the networks read flat observations; grid-arena's policy "
                                        r"group has shape"):
        Runner(cfg)


def test_rnd_on_the_token_policy_is_refused_by_name() -> None:
    cfg = small_config("g1-track")
    cfg.policy.kind = "token"
    cfg.rnd = RNDConfig(enabled=True, weight=1.0)
    with pytest.raises(UserError, match=r"rnd: policy.kind=token is not covered"):
        Runner(cfg)


def test_the_exploration_task_pays_only_inside_its_goal() -> None:
    """point-mass-goal: 1 per step inside the goal disc, 0 elsewhere; leaving the box ends the episode; drag slows
    the point."""
    from syncfree.envs.builtin.point_mass import PointMassGoal

    env = PointMassGoal(3, seed=0)
    env.reset()
    env.state.copy_(torch.tensor([[2.9, 1.7, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [3.98, 0.0, 1.0, 0.0]]))
    step = env.step(torch.zeros(3, 2))
    assert step.reward.tolist() == [1.0, 0.0, 0.0]
    assert step.terminated.tolist() == [False, False, True]
    assert env.state[0, 2].item() == pytest.approx(1.0 - 0.05 * 1.0)  # the drag, with no force


def maze_env(states: list[list[float]]):
    from syncfree.envs.builtin.point_mass import PointMassMaze

    env = PointMassMaze(len(states), seed=0)
    env.reset()
    env.state.copy_(torch.tensor(states))
    return env


def test_the_maze_pays_only_inside_its_goal_and_holds_a_point_there() -> None:
    """point-mass-maze: 1 per step inside the goal disc, 0 elsewhere; a point inside stays there at rest; nothing
    ends an episode before its time limit; drag slows the point."""
    env = maze_env([[0.0, 0.8, 0.5, -0.5], [0.0, 0.0, 0.0, 0.0], [1.0, 0.8, 1.0, 0.0]])
    for _ in range(3):
        step = env.step(torch.ones(3, 2))
        assert step.reward.tolist() == [1.0, 0.0, 0.0]
        assert step.terminated.tolist() == [False, False, False]
    assert env.state[0].tolist() == [0.0, 0.800000011920929, 0.0, 0.0]  # held at rest, the force notwithstanding
    env = maze_env([[1.0, 0.8, 1.0, 0.0]])
    env.step(torch.zeros(1, 2))
    assert env.state[0, 2].item() == pytest.approx(1.0 - 0.05 * 1.0)  # the drag, with no force


def test_the_maze_wall_stops_a_point_that_would_cross_it_and_the_gap_lets_it_through() -> None:
    """The wall between the lanes (y = 0.5 for x < 1.2) stops a point from either side, zeroing its velocity across
    it; the gap beyond its end lets the point through; the outer walls stop it too; the force is at most 1."""
    env = maze_env([[0.0, 0.48, 0.0, 1.0], [0.5, 0.52, 0.0, -1.0], [1.6, 0.48, 0.0, 1.0], [1.99, 0.0, 1.0, 0.0],
                    [0.0, 0.0, 0.0, 0.0]])
    env.step(torch.tensor([[0.0, 1.0], [0.0, -1.0], [0.0, 1.0], [1.0, 0.0], [3.0, 4.0]]))
    x, y, vx, vy = env.state.T
    assert y[0].item() < 0.5 and vy[0].item() == 0.0  # stopped below the wall
    assert y[1].item() > 0.5 and vy[1].item() == 0.0  # stopped above it
    assert y[2].item() > 0.5 and vy[2].item() > 0.9  # through the gap
    assert x[3].item() == 2.0 and vx[3].item() == 0.0  # the outer wall
    assert torch.tensor([vx[4], vy[4]]).norm().item() == pytest.approx(0.05)  # |force| 5 acts as 1


def test_no_constant_force_reaches_the_maze_goal_and_a_turning_one_does() -> None:
    """What makes the maze an exploration task: a policy whose force has drifted to one direction (PPO's, where no
    reward tells it otherwise) never reaches the goal in any of 72 directions (from four starts each); one that turns
    at the corridor's bends does, within the time limit."""
    from syncfree.envs.builtin.point_mass import PointMassMaze

    angles = torch.arange(72) * (2 * torch.pi / 72)
    env = PointMassMaze(72 * 4, seed=0)
    env.reset()
    forces = torch.stack((angles.cos(), angles.sin()), dim=-1).repeat(4, 1)
    reward = torch.zeros(72 * 4)
    for _ in range(env.max_episode_length):
        reward += env.step(forces).reward
    assert reward.max().item() == 0.0

    def turning(state: torch.Tensor) -> torch.Tensor:
        lower_lane = state[:, 1] < 0.5
        right = torch.where(lower_lane, 1.0, -1.0)
        up = torch.where(lower_lane & (state[:, 0] < 1.4), -0.1, 1.0)
        return torch.stack((right, up), dim=-1)

    env = PointMassMaze(4, seed=0)
    obs = env.reset()
    reward = torch.zeros(4)
    for _ in range(env.max_episode_length):
        step = env.step(turning(obs["policy"]))
        obs, reward = step.obs, reward + step.reward
    assert (reward > 20).all(), reward


def test_the_documented_figures_are_the_benchmarks_results() -> None:
    root = Path(__file__).resolve().parents[1]
    docs = (root / "docs" / "rnd.md").read_text()
    for folder in ("rnd-point-mass-maze-cpu", "rnd-point-mass-cpu", "rnd-point-mass-60it-cpu"):
        results = (root / "benchmarks" / "results" / folder / "results.md").read_text()
        summary = [line for line in results.splitlines() if line.startswith("| ppo") and "±" in line]
        assert len(summary) == 2 and all(line in docs for line in summary), (folder, summary)
    variant = (root / "benchmarks" / "results" / "rnd-point-mass-walls-variant-cpu" / "results.md").read_text()
    successes = [line.split(" | ")[1] for line in variant.splitlines() if line.startswith("| ppo") and "±" in line]
    assert len(successes) == 2 and all(success in docs for success in successes), successes


def test_the_documented_cost_is_the_side_by_side_results() -> None:
    root = Path(__file__).resolve().parents[1]
    docs = (root / "docs" / "rnd.md").read_text()
    medians = {}
    for mode in ("ppo", "ppo-rnd"):
        text = (root / "benchmarks" / "results" / "rnd-cost-cpu" / mode / "results.md").read_text()
        medians[mode] = {m.group(1): m.group(2) for m in re.finditer(r"^\| (syncfree optimized(?:, eager)?|rsl_rl) \| "
                                                                      r"([\d,]+) \(", text, flags=re.M)}
    for trainer in ("syncfree optimized", "syncfree optimized, eager", "rsl_rl"):
        assert f"| {medians['ppo'][trainer]} | {medians['ppo-rnd'][trainer]} |" in docs, trainer
