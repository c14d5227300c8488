"""Adaptive start-frame sampling: start more episodes where the policy fails.

Clips are cut into bins of `bin_frames` frames. Every control step each env adds a visit to the bin it is in
and, if its episode failed there, a failure (device tensors, no host reads). Once per iteration
`update_probabilities` turns the failure rates into sampling probabilities: each rate is capped at `cap` times
the mean rate, normalized, and mixed with a uniform distribution in which every clip weighs the same whatever
its length. The failure-driven share grows with how often the policy fails: it is (1 - uniform_ratio) once the
capped rates average `rate_floor` failures per step, and proportionally less below that, so that a rare failure
does not send every episode to one bin. A start is drawn as (clip, bin) from that distribution, a frame uniformly within the bin, then
moved back by up to `lookback_frames` so that the policy approaches the hard part from before it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from syncfree.errors import UserError


class AdaptiveSampler:
    def __init__(self, clip_length: Tensor, num_envs: int, generator: torch.Generator, bin_frames: int = 50,
                 uniform_ratio: float = 0.1, cap: float = 5.0, decay: float = 0.9, lookback_frames: int = 25,
                 rate_floor: float = 0.01) -> None:
        device = clip_length.device
        self.num_envs, self.generator = num_envs, generator
        self.bin_frames, self.uniform_ratio, self.cap, self.decay = bin_frames, uniform_ratio, cap, decay
        self.rate_floor = rate_floor
        self.lookback_frames = lookback_frames
        self.clip_length = clip_length
        bins_per_clip = (clip_length + bin_frames - 1) // bin_frames
        self.clip_first_bin = torch.cumsum(bins_per_clip, 0) - bins_per_clip
        self.num_bins = int(bins_per_clip.sum())
        self.bin_clip = torch.repeat_interleave(torch.arange(len(clip_length), device=device), bins_per_clip)
        self.bin_start = (torch.arange(self.num_bins, device=device) - self.clip_first_bin[self.bin_clip]) * bin_frames
        self.bin_length = torch.minimum(clip_length[self.bin_clip] - self.bin_start,
                                        torch.full_like(self.bin_start, bin_frames))
        self.uniform = 1.0 / (len(clip_length) * bins_per_clip[self.bin_clip].float())
        """Every clip weighs 1/num_clips, shared evenly by its bins."""
        self.visits = torch.zeros(self.num_bins, device=device)
        self.failures = torch.zeros(self.num_bins, device=device)
        self.probabilities = self.uniform.clone()
        self._ones = torch.ones(num_envs, device=device)

    def bin_of(self, clip_ids: Tensor, frames: Tensor) -> Tensor:
        return self.clip_first_bin[clip_ids] + torch.div(frames, self.bin_frames, rounding_mode="floor")

    def record(self, clip_ids: Tensor, frames: Tensor, failed: Tensor) -> None:
        bins = self.bin_of(clip_ids, frames)
        self.visits.index_add_(0, bins, self._ones)
        self.failures.index_add_(0, bins, failed.float())

    def update_probabilities(self, reduce: Callable[[Tensor], Tensor] | None = None) -> None:
        """Once per iteration: failure rates → probabilities; older counts fade by `decay`.

        With several processes `reduce` sums over ranks: the rates then come from every rank's counts (the sum of
        the ranks' decayed counts is the decayed count of all envs), so every rank draws from the same
        distribution; each rank keeps and decays its own envs' counts."""
        visits, failures = self.visits, self.failures
        if reduce is not None:
            visits, failures = reduce(torch.stack((self.visits, self.failures))).unbind()
        rate = failures / visits.clamp(min=1.0)
        score = torch.minimum(rate, self.cap * rate.mean())
        total = score.sum()
        # rare failures move little mass: the adaptive share reaches (1 - uniform_ratio) only once the capped
        # rates average `rate_floor` per step
        share = (1.0 - self.uniform_ratio) * torch.clamp(total / (self.num_bins * self.rate_floor), max=1.0)
        self.probabilities.copy_(share * score / total.clamp(min=1e-12) + (1.0 - share) * self.uniform)
        self.visits.mul_(self.decay)
        self.failures.mul_(self.decay)

    def sample(self) -> tuple[Tensor, Tensor]:
        """A start (clip id, frame) for every env; callers keep the rows of the envs they reset."""
        n, g, device = self.num_envs, self.generator, self.probabilities.device
        bins = torch.multinomial(self.probabilities, n, replacement=True, generator=g)
        within = (torch.rand(n, generator=g, device=device) * self.bin_length[bins]).long()
        back = torch.randint(0, self.lookback_frames + 1, (n,), generator=g, device=device)
        clips = self.bin_clip[bins]
        last_start = self.clip_length[clips] - 2  # at least one step before the clip ends
        frames = torch.minimum((self.bin_start[bins] + within - back).clamp(min=0), last_start)
        return clips, frames

    def diagnostics(self) -> dict[str, float]:
        """Spread of the sampling distribution, read on the host."""
        p = self.probabilities
        return {"sampling/min_prob": p.min().item(), "sampling/max_prob": p.max().item(),
                "sampling/mean_prob": p.mean().item()}

    def state_dict(self) -> dict[str, Any]:
        return {"visits": self.visits.clone(), "failures": self.failures.clone(),
                "probabilities": self.probabilities.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("visits", "failures", "probabilities"):
            value = state[name]
            if value.shape != getattr(self, name).shape:
                raise UserError(f"env state: the adaptive sampler's {name} has {value.shape[-1]} bins but this run's "
                                f"clips and bin size (env.motions, env.sampler_bin_frames) give {self.num_bins}; "
                                "resume with the clips and bin size the run was trained with")
            getattr(self, name).copy_(value)
