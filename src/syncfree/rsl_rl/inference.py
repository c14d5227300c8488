"""The live actor as rsl_rl's `runner.alg.get_policy()` returns it, and its exports in rsl_rl's layout."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor, nn

from syncfree.errors import UserError
from syncfree.policy.actor_critic import ActorCritic
from syncfree.policy.deploy import DeployedActor, OnnxRecurrentActor, restart
from syncfree.policy.heads import GaussianHead
from syncfree.policy.recurrent_mlp import RecurrentMLPPolicy


class InferencePolicy(nn.Module):
    """The live actor as rsl_rl's `get_policy()` returns it: `policy(obs)` with obs the env's observation
    TensorDict (or the actor's groups already concatenated) -> the deterministic action. A recurrent policy carries
    its actor's state from call to call; `reset(dones)` zeroes it where `dones` is set (all of it without
    `dones`), as rsl_rl's recurrent models do."""

    def __init__(self, policy: ActorCritic | RecurrentMLPPolicy, groups: list[str]) -> None:
        super().__init__()
        self.policy = policy
        self.groups = list(groups)
        self.is_recurrent = policy.is_recurrent
        self.state: tuple[Tensor, ...] | None = None
        """The actor's state (None: zero, at the next call's batch size; a feed-forward actor's is empty)."""

    def forward(self, obs: Any) -> Tensor:
        if isinstance(obs, Tensor):
            actor_obs = obs
        elif len(self.groups) == 1:
            actor_obs = obs[self.groups[0]]
        else:
            actor_obs = torch.cat([obs[g] for g in self.groups], dim=-1)
        if self.state is None or any(s.shape[0] != actor_obs.shape[0] for s in self.state):
            self.state = self.policy.initial_actor_state(actor_obs.shape[0], actor_obs.device)
        actions, state = self.policy.act_carrying(actor_obs, self.state)
        self.state = tuple(s.detach() for s in state)  # a graph through every past call would grow without end
        return actions

    def reset(self, dones: Tensor | None = None, hidden_state: Any = None) -> None:
        if hidden_state is not None:
            raise UserError("rsl_rl runner: reset(hidden_state=...) is not supported; reset(dones) zeroes the state "
                            "of the envs whose episode ended")
        self.state = None if dones is None or self.state is None else restart(self.state, dones)

    @property
    def output_std(self) -> Tensor:
        return cast(GaussianHead, self.policy.head).std()

    def as_jit(self) -> nn.Module:
        return self.policy.torchscript_actor()

    def as_onnx(self, verbose: bool = False) -> DeployedActor | OnnxRecurrentActor:
        """rsl_rl's signature; `verbose` changes nothing here."""
        return self.policy.onnx_actor()
