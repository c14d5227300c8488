"""The algorithms: PPO on flat rollouts (`feedforward`) and on BPTT segments (`recurrent`), and student-teacher
distillation (`distillation`), behind one interface (`base.Algorithm`). A config's type chooses which PPO trains it;
`distill.teacher` chooses distillation."""

from __future__ import annotations

from syncfree.algo.base import Algorithm
from syncfree.algo.distillation import Distillation, RecurrentDistillation
from syncfree.algo.feedforward import FeedForwardPPO
from syncfree.algo.recurrent import RecurrentPPO
from syncfree.config import RecurrentTrainConfig, TrainConfig

ALGORITHMS: tuple[type[Algorithm], ...] = (RecurrentPPO, FeedForwardPPO)
"""The algorithms, the most specific config type first."""


def algorithm_for(cfg: TrainConfig) -> type[Algorithm]:
    """The algorithm that trains from `cfg`: distillation when `distill.teacher` names a teacher (of a recurrent
    student with a recurrent config), else the first whose config type `cfg` is an instance of."""
    if cfg.distill.enabled():
        return RecurrentDistillation if isinstance(cfg, RecurrentTrainConfig) else Distillation
    return next(a for a in ALGORITHMS if isinstance(cfg, a.config_type))


__all__ = ["ALGORITHMS", "Algorithm", "Distillation", "FeedForwardPPO", "RecurrentDistillation", "RecurrentPPO",
           "algorithm_for"]
