"""The off-policy learners' networks, each one module so that a checkpoint's policy holds all of them: twin Q critics
with their target copies (`TwinCritics`), and Soft Actor-Critic's tanh-squashed Gaussian actor with the entropy
temperature's log (`SquashedGaussianActorCritic`) or TD3's deterministic tanh actor with its target copy
(`DeterministicActorCritic`)."""

from __future__ import annotations

import copy
import math
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syncfree.envs.api import ActionSpec
from syncfree.policy.actor_critic import mlp
from syncfree.policy.deploy import ACTOR_OBS, DeployedActor, Deployment, Graph, flat_observation
from syncfree.policy.heads import normal_log_prob
from syncfree.policy.normalizer import RunningNorm
from syncfree.policy.settings import PolicyConfig

Support = tuple[float, float, int]
"""A distributional critic's atoms: `num_atoms` values evenly spaced from `v_min` to `v_max`."""

LOG_STD_MIN = -5.0
"""The bottom of the range a tanh squashes the actor's log standard deviation into (CleanRL's and SpinningUp's);
its top is `sac.log_std_max`."""


class TwinCritics(nn.Module):
    """Twin Q critics on the (normalized) critic observation and an action, their target copies (soft-updated, no
    gradient), and the observation normalizers; the actor is the subclass's."""

    is_recurrent = False
    kind = ""
    """The deployment's `policy_kind`."""

    def __init__(self, actor_obs_dim: int, critic_obs_dim: int, action_spec: ActionSpec, cfg: PolicyConfig,
                 support: Support | None = None, bounds: tuple[Tensor, Tensor] | None = None) -> None:
        super().__init__()
        self.maps_actions = bounds is not None
        """The actions go to the env mapped from [-1, 1] onto `bounds` (`to_env`)."""
        low, high = bounds if bounds is not None else (-torch.ones(action_spec.size), torch.ones(action_spec.size))
        self.action_scale: Tensor
        self.action_bias: Tensor
        self.register_buffer("action_scale", ((high - low) / 2).float())
        self.register_buffer("action_bias", ((high + low) / 2).float())
        """The map of the actor's [-1, 1] onto the env's range: `bias + scale * action` (identity without bounds)."""
        self.support = support
        """Distributional critics' atoms `(v_min, v_max, num_atoms)`; None: each critic gives one Q value."""
        self.atoms: Tensor | None
        self.register_buffer("atoms", None if support is None else torch.linspace(*support))
        outputs = 1 if support is None else support[2]
        self.actor_obs_dim, self.critic_obs_dim = actor_obs_dim, critic_obs_dim
        self.action_spec, self.action_dim = action_spec, action_spec.size
        self.actor_group = cfg.actor_obs
        """The observation group the actor reads (`policy.actor_obs`)."""
        self.normalize_obs = cfg.normalize_obs
        norm = (lambda d: RunningNorm(d, std_offset=cfg.obs_norm_std_offset)) if cfg.normalize_obs else (
            lambda d: nn.Identity())
        self.actor_norm = norm(actor_obs_dim)
        self.critic_norm = norm(critic_obs_dim)
        self.q1 = mlp(critic_obs_dim + self.action_dim, cfg.critic_hidden, outputs, cfg.activation, cfg.layer_norm)
        self.q2 = mlp(critic_obs_dim + self.action_dim, cfg.critic_hidden, outputs, cfg.activation, cfg.layer_norm)
        self.q1_target = copy.deepcopy(self.q1).requires_grad_(False)
        self.q2_target = copy.deepcopy(self.q2).requires_grad_(False)
        self.actor: nn.Sequential

    def actor_params(self) -> list[Tensor]:
        return list(self.actor.parameters())

    def to_env(self, actions: Tensor) -> Tensor:
        """Actions in [-1, 1] -> the env's range."""
        return torch.addcmul(self.action_bias, self.action_scale, actions)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        for name, fill in (("action_scale", 1.0), ("action_bias", 0.0)):  # saved before the map: [-1, 1]
            if prefix + name not in state_dict:
                state_dict[prefix + name] = torch.full_like(getattr(self, name), fill)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def critic_params(self) -> list[Tensor]:
        return [*self.q1.parameters(), *self.q2.parameters()]

    def target_params(self) -> list[Tensor]:
        """The target critics' parameters, in the order of `critic_params` (the soft update pairs them)."""
        return [*self.q1_target.parameters(), *self.q2_target.parameters()]

    def followed_params(self) -> tuple[list[Tensor], list[Tensor]]:
        """Every target parameter and the parameter it follows by soft updates, in pairs."""
        return self.target_params(), self.critic_params()

    def actor_input(self, obs: dict[str, Tensor], out: Tensor | None = None) -> Tensor:
        return obs[self.actor_group]

    def q_values(self, critic_obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Each critic's Q value (a distributional critic's: its distribution's mean)."""
        if self.atoms is not None:
            return self.expected(self.q_logits(critic_obs, actions))
        x = torch.cat((self.critic_norm(critic_obs), actions), dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)

    def target_q_values(self, critic_obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        x = torch.cat((self.critic_norm(critic_obs), actions), dim=-1)
        return self.q1_target(x).squeeze(-1), self.q2_target(x).squeeze(-1)

    def q_logits(self, critic_obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Distributional critics: each one's logits over the atoms, [rows, num_atoms]."""
        x = torch.cat((self.critic_norm(critic_obs), actions), dim=-1)
        return self.q1(x), self.q2(x)

    def target_q_probs(self, critic_obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Distributional critics: each target critic's probabilities of the atoms."""
        x = torch.cat((self.critic_norm(critic_obs), actions), dim=-1)
        return self.q1_target(x).softmax(-1), self.q2_target(x).softmax(-1)

    def expected(self, logits: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """The means of distributions over the atoms given by their logits."""
        atoms = cast(Tensor, self.atoms)
        return logits[0].softmax(-1) @ atoms, logits[1].softmax(-1) @ atoms

    @torch.no_grad()
    def update_normalizers(self, actor_obs: Tensor, critic_obs: Tensor) -> None:
        if self.normalize_obs:  # the norms are then `RunningNorm`s (`nn.Identity` otherwise)
            cast(RunningNorm, self.actor_norm).update(actor_obs)
            cast(RunningNorm, self.critic_norm).update(critic_obs)

    def initial_actor_state(self, batch: int, device: torch.device | str = "cpu") -> tuple[Tensor, ...]:
        """Empty: the actor carries no state."""
        return ()

    def act_carrying(self, actor_obs: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
        return self.act_deterministic(actor_obs), state

    def act_deterministic(self, actor_obs: Tensor) -> Tensor:
        """The actor's action without exploration, in the env's range: what evaluation, `play` and export act
        with."""
        return self.to_env(self.unit_action(actor_obs))

    def unit_action(self, actor_obs: Tensor) -> Tensor:
        """The actor's action without exploration, in [-1, 1]."""
        raise NotImplementedError

    # -- deployment -----------------------------------------------------------------------------------------

    deployed_action = ""
    """The sidecar's note on the exported action."""

    def deployment(self, rows: int) -> Deployment:
        """What `syncfree export` writes: `actor_obs -> actions`, tanh of the actor's first `action_dim` outputs
        mapped onto the range `action_bounds` chose (`SquashedMean`)."""
        module = SquashedMean(DeployedActor(self.actor_norm, self.actor, self.actor_obs_dim), self.action_dim,
                              self.action_scale, self.action_bias)
        graph = Graph("actor", module.eval(), {ACTOR_OBS: torch.zeros(rows, self.actor_obs_dim)}, ["actions"])
        action = {"kind": "continuous", "size": self.action_dim, "note": self.deployed_action}
        return Deployment(self.kind, [graph], self.action_spec,
                          flat_observation({self.actor_group: self.actor_obs_dim}, self.normalize_obs),
                          {"action": action})


class SquashedGaussianActorCritic(TwinCritics):
    """The actor maps its (normalized) observation to the mean and log standard deviation of a Gaussian whose
    samples are squashed by tanh into [-1, 1]; each critic maps the (normalized) critic observation and an action
    to a Q value. `q1_target` and `q2_target` follow the critics by soft updates and take no gradient; `log_alpha`
    is the entropy temperature's log."""

    kind = "sac"

    def __init__(self, actor_obs_dim: int, critic_obs_dim: int, action_spec: ActionSpec, cfg: PolicyConfig,
                 init_alpha: float, support: Support | None = None, bounds: tuple[Tensor, Tensor] | None = None,
                 log_std_max: float = 2.0, zero_output: bool = False) -> None:
        super().__init__(actor_obs_dim, critic_obs_dim, action_spec, cfg, support, bounds)
        self.actor = mlp(actor_obs_dim, cfg.actor_hidden, 2 * self.action_dim, cfg.activation, cfg.layer_norm)
        if zero_output:  # the mean 0 and the log standard deviation its range's middle, in every state
            output = self.actor[-1]
            assert isinstance(output, nn.Linear)
            nn.init.zeros_(output.weight)
            nn.init.zeros_(output.bias)
        self.log_std_range = (LOG_STD_MIN, log_std_max)
        """The range a tanh squashes the actor's log standard deviation into (`sac.log_std_max`)."""
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)))

    deployed_action = ("deterministic action: tanh of the squashed Gaussian's mean, mapped onto the range "
                       "action_bounds chose ([-1, 1] with unit, or where the env declares none)")

    def mean_log_std(self, actor_obs: Tensor) -> tuple[Tensor, Tensor]:
        mean, raw = self.actor(self.actor_norm(actor_obs)).split(self.action_dim, dim=-1)
        low, high = self.log_std_range
        return mean, low + 0.5 * (high - low) * (torch.tanh(raw) + 1.0)

    def sample(self, actor_obs: Tensor) -> tuple[Tensor, Tensor]:
        """Actions drawn from the squashed Gaussian (reparameterized: gradients flow through them) and their
        log-density, with the tanh's change of variables: log N(u) - sum log(1 - tanh(u)^2)."""
        return self.sample_from(*self.mean_log_std(actor_obs))

    def sample_from(self, mean: Tensor, log_std: Tensor) -> tuple[Tensor, Tensor]:
        """`sample` from the Gaussian's mean and log standard deviation (`mean_log_std`)."""
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), exact where tanh(u)^2 rounds to 1
        correction = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return torch.tanh(u), normal_log_prob(mean, std, u) - correction.sum(-1)

    def unit_action(self, actor_obs: Tensor) -> Tensor:
        """The squashed mean."""
        return torch.tanh(self.mean_log_std(actor_obs)[0])


class DeterministicActorCritic(TwinCritics):
    """TD3's networks: a deterministic actor, tanh of its MLP's output in [-1, 1], with a target copy that follows
    it by soft updates, and the twin critics."""

    kind = "td3"
    deployed_action = ("deterministic action: tanh of the actor's output, mapped onto the range "
                       "action_bounds chose ([-1, 1] with unit, or where the env declares none)")

    def __init__(self, actor_obs_dim: int, critic_obs_dim: int, action_spec: ActionSpec, cfg: PolicyConfig,
                 support: Support | None = None, bounds: tuple[Tensor, Tensor] | None = None) -> None:
        super().__init__(actor_obs_dim, critic_obs_dim, action_spec, cfg, support, bounds)
        self.actor = mlp(actor_obs_dim, cfg.actor_hidden, self.action_dim, cfg.activation, cfg.layer_norm)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)

    def followed_params(self) -> tuple[list[Tensor], list[Tensor]]:
        return [*self.target_params(), *self.actor_target.parameters()], [*self.critic_params(), *self.actor_params()]

    def unit_action(self, actor_obs: Tensor) -> Tensor:
        return torch.tanh(self.pre_tanh(actor_obs))

    def pre_tanh(self, actor_obs: Tensor) -> Tensor:
        """The actor's output before its tanh."""
        return self.actor(self.actor_norm(actor_obs))

    def target_action(self, actor_obs: Tensor) -> Tensor:
        """The target actor's action (no gradient: its parameters take none)."""
        return torch.tanh(self.actor_target(self.actor_norm(actor_obs)))


class SquashedMean(nn.Module):
    """A copy of the actor (`DeployedActor`: normalizer and MLP) -> tanh of the mean half of its output, mapped onto
    the env's range (`bias + scale * tanh`)."""

    def __init__(self, actor: DeployedActor, action_dim: int, scale: Tensor, bias: Tensor) -> None:
        super().__init__()
        self.actor, self.action_dim = actor, action_dim
        self.scale: Tensor
        self.bias: Tensor
        self.register_buffer("scale", scale.detach().clone())
        self.register_buffer("bias", bias.detach().clone())

    def forward(self, actor_obs: Tensor) -> Tensor:
        return torch.addcmul(self.bias, self.scale, torch.tanh(self.actor(actor_obs)[..., : self.action_dim]))
