"""Mirror symmetry in the feed-forward update (`symmetry` settings), with rsl_rl 5.5's semantics
(`rsl_rl.extensions.Symmetry`):

- augmentation: each minibatch is followed by its reflection (observations of both groups and actions mirrored;
  old log-probabilities, old values, advantages and returns repeated), so the surrogate and value losses average
  over twice the rows; the entropy and the KL (for the adaptive rate) are taken over the original rows;
- the mirror loss: the mean squared difference between the policy's mean action on mirrored observations and the
  mirror of its mean action on the originals, the latter without gradient; added with its weight when
  `mirror_loss` is on, otherwise only logged.

Everything is tensor work inside the minibatch's loss function (`FeedForwardPPO.minibatch_losses`): it runs eagerly,
compiled, or inside the whole-minibatch graph of `compile=step` alike, and reads nothing back to the host.

The recurrent MLP policy takes the same settings (`RecurrentPPO`): its rollout carries, beside each agent's state,
the state the policy would have had after the agent's mirrored history, and each minibatch replays the mirrored rows
from that state (`RecurrentPPO.mirrored_rows`, `RecurrentPPO.mirror_loss`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from syncfree.algo.configs import PPOTrainConfig
from syncfree.algo.settings import SymmetryConfig
from syncfree.algo.storage import Batch
from syncfree.core.imports import allow_import, load_callable
from syncfree.envs.api import VecEnv
from syncfree.envs.mirror import Mirror
from syncfree.errors import UserError
from syncfree.policy.actor_critic import ActorCritic, PolicyBase
from syncfree.policy.recurrent_mlp import RecurrentMLPPolicy


class Symmetry:
    """The `symmetry` settings with the env's `Mirror`, applied to minibatches."""

    def __init__(self, cfg: SymmetryConfig, mirror: Mirror, actor_group: str = "policy") -> None:
        self.actor_group = actor_group
        """The observation group the actor reads (`policy.actor_obs`), mirrored as such."""
        self.augment = cfg.augment
        self.trains_mirror_loss = cfg.mirror_loss
        self.mirror_loss_coef = cfg.mirror_loss_coef
        self.mirror = mirror

    def augmented(self, mb: Batch) -> Batch:
        """The minibatch followed by its reflection, row for row (`old_dist_params` stays the originals': the KL is
        taken on them only)."""
        m = self.mirror
        return Batch(actor_obs=torch.cat((mb.actor_obs, m.observations(self.actor_group, mb.actor_obs))),
                     critic_obs=torch.cat((mb.critic_obs, m.observations("critic", mb.critic_obs))),
                     actions=torch.cat((mb.actions, m.actions(mb.actions))),
                     old_log_prob=mb.old_log_prob.repeat(2), old_values=mb.old_values.repeat(2),
                     old_dist_params=mb.old_dist_params, advantages=mb.advantages.repeat(2),
                     returns=mb.returns.repeat(2))

    def mirror_loss(self, policy: PolicyBase, actor_obs: Tensor, dist_params: Tensor) -> Tensor:
        """Mean of (mean(pi(mirror(s))) - mirror(mean(pi(s))))^2 over the rows of `actor_obs` and the action
        entries. `dist_params`: the policy's distribution parameters on the rows evaluated (the augmented minibatch's,
        originals first, or the originals'); without augmentation the mirrored rows are evaluated here. Detached
        unless the mirror loss trains."""
        rows = actor_obs.shape[0]
        means = policy.head.deterministic(dist_params)
        if self.augment:
            on_mirrored = means[rows:]
        else:
            mirrored = self.mirror.observations(self.actor_group, actor_obs)
            on_mirrored = policy.head.deterministic(policy.dist_params(mirrored))
        target = self.mirror.actions(means[:rows]).detach()
        loss = (on_mirrored - target).square().mean()
        return loss if self.trains_mirror_loss else loss.detach()


def build_symmetry(cfg: PPOTrainConfig, env: VecEnv, policy: nn.Module) -> Symmetry | None:
    """The run's `Symmetry`, or None when its `symmetry` settings are all off; one line naming what stands in the way
    when they cannot apply (a policy or action kind it does not cover, an env without a mirror, a mirror that does not
    fit the env's shapes)."""
    sym = cfg.symmetry
    if not sym.active():
        return None
    if not isinstance(policy, ActorCritic | RecurrentMLPPolicy):
        raise UserError(f"symmetry: policy.kind={cfg.policy.kind} is not covered here (MLP policies, feed-forward or "
                        "recurrent)")
    if env.action_spec.kind != "continuous":
        raise UserError(f"symmetry: the mirror loss compares mean actions; {cfg.task} has {env.action_spec.kind} "
                        "actions (continuous only)")
    if sym.mirror:
        allow_import(sym.mirror, "symmetry.mirror", sym.mirror.partition(":")[0])  # a file's name: data until named
        mirror = load_callable(sym.mirror, f"symmetry.mirror={sym.mirror!r}")(env)
        source = f"symmetry.mirror={sym.mirror!r}"
    else:
        mirror = env.mirror()
        source = f"{type(env).__name__}.mirror()"
        if mirror is None:
            raise UserError(f"symmetry: {type(env).__name__} ({cfg.task}) has no mirror (VecEnv.mirror); name one "
                            "with symmetry.mirror=module:function (called with the env, returning a Mirror)")
    if not isinstance(mirror, Mirror):
        raise UserError(f"symmetry: {source} returned a {type(mirror).__name__}, not a Mirror (observations(group, "
                        "obs) and actions(actions))")
    check_fits(mirror, env, source)
    return Symmetry(sym, mirror, cfg.policy.actor_obs)


def check_fits(mirror: Mirror, env: VecEnv, source: str) -> None:
    """The mirror maps each group the policy reads, and the actions, to their own shape and dtype."""
    device = env.device
    probes = {group: torch.zeros(2, *env.obs_shapes[group], device=device) for group in ("policy", "critic")}
    probes["actions"] = torch.zeros(2, env.action_spec.size, device=device)
    for name, probe in probes.items():
        try:
            out = mirror.actions(probe) if name == "actions" else mirror.observations(name, probe)
        except (KeyError, IndexError, RuntimeError, ValueError) as e:
            raise UserError(f"symmetry: {source} fails on {name} of shape {tuple(probe.shape)}: {e}") from None
        if not isinstance(out, Tensor) or out.shape != probe.shape or out.dtype != probe.dtype:
            got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, Tensor) else type(out).__name__
            raise UserError(f"symmetry: {source} maps {name} of shape {tuple(probe.shape)} {probe.dtype} to {got} "
                            "(a reflection keeps the shape and dtype)")
