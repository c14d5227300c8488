"""Recurrent policy on flat observations (`policy.kind=recurrent` on any task that is not grid-arena): rsl_rl's RNN
actor-critic. The actor and the critic each normalize their observation group, run it through a stack of LSTM or
GRU cells and an MLP; the actor's output parameterizes a Gaussian (continuous actions) or a categorical (discrete)
head, the critic's is the value. Each network carries its own recurrent state, zeroed before a step whose `done`
flag says its observation starts a new episode.

It has the entry points of `RecurrentTokenPolicy`, which `syncfree.algo.recurrent` trains: `step` for rollouts
and `evaluate_sequence` for training (whole `[segments, T]` rows replayed from their initial states with the same
resets), pure tensor-in/tensor-out with no host reads. Its observation is a pair `(actor_obs, critic_obs)`.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from syncfree.core.fields import Field
from syncfree.envs.api import ActionSpec
from syncfree.policy.actor_critic import actor_and_critic_parameters, mlp
from syncfree.policy.deploy import (
    DeployedRecurrentActor,
    Deployment,
    OnnxRecurrentActor,
    flat_observation,
)
from syncfree.policy.heads import CategoricalHead, GaussianHead
from syncfree.policy.normalizer import RunningNorm
from syncfree.policy.recurrent import SequenceEvaluation, StepOutput
from syncfree.policy.settings import RecurrentMLPPolicyConfig

FlatObs = tuple[Tensor, Tensor]
"""(actor observation, critic observation): `[batch, dim]` each in a rollout step, `[S, T, dim]` in a replay."""


class RecurrentStack(nn.Module):
    """`num_layers` LSTM or GRU cells, each reading the hidden state of the one below (`torch.nn.LSTM`'s stacking).

    The state is a flat tuple of `[batch, hidden]` tensors, per layer `(h, c)` for an LSTM and `(h,)` for a GRU."""

    def __init__(self, core: str, in_dim: int, hidden: int, num_layers: int) -> None:
        super().__init__()
        cell = {"lstm": nn.LSTMCell, "gru": nn.GRUCell}[core]
        self.per_layer = 2 if core == "lstm" else 1
        self.cells = nn.ModuleList(cell(in_dim if i == 0 else hidden, hidden) for i in range(num_layers))

    @property
    def state_size(self) -> int:
        return self.per_layer * len(self.cells)

    def forward(self, x: Tensor, state: tuple[Tensor, ...], keep: Tensor) -> tuple[Tensor, tuple[Tensor, ...]]:
        """One step from `state`, multiplied by `keep` ([batch, 1]: 0 where an episode starts) first -> the top
        layer's hidden state and the new state."""
        new: list[Tensor] = []
        for i, cell in enumerate(self.cells):
            carried = tuple(s * keep for s in state[i * self.per_layer:(i + 1) * self.per_layer])
            out = cell(x, carried if self.per_layer == 2 else carried[0])
            layer = out if isinstance(out, tuple) else (out,)  # a bare tensor comes from the GRU cell
            new.extend(layer)
            x = layer[0]
        return x, tuple(new)


class RecurrentMLPPolicy(nn.Module):
    """Actor: norm -> recurrent stack -> MLP -> action head; critic: norm -> recurrent stack -> MLP -> value.

    Args:
        actor_obs_dim, critic_obs_dim: widths of the `policy` and `critic` observation groups.
        action_spec: continuous (Gaussian head, `cfg.init_std`, `cfg.std_type`) or discrete (categorical).
        cfg: `policy.*`: the MLP sizes after each core, the activation, observation normalization, and `rnn` (core,
            hidden width, layers).
    """

    last_action = None
    """The previous action is no input here (the recurrent algorithm asks)."""
    emit_full_log_probs = False
    """No loss of this policy reads full log-probabilities (the recurrent algorithm asks)."""
    is_recurrent = True
    """The actor carries its state from step to step."""

    def __init__(self, actor_obs_dim: int, critic_obs_dim: int, action_spec: ActionSpec,
                 cfg: RecurrentMLPPolicyConfig) -> None:
        super().__init__()
        r = cfg.rnn
        self.actor_obs_dim, self.critic_obs_dim, self.hidden = actor_obs_dim, critic_obs_dim, r.hidden
        self.action_spec, self.num_actions = action_spec, action_spec.size
        self.normalize_obs = cfg.normalize_obs
        norm = (lambda d: RunningNorm(d, std_offset=cfg.obs_norm_std_offset)) if cfg.normalize_obs else (
            lambda d: nn.Identity())
        self.actor_norm, self.critic_norm = norm(actor_obs_dim), norm(critic_obs_dim)
        # registered in the order of rsl_rl's parameters (noise, actor MLP, actor RNN, critic MLP, critic RNN), so
        # that optimizer states carry over index by index (`syncfree.rsl_rl.checkpoint`)
        self.head: GaussianHead | CategoricalHead = (
            GaussianHead(action_spec.size, cfg.init_std, std_type=cfg.std_type) if action_spec.kind == "continuous"
            else CategoricalHead(action_spec.size))
        self.actor = mlp(r.hidden, cfg.actor_hidden, action_spec.size, cfg.activation, cfg.layer_norm)
        self.actor_core = RecurrentStack(r.core, actor_obs_dim, r.hidden, r.num_layers)
        self.critic = mlp(r.hidden, cfg.critic_hidden, 1, cfg.activation, cfg.layer_norm)
        self.critic_core = RecurrentStack(r.core, critic_obs_dim, r.hidden, r.num_layers)

    # -- what the recurrent algorithm asks of a policy -------------------------------------------------------

    def gradient_groups(self) -> list[list[nn.Parameter]]:
        """The trainable parameters as [actor's, critic's] (`ppo.grad_clip=per_network` clips each by its own norm):
        the critic's core and MLP, and everything else (the actor's core, MLP and action distribution)."""
        return actor_and_critic_parameters(self, [self.critic_core, self.critic])

    @property
    def state_size(self) -> int:
        """Tensors in the recurrent state: the actor's, then the critic's, each `[batch, hidden]`."""
        return self.actor_core.state_size + self.critic_core.state_size

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> tuple[Tensor, ...]:
        return tuple(torch.zeros(batch, self.hidden, device=device) for _ in range(self.state_size))

    def observation_fields(self, obs_shapes: dict[str, tuple[int, ...]]) -> dict[str, Field]:
        """The rollout buffer's observation fields: the raw groups (normalized when replayed, with the statistics
        of that time, as rsl_rl does)."""
        return {"obs": Field((self.actor_obs_dim,), torch.float32),
                "critic_obs": Field((self.critic_obs_dim,), torch.float32)}

    def action_field(self) -> Field:
        if self.action_spec.kind == "continuous":
            return Field((self.num_actions,), torch.float32)
        return Field((), torch.int64)

    @staticmethod
    def rollout_input(obs: dict[str, Tensor]) -> FlatObs:
        return obs["policy"], obs["critic"]

    @staticmethod
    def stored_observation(obs: dict[str, Tensor]) -> dict[str, Tensor]:
        return {"obs": obs["policy"], "critic_obs": obs["critic"]}

    @staticmethod
    def sequence_input(data: dict[str, Tensor]) -> FlatObs:
        return data["obs"], data["critic_obs"]

    @torch.no_grad()
    def update_normalizers(self, obs: dict[str, Tensor]) -> None:
        if self.normalize_obs:  # the norms are then `RunningNorm`s (`nn.Identity` otherwise)
            cast(RunningNorm, self.actor_norm).update(obs["policy"])
            cast(RunningNorm, self.critic_norm).update(obs["critic"])

    @torch.no_grad()
    def update_actor_normalizer(self, actor_obs: Tensor) -> None:
        """The actor's normalizer alone (a distilled student's critic is not trained)."""
        if self.normalize_obs:
            cast(RunningNorm, self.actor_norm).update(actor_obs)

    # -- acting outside training (play, rsl_rl's inference policy) and deployment ---------------------------

    @staticmethod
    def actor_input(obs: dict[str, Tensor]) -> Tensor:
        return obs["policy"]

    def initial_actor_state(self, batch: int, device: torch.device | str = "cpu") -> tuple[Tensor, ...]:
        """The actor's cells' state at an episode's start: zeros, `[batch, hidden]` each."""
        return self.initial_state(batch, device)[: self.actor_core.state_size]

    def act_deterministic(self, actor_obs: Tensor, actor_state: tuple[Tensor, ...]) -> tuple[Tensor,
                                                                                           tuple[Tensor, ...]]:
        """The actor alone, one step on from `actor_state` (the critic is not run) -> the distribution's mode and
        the actor's new state."""
        keep = actor_obs.new_ones(actor_obs.shape[0], 1)
        h, new_state = self.actor_core(self.actor_norm(actor_obs), actor_state, keep)
        return self.head.deterministic(self.head.params(self.actor(h))), new_state

    def act_carrying(self, actor_obs: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
        """`act_deterministic`: how acting outside training asks every policy."""
        return self.act_deterministic(actor_obs, state)

    def deployment(self, rows: int) -> Deployment:
        """What `syncfree export` writes: the actor as rsl_rl exports it to ONNX (`OnnxRecurrentActor`), its state
        as inputs and outputs, with example inputs of `rows` rows."""
        actor = OnnxRecurrentActor(self.actor_norm, self.actor_core.cells, self.actor, self.actor_obs_dim,
                                   discrete=self.action_spec.kind == "discrete")
        return Deployment("recurrent", [actor.graph(rows)], self.action_spec,
                          flat_observation({"policy": self.actor_obs_dim}, self.normalize_obs))

    def torchscript_actor(self) -> DeployedRecurrentActor:
        """The actor as rsl_rl exports it to TorchScript: one env, its state kept inside (`reset()` zeroes it)."""
        return DeployedRecurrentActor.of(self.actor_norm, self.actor_core.cells, self.actor, self.actor_obs_dim)

    def onnx_actor(self) -> OnnxRecurrentActor:
        """The actor as rsl_rl exports it to ONNX: one env, its state as inputs and outputs."""
        return OnnxRecurrentActor(self.actor_norm, self.actor_core.cells, self.actor, self.actor_obs_dim)

    def advance(self, obs: FlatObs, state: tuple[Tensor, ...], done: Tensor) -> tuple[Tensor, ...]:
        """The state after one step on `obs` (both cores), nothing else computed: how the rollout carries the state
        of the mirrored history beside the real one (`symmetry`)."""
        return self._advance(obs, state, done)[2]

    def sequence_means(self, actor_obs: Tensor, actor_state: tuple[Tensor, ...], dones: Tensor) -> Tensor:
        """The actor's mean action at every step of rows `[S, T, dim]` replayed from `actor_state` with the episode
        starts' resets (`dones` [S, T]) -> `[S, T, actions]` (the mirror loss reads it)."""
        x = self.actor_norm(actor_obs)
        keep = (~dones).unsqueeze(-1).to(x.dtype)
        state, hs = tuple(actor_state), []
        for t in range(dones.shape[1]):
            h, state = self.actor_core(x[:, t], state, keep[:, t])
            hs.append(h)
        return self.head.deterministic(self.head.params(self.actor(torch.stack(hs, 1))))

    # -- the two entry points ------------------------------------------------------------------------------

    def _advance(self, obs: FlatObs, state: tuple[Tensor, ...], done: Tensor) -> tuple[Tensor, Tensor,
                                                                                     tuple[Tensor, ...]]:
        """One step of both cores (inputs normalized) -> the actor's and the critic's top hidden states, and the
        new state."""
        keep = (~done).unsqueeze(-1).to(obs[0].dtype)
        split = self.actor_core.state_size
        actor_h, actor_state = self.actor_core(self.actor_norm(obs[0]), state[:split], keep)
        critic_h, critic_state = self.critic_core(self.critic_norm(obs[1]), state[split:], keep)
        return actor_h, critic_h, actor_state + critic_state

    def step(self, obs: FlatObs, state: tuple[Tensor, ...], done: Tensor, last_actions: Tensor | None = None,
             greedy: bool = False) -> tuple[StepOutput, tuple[Tensor, ...]]:
        """One rollout step: `obs` ([B, actor dim], [B, critic dim]), `state` from the previous step, `done` [B]
        bool (the observation starts a new episode) -> sampled actions (the distribution's mode when `greedy`)
        with their log-prob and the value, and the new state. The entropy is not computed here (no rollout reads
        it)."""
        actor_h, critic_h, new_state = self._advance(obs, state, done)
        params = self.head.params(self.actor(actor_h))
        if greedy:
            actions = self.head.deterministic(params)
            log_prob = self.head.log_prob_entropy(params, actions)[0]
        else:
            actions, log_prob = self.head.sample(params)
        return StepOutput(actions, log_prob, None, self.critic(critic_h).squeeze(-1), None), new_state

    def evaluate_sequence(self, obs: FlatObs, actions: Tensor, initial_state: tuple[Tensor, ...], dones: Tensor,
                          last_actions: Tensor | None = None) -> SequenceEvaluation:
        """Replay rows: `obs` ([S, T, actor dim], [S, T, critic dim]), `actions` [S, T, ...], the state each row
        started from, `dones` [S, T] (as given to `step`) -> log-probs of `actions`, entropies and values, [S, T]
        each."""
        horizon = dones.shape[1]
        actor_in, critic_in = self.actor_norm(obs[0]), self.critic_norm(obs[1])
        keep = (~dones).unsqueeze(-1).to(actor_in.dtype)
        split = self.actor_core.state_size
        actor_state, critic_state = tuple(initial_state[:split]), tuple(initial_state[split:])
        actor_hs, critic_hs = [], []
        for t in range(horizon):
            h, actor_state = self.actor_core(actor_in[:, t], actor_state, keep[:, t])
            actor_hs.append(h)
            h, critic_state = self.critic_core(critic_in[:, t], critic_state, keep[:, t])
            critic_hs.append(h)
        params = self.head.params(self.actor(torch.stack(actor_hs, 1)))
        log_prob, entropy = self.head.log_prob_entropy(params, actions)
        return SequenceEvaluation(log_prob, entropy, self.critic(torch.stack(critic_hs, 1)).squeeze(-1), None)
