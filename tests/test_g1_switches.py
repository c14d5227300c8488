"""The humanoid pipeline's switches on g1-track: on == off, bitwise where the arithmetic is the same."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from conftest import assert_same_state, small_config, train_iterations
from syncfree.algo.storage import Batch
from syncfree.config import PerfConfig
from syncfree.core.counters import count_syncs
from syncfree.policy.actor_critic import chunked_value
from syncfree.policy.settings import TokenEncoderConfig
from syncfree.train.runner import Runner

ENV_SWITCHES = ["shared_obs_terms", "reset_without_sync", "fast_history", "batched_command_metrics",
                "log_env_actions", "sampling_diagnostics"]
LOGGED = ("metrics/", "episode_reward/", "episode_termination/", "sampling/")
"""Reset statistics: read per reset on the host or summed on the device, so equal within float rounding."""


def g1_config(token: bool = False, **perf):
    cfg = small_config("g1-track", **perf)
    if token:
        cfg.policy.kind = "token"
        cfg.policy.token = TokenEncoderConfig(encoder_hidden=[32], decoder_hidden=[32, 32], critic_hidden=[32],
                                              reconstruction_hidden=[32])
    return cfg


train = train_iterations


def assert_same_run(a: tuple, b: tuple) -> None:
    (ta, ea, ra), (tb, eb, rb) = a, b
    assert_same_state(ta.policy.state_dict(), tb.policy.state_dict(), "policy")
    assert_same_state(ta.algorithm.storage.state_tensors(), tb.algorithm.storage.state_tensors(), "storage")
    assert_same_state(ta.env.state_dict(), tb.env.state_dict(), "env")
    assert ea == eb and len(ea) > 0
    for x, y in zip(ra, rb, strict=True):
        only = set(x) ^ set(y)
        assert all(k.startswith("sampling/") for k in only), only
        for key in set(x) & set(y):
            if key in ("steps_per_s", "iteration_seconds"):
                continue
            if key.startswith(LOGGED):
                assert math.isclose(x[key], y[key], rel_tol=1e-6, abs_tol=1e-6), (key, x[key], y[key])
            else:
                assert x[key] == y[key], key


@pytest.mark.parametrize("switch", ENV_SWITCHES)
def test_env_switch_is_bitwise_equivalent(switch: str) -> None:
    baseline = PerfConfig.switches_by_name()[switch].metadata["baseline"]
    assert_same_run(train(g1_config()), train(g1_config(**{switch: baseline})))


def test_all_env_switches_at_baseline_equal_optimized() -> None:
    baseline = {name: PerfConfig.switches_by_name()[name].metadata["baseline"] for name in ENV_SWITCHES}
    assert_same_run(train(g1_config()), train(g1_config(**baseline)))


def test_token_policy_caches_change_nothing() -> None:
    a = train(g1_config(token=True))
    b = train(g1_config(token=True, cache_encoded_outputs=True, cache_full_latent=True))
    assert_same_run(a, b)
    assert b[0].policy.encoded_outputs["tokens"].device.type == "cpu" and b[0].policy.full_latent is not None
    assert not a[0].policy.encoded_outputs and a[0].policy.full_latent is None


def test_critic_chunks_give_the_same_values_and_update_within_tolerance() -> None:
    """Chunked matrix products may round differently: one update on the same stored rollout, |Δ| ≤ 1e-5."""
    trainer = Runner(g1_config())
    trainer.learn()
    obs = trainer.algorithm.storage.critic_obs.flatten(0, 1)
    policy = trainer.policy
    whole = chunked_value(policy.critic, policy.critic_norm, obs, 0)
    with count_syncs() as small_chunks:
        parts = chunked_value(policy.critic, policy.critic_norm, obs, 16)
    assert small_chunks.num_ops > 2 * (obs.shape[0] // 16)  # it did run in chunks
    torch.testing.assert_close(parts, whole, rtol=1e-6, atol=1e-6)

    state = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    opt, lr = copy.deepcopy(trainer.algorithm.optim.optimizer.state_dict()), trainer.algorithm.optim.lr.clone()
    results = []
    for chunk in (4096, 16):
        trainer.policy.load_state_dict(state)
        trainer.algorithm.optim.optimizer.load_state_dict(copy.deepcopy(opt))
        trainer.algorithm.optim.lr.copy_(lr)
        trainer.policy.critic_chunk_size = chunk
        torch.manual_seed(0)
        trainer.algorithm.update()
        results.append({k: v.clone() for k, v in trainer.policy.state_dict().items()})
    for name in results[0]:
        torch.testing.assert_close(results[0][name], results[1][name], rtol=1e-5, atol=1e-5, msg=name)


def test_optimized_g1_hot_loop_has_no_host_sync_and_the_iteration_two() -> None:
    trainer = Runner(g1_config())
    trainer.learn()
    with torch.inference_mode(), count_syncs() as step:
        for t in range(trainer.cfg.ppo.steps_per_env):
            trainer.rollout_step(t)
    assert step.syncs == 0, (dict(step.host_reads), dict(step.sync_ops))
    with count_syncs() as update:
        trainer.algorithm.minibatch_update(Batch(*(x[:64] for x in trainer.algorithm.storage.flat())))
    assert update.syncs == 0, (dict(update.host_reads), dict(update.sync_ops))
    trainer.cfg.iterations += 1
    with count_syncs() as iteration:
        trainer.learn()
    assert iteration.syncs <= 2, (dict(iteration.host_reads), dict(iteration.sync_ops))


def test_baseline_g1_env_reads_are_counted() -> None:
    trainer = Runner(g1_config(**vars(PerfConfig.preset("baseline"))))
    trainer.learn()
    env = trainer.env
    with torch.inference_mode(), count_syncs() as step:
        trainer.rollout_step(0)
    # actions to the host, 3 sampling diagnostics, a length read and an any() per history term (5 terms)
    assert step.host_reads["cpu"] >= 1 and step.host_reads["item"] >= 3 + 5
    assert step.sync_ops["aten::nonzero"] >= 1
    assert env.perf.reset_without_sync is False


def test_physics_partitions_is_inert_for_torch_physics() -> None:
    a = train(g1_config())
    b = train(g1_config(physics_partitions=8))
    assert_same_run(a, b)


def test_env_switch_list_is_complete() -> None:
    humanoid = {f.name for f in dataclasses.fields(PerfConfig) if f.metadata["seed"].startswith("humanoid:")}
    trainer_side = {"deferred_episode_stats", "grad_finite_from_norm", "fused_adamw"}
    model_side = {"critic_chunk_size", "physics_partitions", "cache_encoded_outputs", "cache_full_latent"}
    assert humanoid == set(ENV_SWITCHES) | trainer_side | model_side
