"""Manager-layer pieces on their own: history buffer, adaptive sampler, observation groups."""

from __future__ import annotations

import torch

from syncfree.envs.managers.history import HistoryBuffer
from syncfree.envs.managers.observations import ObservationManager, ObsGroup, ObsTerm
from syncfree.envs.motion.sampler import AdaptiveSampler


def test_history_reads_oldest_first_and_backfills_the_first_value():
    h = HistoryBuffer(3, num_envs=2, device=torch.device("cpu"))
    h.append(torch.tensor([[1.0], [10.0]]))
    assert h.buffer[:, :, 0].tolist() == [[1, 1, 1], [10, 10, 10]]
    h.append(torch.tensor([[2.0], [20.0]]))
    h.append(torch.tensor([[3.0], [30.0]]))
    h.append(torch.tensor([[4.0], [40.0]]))
    assert h.buffer[:, :, 0].tolist() == [[2, 3, 4], [20, 30, 40]]


def test_history_reset_clears_only_the_given_envs():
    h = HistoryBuffer(3, num_envs=3, device=torch.device("cpu"))
    for v in (1.0, 2.0, 3.0):
        h.append(torch.full((3, 2), v))
    h.reset(torch.tensor([1]))
    h.append(torch.full((3, 2), 7.0))
    assert h.buffer[0, :, 0].tolist() == [2, 3, 7]
    assert h.buffer[1, :, 0].tolist() == [7, 7, 7]
    assert h.buffer[2, :, 1].tolist() == [2, 3, 7]


def test_history_state_round_trip():
    a = HistoryBuffer(4, 2, torch.device("cpu"))
    for v in range(5):
        a.append(torch.full((2, 1), float(v)))
    b = HistoryBuffer(4, 2, torch.device("cpu"))
    b.load_state_dict(a.state_dict())
    a.append(torch.ones(2, 1))
    b.append(torch.ones(2, 1))
    assert torch.equal(a.buffer, b.buffer)


class _Env:
    num_envs, device = 4, torch.device("cpu")

    def __init__(self) -> None:
        self.x = torch.arange(8.0).view(4, 2)


def test_group_concatenates_history_term_major_and_applies_clip_scale_noise():
    env = _Env()
    groups = {
        "policy": ObsGroup({"a": ObsTerm(lambda e: e.x, history=3), "b": ObsTerm(lambda e: e.x[:, :1] * 100,
                                                                                  clip=(0.0, 250.0), scale=0.5)},
                           noise=False),
        "noisy": ObsGroup({"a": ObsTerm(lambda e: e.x, noise=0.1)}, noise=True),
        "dict": ObsGroup({"a": ObsTerm(lambda e: e.x), "b": ObsTerm(lambda e: e.x[:, :1])}, concatenate=False),
    }
    manager = ObservationManager(env, groups, torch.Generator().manual_seed(0))
    assert manager.shapes == {"policy": (7,), "noisy": (2,), "dict/a": (2,), "dict/b": (1,)}
    obs = manager.compute()
    env.x = env.x + 1.0
    obs = manager.compute()
    assert obs["policy"][1].tolist() == [2, 3, 2, 3, 3, 4, 125]  # [a(t-2), a(t-1), a(t)], then clipped, scaled b
    noise = obs["noisy"] - env.x
    assert 0 < noise.abs().max() <= 0.1
    assert torch.equal(obs["dict/b"], env.x[:, :1])


def test_adaptive_sampler_moves_probability_toward_failing_bins():
    lengths = torch.tensor([200, 100])  # 4 + 2 bins of 50 frames
    sampler = AdaptiveSampler(lengths, num_envs=64, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(sampler.probabilities, torch.tensor([1 / 8] * 4 + [1 / 4] * 2))
    clips = torch.zeros(64, dtype=torch.int64)
    frames = torch.full((64,), 120)  # bin 2 of clip 0
    failed = torch.zeros(64, dtype=torch.bool)
    failed[:8] = True
    for _ in range(3):
        sampler.record(clips, frames, failed)
        sampler.record(torch.ones(64, dtype=torch.int64), torch.full((64,), 10), torch.zeros(64, dtype=torch.bool))
    before = sampler.probabilities.clone()
    sampler.update_probabilities()
    after = sampler.probabilities
    assert after[2] > 0.9 and after[2] > before[2]
    assert torch.isclose(after.sum(), torch.tensor(1.0))
    starts = sampler.sample()[1][sampler.sample()[0] == 0]
    assert ((starts >= 100 - 25) & (starts < 150)).float().mean() > 0.8  # mostly in or just before bin 2


def test_adaptive_sampler_draws_stay_inside_clips():
    lengths = torch.tensor([60, 300, 7])
    sampler = AdaptiveSampler(lengths, num_envs=4096, generator=torch.Generator().manual_seed(1))
    clips, frames = sampler.sample()
    assert (frames >= 0).all() and (frames <= lengths[clips] - 2).all()
    assert set(clips.tolist()) == {0, 1, 2}
    share = torch.bincount(clips, minlength=3).float() / 4096
    assert torch.allclose(share, torch.full((3,), 1 / 3), atol=0.03)  # every clip weighs the same


def test_adaptive_sampler_keeps_rare_failures_from_taking_over():
    lengths = torch.tensor([300, 300])
    sampler = AdaptiveSampler(lengths, num_envs=256, generator=torch.Generator().manual_seed(0))
    failed = torch.zeros(256, dtype=torch.bool)
    failed[0] = True  # one failure in 256 · 3 visits of bin 0
    for _ in range(3):
        sampler.record(torch.zeros(256, dtype=torch.int64), torch.arange(256) % 50, failed)
    sampler.update_probabilities()
    assert sampler.probabilities[0] > sampler.probabilities[1]
    assert sampler.probabilities.max() < 0.2
