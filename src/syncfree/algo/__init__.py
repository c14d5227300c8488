"""The algorithms, chosen by name (`--algorithm NAME`): PPO on flat rollouts (`ppo`), on BPTT segments
(`recurrent-ppo`), and student-teacher distillation (`distillation`, `recurrent-distillation`), behind one
interface (`base.Algorithm`). Each brings its config type (`configs`), whose sections are its settings. Every module
of this package that declares `ALGORITHMS` (a tuple of classes) has them registered; `register_algorithm` adds one
from outside the package."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import pkgutil

from syncfree.algo.base import Algorithm
from syncfree.algo.distillation import Distillation, RecurrentDistillation
from syncfree.algo.feedforward import FeedForwardPPO
from syncfree.algo.recurrent import RecurrentPPO
from syncfree.config import TrainConfig
from syncfree.errors import UserError

ALGORITHMS: dict[str, type[Algorithm]] = {}
"""The algorithms by name."""


def register_algorithm(algorithm: type[Algorithm]) -> type[Algorithm]:
    """Add an algorithm under its `name` (a name already taken by another class is an error); returns it, so that it
    can decorate the class."""
    taken = ALGORITHMS.get(algorithm.name)
    if taken is not None and taken is not algorithm:
        raise ValueError(f"algorithm {algorithm.name!r} is registered already ({taken.__name__})")
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


def _discover() -> None:
    """Register the algorithms every module of this package declares (its `ALGORITHMS`), PPO's first."""
    for name in ("feedforward", "recurrent", *sorted(info.name for info in pkgutil.iter_modules(__path__))):
        for algorithm in getattr(importlib.import_module(f"{__name__}.{name}"), "ALGORITHMS", ()):
            register_algorithm(algorithm)


def algorithm_named(name: str, where: str = "config") -> type[Algorithm]:
    """The algorithm called `name`; one line naming the allowed ones when there is none."""
    if name not in ALGORITHMS:
        near = difflib.get_close_matches(name, list(ALGORITHMS), n=1)
        raise UserError(f"{where}: algorithm={name!r} is invalid; allowed: {', '.join(ALGORITHMS)}"
                        + (f"; did you mean {near[0]}?" if near else ""))
    return ALGORITHMS[name]


def algorithm_for(cfg: TrainConfig) -> type[Algorithm]:
    """The algorithm that trains from `cfg`: the one its `algorithm` names, whose config type `cfg` must be."""
    algorithm = algorithm_named(cfg.algorithm)
    if not isinstance(cfg, algorithm.config_type):
        raise UserError(f"config: algorithm={cfg.algorithm!r}, but the config holds the settings of "
                        f"{type(cfg).ALGORITHM or 'no algorithm'} ({type(cfg).__name__}); make the config of another "
                        "algorithm with --algorithm (or syncfree.learn(algorithm=...)), which gives its settings")
    return algorithm


def algorithms_with(section: str) -> list[str]:
    """The algorithms whose settings have the section `section` (`distill`: the distillations)."""
    return [name for name, a in ALGORITHMS.items() if section in {f.name for f in dataclasses.fields(a.config_type)}]


def policy_kinds(algorithm: type[Algorithm]) -> tuple[str, ...]:
    """The `policy.kind`s the algorithm's config type trains (by default: a task may give its policy section a type
    of more kinds)."""
    policy = getattr(algorithm.config_type(), "policy", None)
    return tuple(getattr(policy, "KINDS", ()))


def implied_algorithm(name: str, policy_kind: str | None = None, teacher: bool = False) -> tuple[str, str]:
    """The algorithm a run of `name` trains with when the user asks for a policy of another kind
    (`policy.kind=recurrent` on PPO: recurrent PPO) or names a teacher (`distill.teacher` on PPO: distillation), and
    why in words; (`name`, "") when neither changes it."""
    current = algorithm_named(name)
    family = "distillation" if teacher and current.family != "distillation" else current.family
    kind = policy_kind if policy_kind is not None and policy_kind not in policy_kinds(current) else None
    if kind is None:
        kind = current.chosen_by_policy_kind  # a teacher keeps the policy's kind: a recurrent student
    chosen = next((a for a in ALGORITHMS.values() if a.family == family and a.chosen_by_policy_kind == kind), None)
    if chosen is None or chosen is current:
        return name, ""  # the algorithm's own validation names a kind it does not train
    return chosen.name, "distill.teacher names a teacher" if family != current.family else f"policy.kind={kind}"


_discover()

__all__ = ["ALGORITHMS", "Algorithm", "Distillation", "FeedForwardPPO", "RecurrentDistillation", "RecurrentPPO",
           "algorithm_for", "algorithm_named", "algorithms_with", "implied_algorithm", "policy_kinds", "register_algorithm"]
