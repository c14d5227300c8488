"""GAE, time-out bootstrapping, the running normalizer and the action heads against reference formulas."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from syncfree.algo.advantages import compute_gae
from syncfree.algo.storage import RolloutStorage
from syncfree.envs.api import ActionSpec
from syncfree.policy.heads import CategoricalHead, GaussianHead
from syncfree.policy.normalizer import RunningNorm


def reference_gae(rewards, values, dones, last_values, gamma, lam):
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            next_value = last_values[n] if t == T - 1 else values[t + 1, n]
            nonterminal = 1.0 - dones[t, n]
            delta = rewards[t, n] + gamma * next_value * nonterminal - values[t, n]
            running = delta + gamma * lam * nonterminal * running
            adv[t, n] = running
    return adv, adv + values


def test_gae_matches_the_textbook_recursion() -> None:
    g = torch.Generator().manual_seed(0)
    T, N = 12, 5
    rewards, values = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g)
    dones = (torch.rand(T, N, generator=g) < 0.2).float()
    last = torch.randn(N, generator=g)
    adv, ret = torch.zeros(T, N), torch.zeros(T, N)
    compute_gae(rewards, values, dones, last, 0.97, 0.9, adv, ret)
    ref_adv, ref_ret = reference_gae(*(x.double().numpy() for x in (rewards, values, dones, last)), 0.97, 0.9)
    np.testing.assert_allclose(ret.numpy(), ref_ret, rtol=1e-5, atol=1e-5)
    normalized = (ref_adv - ref_adv.mean()) / (ref_adv.std(ddof=1) + 1e-8)
    np.testing.assert_allclose(adv.numpy(), normalized, rtol=1e-4, atol=1e-5)


def test_time_outs_are_bootstrapped_and_terminations_are_not() -> None:
    storage = RolloutStorage(1, 3, 2, 2, ActionSpec("continuous", 1), 2, torch.device("cpu"))
    storage.values[0] = torch.tensor([10.0, 10.0, 10.0])
    reward = torch.tensor([1.0, 1.0, 1.0])
    time_out = torch.tensor([False, True, False])
    done = torch.tensor([False, True, True])  # env 1 timed out, env 2 failed
    storage.store_env_step(0, reward, done, time_out, gamma=0.9)
    assert storage.rewards[0].tolist() == pytest.approx([1.0, 1.0 + 0.9 * 10.0, 1.0])
    assert storage.dones[0].tolist() == [0.0, 1.0, 1.0]


def test_running_norm_tracks_the_mean_and_variance_of_all_samples() -> None:
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(n, 3, generator=g) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([2.0, -1.0, 0.0])
               for n in (7, 64, 1, 300)]
    norm = RunningNorm(3)
    for b in batches:
        norm.update(b)
    everything = torch.cat(batches).double()
    torch.testing.assert_close(norm.mean.double(), everything.mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(norm.var.double(), everything.var(0, correction=0), rtol=1e-4, atol=1e-6)
    assert int(norm.count) == everything.shape[0]
    z = norm(everything.float())
    torch.testing.assert_close(z.mean(0), torch.zeros(3), atol=1e-4, rtol=0)


def test_gaussian_head_pure_functions_equal_torch_distributions() -> None:
    head, validated = GaussianHead(3, 0.7), GaussianHead(3, 0.7, validate=True)
    params = head.params(torch.randn(16, 3))
    torch.manual_seed(5)
    a, logp = head.sample(params)
    torch.manual_seed(5)
    b, logp_ref = validated.sample(params)
    assert torch.equal(a, b) and torch.equal(logp, logp_ref)
    dist = Normal(params[:, :3], params[:, 3:])
    lp, ent = head.log_prob_entropy(params, a)
    assert torch.equal(lp, dist.log_prob(a).sum(-1)) and torch.equal(ent, dist.entropy().sum(-1))
    other = head.params(torch.randn(16, 3))
    kl_ref = torch.distributions.kl_divergence(dist, Normal(other[:, :3], other[:, 3:])).sum(-1)
    torch.testing.assert_close(head.kl(params, other), kl_ref, rtol=1e-4, atol=1e-4)


def test_categorical_head_pure_functions_equal_torch_distributions() -> None:
    head, validated = CategoricalHead(4), CategoricalHead(4, validate=True)
    logits = torch.randn(32, 4)
    torch.manual_seed(6)
    a, logp = head.sample(logits)
    torch.manual_seed(6)
    b, logp_ref = validated.sample(logits)
    assert torch.equal(a, b) and torch.equal(logp, logp_ref)
    dist = Categorical(logits=logits)
    lp, ent = head.log_prob_entropy(logits, a)
    assert torch.equal(lp, dist.log_prob(a)) and torch.equal(ent, dist.entropy())
    other = torch.randn(32, 4)
    kl_ref = torch.distributions.kl_divergence(dist, Categorical(logits=other))
    torch.testing.assert_close(head.kl(logits, other), kl_ref, rtol=1e-5, atol=1e-6)
    assert torch.equal(head.deterministic(logits), logits.argmax(-1))
