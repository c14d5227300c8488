"""rsl_rl users switch with one import: `from syncfree.rsl_rl import OnPolicyRunner` in place of
`from rsl_rl.runners import OnPolicyRunner`. The runner takes rsl_rl's env, config dict and arguments, writes and
reads rsl_rl's checkpoints, and trains with syncfree's loop. Needs tensordict (with rsl-rl-lib:
`pip install 'syncfree[bench]'`) for rsl_rl's observations."""

from syncfree.rsl_rl.config import from_rsl_rl as config_from_rsl_rl
from syncfree.rsl_rl.runner import OnPolicyRunner

__all__ = ["OnPolicyRunner", "config_from_rsl_rl"]
