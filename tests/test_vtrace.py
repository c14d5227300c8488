"""GAE and V-trace-clipped GAE over BPTT rows against plain-loop references."""

from __future__ import annotations

import pytest
import torch

from syncfree.algo.vtrace import gae_advantages, vtrace_advantages
from syncfree.core.counters import count_syncs

GAMMA, LAM = 0.97, 0.9


def rollout(segments: int = 5, horizon: int = 7, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(segments, horizon, generator=gen)
    values = torch.randn(segments, horizon, generator=gen)
    dones = torch.rand(segments, horizon, generator=gen) < 0.2
    ratio = torch.exp(0.6 * torch.randn(segments, horizon, generator=gen))
    return rewards, values, dones, ratio


def reference(rewards, values, dones, ratio, gamma, lam, rho_clip, c_clip) -> list[list[float]]:
    """Segment by segment, step by step, in Python floats."""
    out = []
    for r, v, d, w in zip(rewards.tolist(), values.tolist(), dones.tolist(), ratio.tolist(), strict=True):
        horizon = len(r)
        adv = [0.0] * horizon
        last = 0.0
        for t in range(horizon - 2, -1, -1):
            nonterminal = 0.0 if d[t + 1] else 1.0
            rho, c = min(w[t], rho_clip), min(w[t], c_clip)
            delta = rho * (r[t + 1] + gamma * v[t + 1] * nonterminal - v[t])
            last = delta + gamma * lam * c * nonterminal * last
            adv[t] = last
        out.append(adv)
    return out


@pytest.mark.parametrize(("rho_clip", "c_clip"), [(1.0, 1.0), (2.0, 0.5), (0.8, 1.5)])
def test_vtrace_matches_a_plain_loop_reference(rho_clip: float, c_clip: float) -> None:
    rewards, values, dones, ratio = rollout()
    got = vtrace_advantages(rewards, values, dones, ratio, GAMMA, LAM, rho_clip, c_clip)
    want = torch.tensor(reference(rewards, values, dones, ratio, GAMMA, LAM, rho_clip, c_clip))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert (got[:, -1] == 0).all()


def test_gae_matches_the_reference_with_unit_ratios() -> None:
    rewards, values, dones, _ = rollout(seed=1)
    want = torch.tensor(reference(rewards, values, dones, torch.ones_like(values), GAMMA, LAM, 1.0, 1.0))
    torch.testing.assert_close(gae_advantages(rewards, values, dones, GAMMA, LAM), want, rtol=0, atol=1e-5)


def test_vtrace_with_unit_ratios_and_loose_clips_is_gae_bitwise() -> None:
    rewards, values, dones, _ = rollout(seed=2)
    gae = gae_advantages(rewards, values, dones, GAMMA, LAM)
    for clip in (1.0, 3.0):
        vtrace = vtrace_advantages(rewards, values, dones, torch.ones_like(values), GAMMA, LAM, clip, clip)
        assert torch.equal(vtrace, gae)


def test_clipping_changes_advantages_only_where_ratios_exceed_the_clip() -> None:
    rewards, values, dones, ratio = rollout(seed=3)
    small = ratio.clamp(max=0.9)
    assert torch.equal(vtrace_advantages(rewards, values, dones, small, GAMMA, LAM, 1.0, 1.0),
                       vtrace_advantages(rewards, values, dones, small, GAMMA, LAM, 5.0, 5.0))
    assert not torch.equal(vtrace_advantages(rewards, values, dones, ratio, GAMMA, LAM, 1.0, 1.0),
                           vtrace_advantages(rewards, values, dones, ratio, GAMMA, LAM, 5.0, 5.0))


def test_a_done_cuts_the_recursion() -> None:
    rewards, values, _, ratio = rollout(segments=2, horizon=6, seed=4)
    dones = torch.zeros(2, 6, dtype=torch.bool)
    dones[:, 3] = True  # step 3 starts a new episode: steps 0..2 never see rewards or values after it
    before = vtrace_advantages(rewards, values, dones, ratio, GAMMA, LAM, 1.5, 1.5)
    rewards[:, 4:], values[:, 3:] = 100.0, -100.0
    after = vtrace_advantages(rewards, values, dones, ratio, GAMMA, LAM, 1.5, 1.5)
    assert torch.equal(after[:, :3], before[:, :3]) and not torch.equal(after[:, 3:5], before[:, 3:5])


def test_writes_into_a_preallocated_output_without_host_syncs() -> None:
    rewards, values, dones, ratio = rollout(seed=5)
    out = torch.full_like(values, float("nan"))
    with count_syncs() as counts:
        result = vtrace_advantages(rewards, values, dones, ratio, GAMMA, LAM, 1.0, 1.0, out=out)
    assert result is out and out.isfinite().all()
    assert counts.syncs == 0
