"""Mirror symmetry (`symmetry` settings): the same losses and gradients as rsl_rl 5.5.1's `Symmetry` extension on the
same minibatch, no host read in the update, the whole-minibatch graph agreeing with the eager update, and one line for
each configuration it cannot serve."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from conftest import refused_training, small_config, trained_host_reads, update_on_one_rollout
from syncfree.algo.feedforward import FeedForwardPPO
from syncfree.algo.settings import PPOConfig, SymmetryConfig
from syncfree.algo.storage import Batch
from syncfree.algo.symmetry import Symmetry
from syncfree.core.switches import PerfConfig
from syncfree.envs.api import ActionSpec
from syncfree.envs.builtin.point_mass import PointMass
from syncfree.envs.mirror import Reflection, SignedPermutation
from syncfree.errors import UserError
from syncfree.policy.actor_critic import ActorCritic
from syncfree.policy.settings import PolicyConfig, RecurrentCoreConfig
from syncfree.rsl_rl.checkpoint import to_rsl_rl
from syncfree.train.runner import Runner

ROWS = 64
SETTINGS = {"augment": SymmetryConfig(augment=True), "mirror loss": SymmetryConfig(mirror_loss=True, mirror_loss_coef=0.7),
            "both": SymmetryConfig(augment=True, mirror_loss=True, mirror_loss_coef=0.7),
            "logged only": SymmetryConfig(log_only=True)}


def test_a_reflection_must_be_a_signed_permutation_that_undoes_itself() -> None:
    with pytest.raises(ValueError, match="must permute"):
        SignedPermutation([0, 0], [1.0, 1.0])
    with pytest.raises(ValueError, match="signs are -1 or 1"):
        SignedPermutation([0, 1], [1.0, 0.5])
    rotation = SignedPermutation([1, 0], [-1.0, 1.0])  # (x, y) -> (-y, x): applied twice it negates
    with pytest.raises(ValueError, match="applied twice"):
        Reflection({"policy": rotation}, SignedPermutation.identity(2))
    swap = SignedPermutation([1, 0, 2], [1.0, 1.0, -1.0])
    assert torch.equal(swap(torch.tensor([[1.0, 2.0, 3.0]])), torch.tensor([[2.0, 1.0, -3.0]]))


def test_point_mass_mirror_is_a_symmetry_of_its_dynamics_and_reward() -> None:
    """A reflected state under reflected actions steps to the reflected next state with the same reward."""
    env, mirrored = PointMass(64, seed=1), PointMass(64, seed=1)
    reflect = env.mirror()
    generator = torch.Generator().manual_seed(2)
    env.state.copy_(torch.randn(64, 4, generator=generator))
    mirrored.state.copy_(reflect.observations("policy", env.state))
    for _ in range(5):
        actions = 2 * torch.rand(64, 2, generator=generator) - 1
        reward, out = env._advance(actions)
        reward_m, out_m = mirrored._advance(reflect.actions(actions))
        torch.testing.assert_close(mirrored.state, reflect.observations("policy", env.state))
        torch.testing.assert_close(reward_m, reward)
        assert torch.equal(out, out_m)


# -- the same losses and gradients as rsl_rl 5.5.1 -----------------------------------------------------------------


def policies(seed: int = 0) -> tuple[ActorCritic, Any, Any]:
    """syncfree's `ActorCritic` with non-trivial normalizer statistics, and rsl_rl 5.5.1's actor and critic
    `MLPModel`s holding the same tensors."""
    from rsl_rl.models import MLPModel
    from tensordict import TensorDict

    torch.manual_seed(seed)
    cfg = PolicyConfig(actor_hidden=[16, 16], critic_hidden=[16, 16], std_type="scalar", obs_norm_std_offset=0.01)
    ours = ActorCritic(4, 4, ActionSpec("continuous", 2), cfg)
    for norm in (ours.actor_norm, ours.critic_norm):
        norm.mean.copy_(torch.randn(4))
        norm.var.copy_(torch.rand(4) + 0.5)
        norm.count.fill_(100)
    obs = TensorDict({"policy": torch.zeros(1, 4), "critic": torch.zeros(1, 4)}, batch_size=[1])
    groups = {"actor": ["policy"], "critic": ["critic"]}
    model = {"hidden_dims": [16, 16], "activation": "elu", "obs_normalization": True}
    actor = MLPModel(obs, groups, "actor", 2, **model, distribution_cfg={
        "class_name": "GaussianDistribution", "init_std": 1.0, "std_type": "scalar"})
    critic = MLPModel(obs, groups, "critic", 1, **model)
    actor_state, critic_state = to_rsl_rl(ours.state_dict())
    actor.load_state_dict(actor_state)
    critic.load_state_dict(critic_state)
    return ours, actor, critic


def minibatch(policy: ActorCritic, seed: int = 1) -> Batch:
    """A rollout's worth of rows as the rollout would have stored them (actions drawn from the policy)."""
    g = torch.Generator().manual_seed(seed)
    actor_obs, critic_obs = 2 * torch.randn(ROWS, 4, generator=g), 2 * torch.randn(ROWS, 4, generator=g)
    with torch.no_grad():
        act = policy.act(actor_obs, critic_obs)
        act = act._replace(dist_params=act.dist_params + 0.05 * torch.randn(act.dist_params.shape, generator=g))
    return Batch(actor_obs, critic_obs, act.actions, act.log_prob + 0.1 * torch.randn(ROWS, generator=g),
                 act.value + 0.2 * torch.randn(ROWS, generator=g), act.dist_params, torch.randn(ROWS, generator=g),
                 act.value + torch.randn(ROWS, generator=g))


