"""Where a training config stands for the perf switches: which of them act there and which change nothing."""

from __future__ import annotations

import logging

import torch

from syncfree.algo.losses import build_losses, needs_full_log_probs
from syncfree.config import TrainConfig
from syncfree.core.switches import PerfConfig, Scope

log = logging.getLogger("syncfree")

ENV_LAYER_TASKS = ("g1-track",)
"""Built-in tasks whose env is manager-based (observation groups, history, commands): they read the env-side
switches."""


def switch_scope(cfg: TrainConfig, device: torch.device | str = "cpu", world_size: int = 1) -> Scope:
    """The `Scope` of a run of `cfg` on `device` with `world_size` processes."""
    recurrent = cfg.policy.kind == "recurrent"
    p = cfg.ppo
    if recurrent:  # rows of the recurrent policy are agents; the critic is not chunked there anyway
        rows = cfg.env.num_envs * cfg.env.grid.agents_per_env
    else:
        rows = max(cfg.env.num_envs, cfg.env.num_envs * p.steps_per_env // max(p.num_minibatches, 1))
    return Scope(algorithm="recurrent" if recurrent else "feedforward", policy=cfg.policy.kind,
                 env_layer=cfg.task in ENV_LAYER_TASKS, device=torch.device(device).type,
                 adaptive_lr=p.schedule == "adaptive", world_size=world_size, critic_rows=rows,
                 full_log_probs_needed=recurrent and needs_full_log_probs(build_losses(cfg.losses, p)),
                 sequential_minibatches=p.minibatch_sampler == "sequential" or p.prio_alpha <= 0)


def warn_inert_switches(cfg: TrainConfig, scope: Scope) -> list[str]:
    """One warning line for each switch set away from its default where it changes nothing; returns the names."""
    default = PerfConfig()
    named = []
    for f in PerfConfig.switches():
        if getattr(cfg.perf, f.name) == getattr(default, f.name):
            continue
        reason = cfg.perf.inert_reason(f.name, scope)
        if reason is not None:
            log.warning("perf.%s=%s changes nothing here: %s", f.name, getattr(cfg.perf, f.name), reason)
            named.append(f.name)
    return named
