"""rsl_rl users switch with one import: `from syncfree.rsl_rl import OnPolicyRunner` in place of
`from rsl_rl.runners import OnPolicyRunner` (and `DistillationRunner` for rsl_rl's). The runner takes rsl_rl's env,
config dict and arguments, writes and reads rsl_rl's checkpoints, and trains with syncfree's loop.

Stacks whose own runner classes subclass rsl_rl's (mjlab's `MjlabOnPolicyRunner`, its velocity and tracking
runners) switch with `replace_rsl_rl_runner()`, called before they are imported."""

from __future__ import annotations

import sys

from syncfree.errors import UserError
from syncfree.rsl_rl.runner import DistillationRunner, OnPolicyRunner
from syncfree.tasks.rsl_rl_config import MAPPED, READ_ELSEWHERE
from syncfree.tasks.rsl_rl_config import from_rsl_rl as config_from_rsl_rl

__all__ = ["MAPPED", "READ_ELSEWHERE", "DistillationRunner", "OnPolicyRunner", "config_from_rsl_rl",
           "replace_rsl_rl_runner"]


def replace_rsl_rl_runner() -> None:
    """Make `rsl_rl.runners.OnPolicyRunner` syncfree's, so that runner classes defined from now on (mjlab's, when
    `mjlab.rl` is imported after this call) subclass it. Raises `UserError` naming the classes already defined on
    rsl_rl's runner: they would keep training with rsl_rl."""
    import rsl_rl.runners
    import rsl_rl.runners.on_policy_runner as module

    original = module.OnPolicyRunner
    if original is OnPolicyRunner:
        return
    early = [f"{c.__module__}.{c.__qualname__}" for c in original.__subclasses__() if c.__module__ in sys.modules
             and not c.__module__.startswith("rsl_rl.")]
    if early:
        raise UserError(f"replace_rsl_rl_runner: {', '.join(early)} already subclass rsl_rl's runner (imported "
                        "before this call): call it before importing them")
    rsl_rl.runners.OnPolicyRunner = OnPolicyRunner
    module.OnPolicyRunner = OnPolicyRunner
