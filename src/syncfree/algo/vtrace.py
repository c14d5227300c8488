"""Advantages over BPTT segments: GAE, and GAE with V-trace's clipped importance weights (as PufferLib and the
gridworld seed compute them).

Segments are rows of a `[segments, T]` buffer, one agent's consecutive steps each. Step t of a row holds the
observation `obs[t]`, the value `values[t]` and the action taken there, and `rewards[t]`/`dones[t]`: the reward
and episode end that *led to* `obs[t]` (so `dones[t]` also marks `obs[t]` as an episode's first observation).
The advantage of step t therefore reads `rewards[t + 1]`, `dones[t + 1]` and `values[t + 1]`; the last step of a
row has no successor in the row and gets advantage 0.

With importance ratios `ratio = pi(a|s) / mu(a|s)` of the learner over the behaviour policy, step t's TD error is
weighted by `rho_t = min(ratio[t], rho_clip)` and the trace by `c_t = min(ratio[t], c_clip)`:

    A[t] = rho_t * (rewards[t+1] + gamma * (1 - dones[t+1]) * values[t+1] - values[t])
           + gamma * lam * c_t * (1 - dones[t+1]) * A[t+1]

With ratio 1 and clips >= 1 this is GAE(gamma, lam). Value targets are `advantages + values`.
"""

from __future__ import annotations

import torch
from torch import Tensor


def vtrace_advantages(rewards: Tensor, values: Tensor, dones: Tensor, ratio: Tensor | None, gamma: float,
                      lam: float, rho_clip: float = 1.0, c_clip: float = 1.0, out: Tensor | None = None) -> Tensor:
    """Advantages `[segments, T]` of the recursion above, written into `out` when given (one loop over time,
    vectorized over segments; nothing is read on the host). `ratio=None` means on-policy (all ratios 1: GAE)."""
    if out is None:
        out = torch.empty_like(values)
    not_done = 1.0 - dones[:, 1:].to(values.dtype)
    deltas = rewards[:, 1:] + gamma * not_done * values[:, 1:] - values[:, :-1]
    traces = (gamma * lam) * not_done
    if ratio is not None:
        deltas = deltas * ratio[:, :-1].clamp(max=rho_clip)
        traces = traces * ratio[:, :-1].clamp(max=c_clip)
    out[:, -1].zero_()
    advantage = out[:, -1]
    for t in reversed(range(values.shape[1] - 1)):
        advantage = torch.addcmul(deltas[:, t], traces[:, t], advantage, out=out[:, t])
    return out


def gae_advantages(rewards: Tensor, values: Tensor, dones: Tensor, gamma: float, lam: float,
                   out: Tensor | None = None) -> Tensor:
    """GAE(gamma, lam) advantages `[segments, T]` under the row convention of this module."""
    return vtrace_advantages(rewards, values, dones, None, gamma, lam, out=out)
