"""Policies: MLP actor-critic, action heads, observation normalizers."""

from syncfree.policy.actor_critic import ActorCritic
from syncfree.policy.normalizer import RunningNorm

__all__ = ["ActorCritic", "RunningNorm"]