def rsl_rl_update(actor: Any, critic: Any, mb: Batch, sym: SymmetryConfig) -> tuple[dict[str, float], dict]:
    """One rsl_rl 5.5.1 `PPO.update()` over `mb` as its only minibatch: its logged losses and the gradients at its
    optimizer step (the step itself is skipped; the clip is too loose to act)."""
    from rsl_rl.algorithms import PPO
    from rsl_rl.storage import RolloutStorage
    from tensordict import TensorDict

    from syncfree.envs.adapters.rsl_rl import rsl_rl_augmentation

    obs = TensorDict({"policy": mb.actor_obs, "critic": mb.critic_obs}, batch_size=[ROWS])
    storage = RolloutStorage("rl", ROWS, 1, obs, [2], "cpu")
    symmetry_cfg = {"env": None, "data_augmentation_func": rsl_rl_augmentation(PointMass(1).mirror()),
                    "use_data_augmentation": sym.augment, "use_mirror_loss": sym.mirror_loss,
                    "mirror_loss_coeff": sym.mirror_loss_coef}
    ppo = PPO(actor, critic, storage, num_learning_epochs=1, num_mini_batches=1, max_grad_norm=1e9,
              schedule="fixed", symmetry_cfg=symmetry_cfg)
    storage.observations[0].copy_(obs)
    storage.actions[0].copy_(mb.actions)
    storage.values[0].copy_(mb.old_values.view(-1, 1))
    storage.actions_log_prob[0].copy_(mb.old_log_prob.view(-1, 1))
    storage.advantages[0].copy_(mb.advantages.view(-1, 1))
    storage.returns[0].copy_(mb.returns.view(-1, 1))
    storage.distribution_params = tuple(p.unsqueeze(0).clone() for p in mb.old_dist_params.chunk(2, dim=-1))
    grads: dict[str, dict[str, torch.Tensor]] = {}

    def record_gradients() -> None:
        for name, net in (("actor", actor), ("critic", critic)):
            grads[name] = {k: p.grad.clone() for k, p in net.named_parameters() if p.grad is not None}

    ppo.optimizer.step = record_gradients  # type: ignore[method-assign]
    return ppo.update(), grads


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_losses_and_gradients_are_rsl_rls_on_the_same_minibatch(setting: str) -> None:
    pytest.importorskip("rsl_rl")
    sym = SETTINGS[setting]
    ours, actor, critic = policies()
    mb = minibatch(ours)
    theirs, their_grads = rsl_rl_update(actor, critic, mb, sym)

    ppo = FeedForwardPPO(ours, PPOConfig(steps_per_env=1, num_epochs=1, num_minibatches=1, schedule="fixed",
                                         entropy_coef=0.01),  # rsl_rl's default
                         PerfConfig(compile="off"), ROWS, 4, ActionSpec("continuous", 2), torch.device("cpu"),
                         symmetry=Symmetry(sym, PointMass(1).mirror()))
    loss, parts, _ = ppo.minibatch_losses(mb)
    loss.backward()
    logged = dict(zip(ppo.stat_names, parts, strict=False))
    for ours_name, their_name in (("surrogate_loss", "surrogate"), ("value_loss", "value"), ("entropy", "entropy"),
                                  ("symmetry_loss", "symmetry")):
        torch.testing.assert_close(float(logged[ours_name]), theirs[their_name], rtol=1e-5, atol=1e-6,
                                   msg=f"{setting}: {ours_name}")
    our_actor, our_critic = to_rsl_rl({k: p.grad for k, p in ours.named_parameters()})
    for name, our_grads in (("actor", our_actor), ("critic", our_critic)):
        assert our_grads.keys() == their_grads[name].keys()
        for key, grad in our_grads.items():
            torch.testing.assert_close(grad, their_grads[name][key], rtol=1e-5, atol=1e-6,
                                       msg=lambda m, key=key, name=name: f"{setting}: {name} {key}: {m}")


