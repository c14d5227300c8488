"""The gridworld building blocks together: recurrent PPO on real MettaGrid simulations of the `mines` map."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mettagrid")

from syncfree.algo.segments import Minibatch, SegmentBuffer, prioritized_beta
from syncfree.algo.vtrace import vtrace_advantages
from syncfree.core.counters import count_syncs
from syncfree.core.fields import Field
from syncfree.envs.adapters.mettagrid import MettaGridVecEnv, learnable_spec, random_policy_reward
from syncfree.policy.recurrent import LSTMState, RecurrentTokenPolicy

GAMMA, LAM, CLIP = 0.99, 0.95, 0.2
SIMULATIONS = 4


pytestmark = pytest.mark.usefixtures("one_thread")


class Loop:
    """Rollouts into a `SegmentBuffer` with `RecurrentTokenPolicy.step`, updates by `evaluate_sequence`."""

    def __init__(self, seed: int, horizon: int = 8, rows_per_agent: int = 4, lr: float = 3e-3) -> None:
        torch.manual_seed(seed)
        self.env = env = MettaGridVecEnv(learnable_spec(), SIMULATIONS, seed=seed)
        n = self.agents = env.num_envs
        self.policy = RecurrentTokenPolicy(env.action_spec.size, max_tokens=96, emit_full_log_probs=False)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=lr)
        fields = {"obs": Field(env.obs_shapes["policy"], torch.uint8), "actions": Field((), torch.int64),
                  "log_prob": Field((), torch.float32), "values": Field((), torch.float32),
                  "rewards": Field((), torch.float32), "dones": Field((), torch.bool),
                  "ratio": Field((), torch.float32)}
        hidden = self.policy.hidden
        self.buffer = SegmentBuffer(fields, n * rows_per_agent, horizon, n, [(hidden,), (hidden,)])
        self.obs = env.reset()["policy"]
        self.done = torch.ones(n, dtype=torch.bool)
        self.reward_in = torch.zeros(n)
        self.state = self.policy.initial_state(n)
        self.ones = torch.ones(n)

    def act_and_store(self):
        with torch.no_grad():
            out, new_state = self.policy.step(self.obs, self.state, self.done)
        self.buffer.store(slice(0, self.agents), {
            "obs": self.obs, "actions": out.actions, "log_prob": out.log_prob, "values": out.value,
            "rewards": self.reward_in, "dones": self.done, "ratio": self.ones}, self.state)
        return out, new_state

    def rollout(self) -> float:
        """Fill the buffer; the mean env reward per agent per step."""
        self.buffer.reset_for_rollout()
        total, steps = torch.zeros(()), 0
        while not self.buffer.ready:
            out, new_state = self.act_and_store()
            step = self.env.step(out.actions)
            total += step.reward.sum()
            steps += 1
            self.reward_in = step.reward + GAMMA * out.value * step.truncated  # time-outs bootstrap
            self.done = step.terminated | step.truncated
            self.obs, self.state = step.obs["policy"], new_state
        return total.item() / (steps * self.agents)

    def advantages(self, ratio: bool) -> None:
        d = self.buffer.data
        vtrace_advantages(d["rewards"], d["values"], d["dones"], d["ratio"] if ratio else None, GAMMA, LAM,
                          rho_clip=1.0, c_clip=1.0, out=self.buffer.advantages)

    def minibatch_update(self, batch: Minibatch) -> torch.Tensor:
        """One clipped-surrogate step on the rows of `batch`; returns (loss, policy, value, entropy)."""
        d = batch.data
        ev = self.policy.evaluate_sequence(d["obs"], d["actions"], LSTMState(*batch.initial_state), d["dones"])
        returns = batch.advantages + d["values"]
        adv = batch.advantages[:, :-1]  # a row's last step has no successor in the row: advantage 0
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        ratio = (ev.log_prob - d["log_prob"]).exp()
        surrogate = torch.max(-adv * ratio[:, :-1], -adv * ratio[:, :-1].clamp(1 - CLIP, 1 + CLIP))
        policy_loss = (surrogate * batch.prio_weights[:, :-1]).mean()
        value_loss = 0.5 * (returns - ev.value)[:, :-1].square().mean()
        entropy = ev.entropy[:, :-1].mean()
        loss = policy_loss + 0.5 * value_loss - 0.01 * entropy
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 0.5)
        self.optimizer.step()
        self.buffer.data["ratio"].index_copy_(0, batch.indices, ratio.detach())
        return torch.stack([loss, policy_loss, value_loss, entropy]).detach()

    def update(self, epochs: int = 4, minibatches: int = 4, prioritized: bool = False) -> torch.Tensor:
        count = self.buffer.segments // minibatches
        stats = []
        for epoch in range(epochs):
            for mb in range(minibatches):
                if prioritized:  # PufferLib's order: V-trace advantages with the latest ratios, then sample
                    self.advantages(ratio=True)
                    beta = prioritized_beta(0.2, epoch / max(epochs - 1, 1))
                    batch = self.buffer.prioritized_minibatch(mb, count, alpha=0.8, beta=beta)
                else:
                    batch = self.buffer.sequential_minibatch(mb, count)
                stats.append(self.minibatch_update(batch))
        return torch.stack(stats)


def test_recurrent_ppo_iterations_on_mettagrid_run_with_finite_losses() -> None:
    loop = Loop(seed=0, horizon=8, rows_per_agent=2)
    before = [p.detach().clone() for p in loop.policy.parameters()]
    for _ in range(2):
        loop.rollout()
        loop.advantages(ratio=False)
        assert loop.buffer.advantages.abs().sum() > 0 and (loop.buffer.advantages[:, -1] == 0).all()
        stats = loop.update(epochs=2, minibatches=2, prioritized=True)
        assert stats.shape == (4, 4) and stats.isfinite().all()
        assert not torch.equal(loop.buffer.data["ratio"], torch.ones_like(loop.buffer.data["ratio"]))
    assert all(not torch.equal(a, b.detach()) for a, b in zip(before, loop.policy.parameters(), strict=True))
    assert loop.buffer.data["obs"][:, :, 0, 1].ne(0xFF).all()  # every stored step holds an observation
    loop.buffer.reset_for_rollout()
    with count_syncs() as counts:
        loop.act_and_store()
    assert counts.syncs == 0
    loop.env.close()


@pytest.mark.slow
def test_recurrent_ppo_beats_the_random_policy_on_mines() -> None:
    random_level = random_policy_reward(learnable_spec(), SIMULATIONS, steps=300)
    loop = Loop(seed=0)
    rewards = []
    for _ in range(30):
        rewards.append(loop.rollout())
        loop.advantages(ratio=False)
        loop.update()
    loop.env.close()
    assert 0.03 < random_level < 0.1
    assert sum(rewards[-5:]) / 5 > 2 * random_level, (random_level, rewards)
