"""The algorithms: PPO on flat rollouts (`feedforward`) and on BPTT segments (`recurrent`), behind one interface
(`base.Algorithm`). A config's type chooses which trains it."""

from __future__ import annotations

from syncfree.algo.base import Algorithm
from syncfree.algo.feedforward import FeedForwardPPO
from syncfree.algo.recurrent import RecurrentPPO
from syncfree.config import TrainConfig

ALGORITHMS: tuple[type[Algorithm], ...] = (RecurrentPPO, FeedForwardPPO)
"""The algorithms, the most specific config type first."""


def algorithm_for(cfg: TrainConfig) -> type[Algorithm]:
    """The algorithm that trains from `cfg`: the first whose config type `cfg` is an instance of."""
    return next(a for a in ALGORITHMS if isinstance(cfg, a.config_type))


__all__ = ["ALGORITHMS", "Algorithm", "FeedForwardPPO", "RecurrentPPO", "algorithm_for"]
