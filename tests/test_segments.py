"""BPTT segment buffer: rows per agent, snapshots at row starts, samplers, switch equivalence and sync budget."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from syncfree.algo.segments import SegmentBuffer, prioritized_beta
from syncfree.core.counters import count_syncs
from syncfree.core.fields import Field
from syncfree.errors import UserError

HIDDEN, HORIZON, SEGMENTS = 3, 4, 10
SLICES = (slice(0, 2), slice(2, 5))
AGENTS = 5
SWITCHES = ("cpu_time_index", "preallocated_last_actions", "cached_minibatch_indices")

FIELDS = {
    "obs": Field((6, 3), torch.uint8),
    "actions": Field((), torch.int64),
    "log_prob": Field((), torch.float32),
    "values": Field((), torch.float32),
    "rewards": Field((), torch.float32),
    "dones": Field((), torch.bool),
    "agent": Field((), torch.int64),
    "step": Field((), torch.int64),
}


def buffer(**switches: bool | str) -> SegmentBuffer:
    return SegmentBuffer(FIELDS, SEGMENTS, HORIZON, AGENTS, [(HIDDEN,), (HIDDEN,)], **switches)


def step_data(env: slice, step: int, gen: torch.Generator) -> tuple[dict[str, torch.Tensor], tuple]:
    n = env.stop - env.start
    data = {
        "obs": torch.randint(0, 256, (n, 6, 3), generator=gen).to(torch.uint8),
        "actions": torch.randint(0, 5, (n,), generator=gen),
        "log_prob": torch.randn(n, generator=gen),
        "values": torch.randn(n, generator=gen),
        "rewards": torch.randn(n, generator=gen),
        "dones": torch.rand(n, generator=gen) < 0.2,
        "agent": torch.arange(env.start, env.stop),
        "step": torch.full((n,), step),
    }
    return data, (torch.randn(n, HIDDEN, generator=gen), torch.randn(n, HIDDEN, generator=gen))


def rollout(buf: SegmentBuffer, gen: torch.Generator, log: list | None = None) -> int:
    """Slice 0 steps twice for every step of slice 1, until the buffer is full; returns the steps taken."""
    buf.reset_for_rollout()
    steps = [0, 0]
    while not buf.ready:
        for k, env in enumerate(SLICES):
            for _ in range(2 if k == 0 else 1):
                if buf.ready:
                    break
                data, state = step_data(env, steps[k], gen)
                if log is not None:
                    log.append((env, steps[k], data, state))
                buf.store(env, data, state)
                steps[k] += 1
    return sum(steps)


def minibatches(buf: SegmentBuffer, gen: torch.Generator) -> list:
    buf.advantages.copy_(torch.randn(SEGMENTS, HORIZON, generator=gen))
    out = [buf.sequential_minibatch(mb, 5) for mb in range(3)]
    sampler = torch.Generator().manual_seed(7)
    out += [buf.prioritized_minibatch(mb, 4, alpha=0.6, beta=prioritized_beta(0.4, mb / 2), generator=sampler)
            for mb in range(3)]
    out.append(buf.prioritized_minibatch(1, 5, alpha=0.0, beta=0.4))
    return out


def test_rows_hold_consecutive_steps_of_one_agent_and_the_state_it_started_with() -> None:
    buf, log = buffer(), []
    rollout(buf, torch.Generator().manual_seed(0), log)
    assert (buf.row_slot_ids >= SEGMENTS).any()  # the fast slice ran out of rows and went on in scratch rows
    agent, step = buf.data["agent"], buf.data["step"]
    for row in range(SEGMENTS):
        assert (agent[row] == agent[row, 0]).all()
        assert torch.equal(step[row], step[row, 0] + torch.arange(HORIZON))
        assert step[row, 0] % HORIZON == 0
    assert sorted(agent[:, 0].tolist()) != [agent[0, 0].item()] * SEGMENTS
    starts = {(env.start + i, s): (h[i], c[i]) for env, s, _, (h, c) in log for i in range(env.stop - env.start)}
    for row in range(SEGMENTS):
        h, c = starts[(agent[row, 0].item(), step[row, 0].item())]
        assert torch.equal(buf.states[0][row], h) and torch.equal(buf.states[1][row], c)
    writes = {(env.start + i, s): d["rewards"][i] for env, s, d, _ in log for i in range(env.stop - env.start)}
    for row in range(SEGMENTS):
        for t in range(HORIZON):
            assert buf.data["rewards"][row, t] == writes[(agent[row, t].item(), step[row, t].item())]


def test_the_rollout_ends_when_every_row_is_full_and_restarts_at_row_zero() -> None:
    buf = buffer()
    gen = torch.Generator().manual_seed(1)
    rollout(buf, gen)
    assert buf.full_rows >= SEGMENTS and buf.ready
    buf.reset_for_rollout()
    rows, times = buf.rollout_position(SLICES[1])
    assert rows.tolist() == [2, 3, 4] and times.tolist() == [0, 0, 0]
    assert not buf.ready and buf.full_rows == 0 and buf.t_in_row.eq(0).all()
    assert buf.row_slot_ids.tolist() == list(range(AGENTS)) and buf.time_index(SLICES[1]) == 0
    synchronous = buffer()
    steps = 0
    while not synchronous.ready:
        synchronous.store(slice(0, AGENTS), *step_data(slice(0, AGENTS), steps, gen))
        steps += 1
    assert steps == HORIZON * 2  # 10 rows, 5 agents: two rows each


def test_last_actions_follow_the_stored_actions() -> None:
    buf, log = buffer(), []
    rollout(buf, torch.Generator().manual_seed(2), log)
    for env in SLICES:
        last = [d["actions"] for e, _, d, _ in log if e == env][-1]
        assert torch.equal(buf.previous_actions(env), last)


@pytest.mark.parametrize("switch,value", [(switch, False) for switch in SWITCHES]
                         + [("preallocated_last_actions", "seed_before")])
def test_each_switch_off_gives_bitwise_equal_buffers_and_minibatches(switch: str, value: bool | str) -> None:
    optimized, baseline = buffer(), buffer(**{switch: value})
    runs = []
    for buf in (optimized, baseline):
        gen = torch.Generator().manual_seed(3)
        batches = []
        for _ in range(3):
            rollout(buf, gen)
            batches.append(minibatches(buf, gen))
        runs.append(batches)
    for name in FIELDS:
        assert torch.equal(optimized.data[name], baseline.data[name]), name
    for a, b in zip(optimized.states, baseline.states, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(optimized.last_actions, baseline.last_actions)
    assert torch.equal(optimized.row_slot_ids, baseline.row_slot_ids)
    assert torch.equal(optimized.t_in_row, baseline.t_in_row)
    for batches_a, batches_b in zip(*runs, strict=True):
        for a, b in zip(batches_a, batches_b, strict=True):
            assert torch.equal(a.indices, b.indices) and torch.equal(a.prio_weights, b.prio_weights)
            assert torch.equal(a.advantages, b.advantages)
            assert all(torch.equal(a.data[k], b.data[k]) for k in FIELDS)
            assert all(torch.equal(x, y) for x, y in zip(a.initial_state, b.initial_state, strict=True))


def test_switches_change_what_is_allocated_and_read() -> None:
    optimized, baseline = buffer(), buffer(**dict.fromkeys(SWITCHES, False))
    pointer = optimized.last_actions.data_ptr()
    assert optimized.last_actions.shape[0] == AGENTS and baseline.last_actions.shape[0] == 0
    for buf in (optimized, baseline):
        rollout(buf, torch.Generator().manual_seed(4))
    assert optimized.last_actions.data_ptr() == pointer  # sized once, never regrown
    assert baseline.last_actions.shape[0] == AGENTS  # grown on demand as the slices reached past its end
    first = optimized.sequential_minibatch(1, 5)
    again = optimized.sequential_minibatch(1, 5)
    assert first.indices is again.indices and first.prio_weights is again.prio_weights
    first, again = baseline.sequential_minibatch(1, 5), baseline.sequential_minibatch(1, 5)
    assert first.indices is not again.indices and first.prio_weights is not again.prio_weights
    assert first.indices.tolist() == [5, 6, 7, 8, 9]
    grown = baseline.last_actions.data_ptr()
    for buf in (optimized, baseline):
        rollout(buf, torch.Generator().manual_seed(5))
    assert optimized.last_actions.data_ptr() == pointer and baseline.last_actions.data_ptr() == grown


def test_prioritized_sampling_prefers_large_advantages_and_weights_by_probability() -> None:
    buf = buffer()
    rollout(buf, torch.Generator().manual_seed(6))
    buf.advantages.zero_()
    buf.advantages[3] = 2.0
    buf.advantages[7] = -1.0
    gen = torch.Generator().manual_seed(0)
    batch = buf.prioritized_minibatch(0, 2, alpha=1.0, beta=0.5, generator=gen)
    assert sorted(batch.indices.tolist()) == [3, 7]  # without replacement: the only rows with advantage
    probs = torch.full((SEGMENTS,), 1e-6)
    probs[3], probs[7] = 2.0 + 1e-6, 1.0 + 1e-6
    probs = probs / (3.0 + 1e-6)
    want = (SEGMENTS * probs[batch.indices]) ** -0.5
    torch.testing.assert_close(batch.prio_weights, want.unsqueeze(1).expand(-1, HORIZON))
    assert torch.equal(batch.data["agent"], buf.data["agent"][batch.indices])
    assert prioritized_beta(0.4, 0.0) == 0.4 and prioritized_beta(0.4, 0.5) == pytest.approx(0.7)
    assert prioritized_beta(0.4, 3.0) == 1.0


def test_optimized_store_and_minibatches_read_nothing_on_the_host_and_store_allocates_nothing() -> None:
    gen = torch.Generator().manual_seed(8)
    optimized, baseline = buffer(), buffer(cpu_time_index=False)
    for buf in (optimized, baseline):
        rollout(buf, torch.Generator().manual_seed(8))  # warm-up: caches filled
        buf.reset_for_rollout()
    steps = [step_data(SLICES[1], s, gen) for s in range(HORIZON + 1)]  # crosses a row boundary
    with count_syncs() as store:
        for data, state in steps:
            optimized.store(SLICES[1], data, state)
    with count_syncs() as baseline_store:
        for data, state in steps:
            baseline.store(SLICES[1], data, state)
    assert store.syncs == 0 and store.allocations == 0
    assert baseline_store.syncs == len(steps)  # one device read of the time index per store
    optimized.sequential_minibatch(0, 5)
    with count_syncs() as sampling:
        optimized.sequential_minibatch(0, 5)
        optimized.prioritized_minibatch(1, 4, alpha=0.6, beta=0.5)
    assert sampling.syncs == 0


@pytest.mark.parametrize("cached", [True, False])
def test_sequential_minibatches_take_consecutive_rows_and_wrap_past_the_last(cached: bool) -> None:
    buf = buffer(cached_minibatch_indices=cached)
    assert buf.sequential_indices(1, 4).tolist() == [4, 5, 6, 7]
    assert buf.sequential_indices(2, 4).tolist() == [8, 9, 0, 1]  # 10 segments: the third minibatch wraps
    assert buf.sequential_indices(3, 4).tolist() == [2, 3, 4, 5]


def test_too_few_segments_for_the_agents_is_a_user_error() -> None:
    with pytest.raises(UserError, match="segments=4 is fewer than total_agents=5"):
        SegmentBuffer(FIELDS, 4, HORIZON, AGENTS)


@pytest.mark.parametrize("switches", [{}, {name: False for name in SWITCHES}], ids=["optimized", "baseline"])
def test_row_tracking_and_indices_are_int64_as_the_gridworld_seed_chose(switches: dict[str, bool]) -> None:
    """The gridworld seed moved its row tracking (`row_slot_ids`, `t_in_row`, the range tensor) and its minibatch
    indices to int64, torch's indexing dtype (an int32 index is converted on every gather); both polarities of
    every switch keep them so, as does the CPU mirror of the time index."""
    buf = buffer(**switches)
    assert buf.row_slot_ids.dtype == buf.t_in_row.dtype == buf._range.dtype == torch.int64
    if buf.t_in_row_cpu is not None:
        assert buf.t_in_row_cpu.dtype == np.int64
    rollout(buf, torch.Generator().manual_seed(0))
    for minibatch in (buf.sequential_minibatch(0, 4), buf.prioritized_minibatch(1, 4, alpha=0.6, beta=0.4)):
        assert minibatch.indices.dtype == torch.int64
    assert buf.sequential_indices(1, 4).dtype == torch.int64