# -- in training ----------------------------------------------------------------------------------------------------


def symmetric_config(**perf: Any):
    cfg = small_config("point-mass", **perf)
    cfg.symmetry = SymmetryConfig(augment=True, mirror_loss=True, mirror_loss_coef=0.5)
    return cfg


def test_the_update_with_symmetry_reads_the_host_only_once_per_iteration() -> None:
    trainer, reads = trained_host_reads(symmetric_config())
    assert reads == (0, 0, 1)
    assert "symmetry_loss" in trainer.algorithm.statistics()


def test_the_whole_minibatch_graph_with_symmetry_matches_the_eager_update() -> None:
    """`compile=step` differentiates the same loss function with `torch.func` inside its one graph (run eagerly
    here, as the suite runs `torch.compile`): one update on the same rollout gives the same parameters."""
    eager, whole = Runner(symmetric_config()), Runner(symmetric_config(compile="step"))
    assert eager.algorithm.whole_step is None and whole.algorithm.whole_step is not None
    update_on_one_rollout(eager, whole)
    for (name, a), b in zip(eager.policy.named_parameters(), whole.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
    stats = [a.statistics()["symmetry_loss"] for a in (eager.algorithm, whole.algorithm)]
    torch.testing.assert_close(stats[0], stats[1], rtol=1e-5, atol=1e-7)


def odd_mirror(env: Any) -> Reflection:
    """A test mirror function whose action map has the wrong width."""
    state = SignedPermutation.identity(4)
    return Reflection({"policy": state, "critic": state}, SignedPermutation.identity(3))


@pytest.mark.parametrize(("argv", "expected"), [
    (["--task", "cartpole", "--symmetry.augment", "true"],
     "symmetry: the mirror loss compares mean actions; cartpole has discrete actions (continuous only)"),
    (["--task", "pendulum", "--symmetry.mirror_loss", "true"],
     "symmetry: Pendulum (pendulum) has no mirror (VecEnv.mirror); name one with symmetry.mirror=module:function"),
    (["--task", "point-mass-goal", "--symmetry.augment", "true"],  # its goal is off the y axis
     "symmetry: PointMassGoal (point-mass-goal) has no mirror (VecEnv.mirror)"),
    (["--task", "point-mass", "--symmetry.augment", "true", "--symmetry.mirror", "test_symmetry:odd_mirror"],
     "symmetry: symmetry.mirror='test_symmetry:odd_mirror' fails on actions of shape (2, 2)"),
    (["--task", "point-mass", "--symmetry.log_only", "true", "--symmetry.mirror", "test_symmetry:nothing"],
     "symmetry.mirror='test_symmetry:nothing': test_symmetry has no callable 'nothing'"),
    (["--task", "grid-arena", "--symmetry.augment", "true", "--ppo.bptt_horizon", "4"],
     "symmetry.augment=True is invalid; allowed: false: symmetry covers MLP policies, feed-forward or recurrent, not "
     "the recurrent token policy"),
])
def test_what_symmetry_cannot_serve_is_one_line(argv: list[str], expected: str, capsys, tmp_path) -> None:
    assert expected in refused_training(argv, capsys, tmp_path)


def test_a_negative_mirror_loss_weight_is_refused() -> None:
    with pytest.raises(UserError, match=r"symmetry\.mirror_loss_coef"):
        dataclasses.replace(small_config("point-mass"), symmetry=SymmetryConfig(mirror_loss_coef=-1.0)).validate()


def test_g1_track_trains_with_its_mirror() -> None:
    """The humanoid's reflection (`syncfree.envs.builtin.g1_track.mirror`, pinned by tests/test_g1_mirror.py) in the
    update, the whole-minibatch path included."""
    from syncfree.tasks import preset

    for compile in ("off", "step"):
        cfg = preset("g1-track", "small")
        cfg.iterations, cfg.device = 1, "cpu"
        cfg.perf = dataclasses.replace(cfg.perf, compile=compile)
        cfg.symmetry = SymmetryConfig(augment=True, mirror_loss=True, mirror_loss_coef=0.5)
        trainer = Runner(cfg)
        record = trainer.learn()
        trainer.close()
        assert (trainer.algorithm.whole_step is not None) == (compile == "step")
        assert 0 < record["symmetry_loss"] < float("inf")


def test_the_documented_point_mass_figures_are_the_benchmarks_results() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    results = (root / "benchmarks" / "results" / "symmetry-point-mass-cpu" / "results.md").read_text()
    summary = [line for line in results.splitlines() if line.count("|") == 4 and "±" in line]
    assert len(summary) == 3
    docs = (root / "docs" / "symmetry.md").read_text()
    assert all(line in docs for line in summary), summary


# -- a recurrent policy ---------------------------------------------------------------------------------------------


def recurrent_symmetric(augment: bool = True, mirror_loss: bool = True, coef: float = 0.5, normalize: bool = True,
                        **perf: Any) -> Any:
    """point-mass's small preset with the recurrent MLP policy (an LSTM of 16) and symmetry."""
    from syncfree.tasks import with_algorithm

    cfg = with_algorithm(small_config("point-mass", **perf), "recurrent-ppo")
    cfg.policy.rnn = RecurrentCoreConfig(hidden=16)
    cfg.policy.normalize_obs = normalize
    cfg.symmetry = SymmetryConfig(augment=augment, mirror_loss=mirror_loss, mirror_loss_coef=coef,
                                  log_only=not (augment or mirror_loss))
    return cfg


def test_the_rollout_carries_the_state_of_the_mirrored_history() -> None:
    """After a rollout, each agent's mirrored state is what the cores reach when stepped through the reflection of
    the rollout's observations (with its resets) from the mirrored state stored at the row's start: the state the
    mirrored rows are replayed from is exact, not the real history's state reused."""
    trainer = Runner(recurrent_symmetric(normalize=False))  # a replay normalizes as the rollout did
    algo = trainer.algorithm
    assert algo.symmetry is not None
    algo.begin_rollout()
    with torch.inference_mode():
        for t in range(algo.steps_per_env):
            trainer.rollout_step(t)
    policy, buf, mirror = algo.policy, algo.buffer, algo.symmetry.mirror
    k = policy.state_size
    state = tuple(s[: algo.num_envs] for s in buf.states[k:])  # one row per env: rows 0..envs-1 are the rollout's
    data = {name: value[: algo.num_envs] for name, value in buf.data.items()}
    with torch.inference_mode():
        for t in range(algo.steps_per_env):
            obs = (mirror.observations("policy", data["obs"][:, t]), mirror.observations("critic", data["critic_obs"][:, t]))
            state = policy.advance(obs, state, data["dones"][:, t])
    for carried, replayed in zip(algo.mirror_state, state, strict=True):
        torch.testing.assert_close(carried, replayed, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(algo.mirror_state[0], algo.state[0])  # the mirrored history's state is its own


def test_the_recurrent_mirror_loss_is_the_stepwise_gap_between_reflected_histories() -> None:
    """`mirror_loss` on a minibatch equals the gap computed step by step with the policy's acting function: the mean
    action on the reflected history (from the mirrored state) against the reflection of the mean action."""
    trainer = Runner(recurrent_symmetric(augment=False, normalize=False))
    trainer.cfg.iterations = 1
    trainer.learn()
    algo = trainer.algorithm
    policy, mirror = algo.policy, algo.symmetry.mirror
    batch = algo.buffer.sequential_minibatch(0, 4)
    k = policy.state_size
    actor = policy.actor_core.state_size
    state, mirror_state = batch.initial_state[:k], batch.initial_state[k:]
    loss = algo.mirror_loss(batch.data, state, mirror_state, algo.symmetry)
    obs, dones = batch.data["obs"], batch.data["dones"]
    gaps = []
    real, reflected = state[:actor], mirror_state[:actor]
    with torch.no_grad():
        for t in range(obs.shape[1]):
            keep = (~dones[:, t]).unsqueeze(-1).float()
            real, reflected = tuple(s * keep for s in real), tuple(s * keep for s in reflected)
            mean, real = policy.act_deterministic(obs[:, t], real)
            on_mirrored, reflected = policy.act_deterministic(mirror.observations("policy", obs[:, t]), reflected)
            gaps.append((on_mirrored - mirror.actions(mean)).square())
    torch.testing.assert_close(loss, torch.stack(gaps).mean(), rtol=1e-5, atol=1e-7)


def test_recurrent_augmentation_averages_the_losses_of_the_rows_and_their_reflections() -> None:
    """The augmented minibatch's PPO losses are the mean of the losses on the original rows and on the mirrored
    rows replayed from the mirrored state, each computed alone (the surrogate's advantages are normalized over
    the doubled rows, whose unbiased deviation is the single rows' x sqrt(2(n-1) / (2n-1)) for n entries: the
    clipped surrogate scales with it)."""
    from syncfree.algo.segments import Minibatch

    trainer = Runner(recurrent_symmetric(mirror_loss=False))
    trainer.cfg.iterations = 1
    trainer.learn()
    algo = trainer.algorithm
    batch = algo.buffer.sequential_minibatch(0, 4)
    k = algo.policy.state_size
    with torch.no_grad():
        _, augmented, _ = algo.minibatch_loss(batch)
        algo.symmetry.augment = False
        _, original, _ = algo.minibatch_loss(batch)
        mirrored_rows = {**batch.data, **{key: value[4:] for key, value in algo.mirrored_rows(batch.data,
                                                                                            algo.symmetry).items()}}
        swapped = Minibatch(batch.indices, mirrored_rows, (*batch.initial_state[k:], *batch.initial_state[k:]),
                            batch.advantages, batch.prio_weights)
        _, mirrored, _ = algo.minibatch_loss(swapped)
    names = algo.stat_names
    n = batch.advantages[:, :-1].numel()
    scale = {"surrogate_loss": ((2 * n - 1) / (2 * n - 2)) ** 0.5, "value_loss": 1.0, "entropy": 1.0}
    for name, factor in scale.items():
        i = names.index(name)
        torch.testing.assert_close(augmented[i], factor * (original[i] + mirrored[i]) / 2, rtol=1e-5, atol=1e-6,
                                   msg=name)


def test_a_recurrent_policy_trains_with_symmetry_reading_the_host_once_per_iteration() -> None:
    trainer, reads = trained_host_reads(recurrent_symmetric())
    assert reads == (0, 0, 1)
    assert float(trainer.algorithm.statistics()["symmetry_loss"]) > 0


def test_the_recurrent_mirror_loss_makes_the_policy_more_symmetric() -> None:
    """Four iterations with the mirror loss weighted 5 end with a smaller mirror error than the same run logging it
    only (same seed, same rollouts at the start)."""
    errors = {}
    for trains in (True, False):
        trainer = Runner(recurrent_symmetric(augment=False, mirror_loss=trains, coef=5.0))
        trainer.cfg.iterations = 4
        errors[trains] = trainer.learn()["symmetry_loss"]
    assert errors[True] < 0.5 * errors[False]
