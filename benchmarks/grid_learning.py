"""Recurrent PPO on MettaGrid's `mines` map from the gridworld building blocks, against a random policy.

Drives `RecurrentTokenPolicy`, `SegmentBuffer` and `vtrace_advantages` with a plain clipped-surrogate loss on
`MettaGridVecEnv(learnable_spec())`, and prints the mean reward per agent per step of each rollout next to the
random policy's on the same map:

    python benchmarks/grid_learning.py --iterations 40
"""

from __future__ import annotations

import argparse
import time

import torch

from syncfree.algo.segments import SegmentBuffer
from syncfree.algo.vtrace import vtrace_advantages
from syncfree.core.fields import Field
from syncfree.envs.adapters.mettagrid import MettaGridVecEnv, learnable_spec, random_policy_reward
from syncfree.policy.recurrent import LSTMState, RecurrentTokenPolicy

MAX_TOKENS = 96
"""Tokens read per observation: an agent on the 8 x 8 `mines` map sees at most about 60."""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--simulations", type=int, default=4)
    p.add_argument("--horizon", type=int, default=8, help="BPTT horizon (steps per row)")
    p.add_argument("--rows-per-agent", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--random-steps", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1, help="torch threads (small batches run fastest on one)")
    return p.parse_args()


class GridPPO:
    """A rollout/update loop over the building blocks (what a trainer wires together)."""

    def __init__(self, env: MettaGridVecEnv, horizon: int, rows_per_agent: int, minibatches: int, epochs: int,
                 lr: float, gamma: float = 0.99, lam: float = 0.95, clip: float = 0.2) -> None:
        self.env, self.epochs, self.minibatches = env, epochs, minibatches
        self.gamma, self.lam, self.clip = gamma, lam, clip
        n = self.agents = env.num_envs
        self.policy = RecurrentTokenPolicy(env.action_spec.size, max_tokens=MAX_TOKENS, emit_full_log_probs=False)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=lr)
        fields = {"obs": Field(env.obs_shapes["policy"], torch.uint8), "actions": Field((), torch.int64),
                  "log_prob": Field((), torch.float32), "values": Field((), torch.float32),
                  "rewards": Field((), torch.float32), "dones": Field((), torch.bool)}
        hidden = self.policy.hidden
        self.buffer = SegmentBuffer(fields, n * rows_per_agent, horizon, n, [(hidden,), (hidden,)])
        self.obs = env.reset()["policy"]
        self.done = torch.ones(n, dtype=torch.bool)
        self.reward_in = torch.zeros(n)
        self.state = self.policy.initial_state(n)
        self.returns = torch.zeros_like(self.buffer.advantages)

    def rollout(self) -> float:
        """Fill the buffer; the mean env reward per agent per step."""
        buf, everyone = self.buffer, slice(0, self.agents)
        buf.reset_for_rollout()
        total, steps = torch.zeros(()), 0
        while not buf.ready:
            with torch.no_grad():
                out, new_state = self.policy.step(self.obs, self.state, self.done)
            buf.store(everyone, {"obs": self.obs, "actions": out.actions, "log_prob": out.log_prob,
                                 "values": out.value, "rewards": self.reward_in, "dones": self.done}, self.state)
            step = self.env.step(out.actions)
            total += step.reward.sum()
            steps += 1
            # time-outs bootstrap from the value before the step (the adapter gives no final observation)
            self.reward_in = step.reward + self.gamma * out.value * step.truncated
            self.done = step.terminated | step.truncated
            self.obs, self.state = step.obs["policy"], new_state
        return total.item() / (steps * self.agents)

    def update(self) -> dict[str, float]:
        buf = self.buffer
        data = buf.data
        vtrace_advantages(data["rewards"], data["values"], data["dones"], None, self.gamma, self.lam,
                          out=buf.advantages)
        torch.add(buf.advantages, data["values"], out=self.returns)
        count = buf.segments // self.minibatches
        stats = torch.zeros(3)
        for _ in range(self.epochs):
            for mb in range(self.minibatches):
                batch = buf.sequential_minibatch(mb, count)
                loss, parts = ppo_loss(self.policy, batch, self.returns.index_select(0, batch.indices), self.clip)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 0.5)
                self.optimizer.step()
                stats += parts
        stats /= self.epochs * self.minibatches
        return dict(zip(("policy_loss", "value_loss", "entropy"), stats.tolist(), strict=True))


def ppo_loss(policy: RecurrentTokenPolicy, batch, returns: torch.Tensor, clip: float,
             value_coef: float = 0.5, entropy_coef: float = 0.01) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped surrogate + value + entropy over a minibatch of rows; a row's last step (advantage 0 by the row
    convention) is left out."""
    d = batch.data
    ev = policy.evaluate_sequence(d["obs"], d["actions"], LSTMState(*batch.initial_state), d["dones"])
    adv = batch.advantages[:, :-1]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = (ev.log_prob[:, :-1] - d["log_prob"][:, :-1]).exp()
    surrogate = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip))
    policy_loss = (surrogate * batch.prio_weights[:, :-1]).mean()
    value_loss = 0.5 * (returns[:, :-1] - ev.value[:, :-1]).square().mean()
    entropy = ev.entropy[:, :-1].mean()
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    return loss, torch.stack([policy_loss, value_loss, entropy]).detach()


def main() -> None:
    args = parse()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    spec = learnable_spec()
    random_level = random_policy_reward(spec, args.simulations, args.random_steps, seed=args.seed)
    env = MettaGridVecEnv(spec, args.simulations, seed=args.seed)
    ppo = GridPPO(env, args.horizon, args.rows_per_agent, args.minibatches, args.epochs, args.lr)
    print(f"random policy: {random_level:.4f} reward per agent per step")
    start, agent_steps = time.perf_counter(), 0
    for it in range(args.iterations):
        reward = ppo.rollout()
        stats = ppo.update()
        agent_steps += ppo.buffer.segments * ppo.buffer.bptt_horizon
        print(f"iter {it:3d}  reward/agent/step {reward:.4f} ({reward / random_level:5.2f}x random)  "
              f"entropy {stats['entropy']:.3f}  value_loss {stats['value_loss']:.4f}  "
              f"{agent_steps} agent steps  {time.perf_counter() - start:6.1f} s")
    env.close()


if __name__ == "__main__":
    main()
