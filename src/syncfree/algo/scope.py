"""Which perf switches a run sets away from their defaults where they change nothing (the scope: each algorithm's
`Algorithm.scope`, through `syncfree.tasks.switch_scope`), and which settings of a feature that is off it sets."""

from __future__ import annotations

import logging

from syncfree.config import TrainConfig
from syncfree.core.switches import PerfConfig, Scope

log = logging.getLogger("syncfree")


def warn_inert_switches(cfg: TrainConfig, scope: Scope, defaults: TrainConfig | None = None) -> list[str]:
    """One warning line for each switch set away from its default where it changes nothing, and for each setting of
    a feature that is off (`TrainConfig.unused_settings` against `defaults`, the task's preset); returns the
    names."""
    default = PerfConfig()
    named = []
    for f in PerfConfig.switches():
        if getattr(cfg.perf, f.name) == getattr(default, f.name):
            continue
        reason = cfg.perf.inert_reason(f.name, scope)
        if reason is not None:
            log.warning("perf.%s=%s changes nothing here: %s", f.name, getattr(cfg.perf, f.name), reason)
            named.append(f.name)
    for setting, reason in cfg.unused_settings(defaults):
        log.warning("%s changes nothing: %s", setting, reason)
        named.append(setting.split("=")[0])
    return named
