"""A policy's deterministic actor as a module to deploy (ONNX, TorchScript), and the state a recurrent actor
carries from step to step.

Two layouts share these modules:

- syncfree's (`syncfree export`): each policy's `deployment(rows)` names its graphs (`Graph`), input `actor_obs`
  with a dynamic batch axis; a recurrent actor takes its state as inputs (`h_in`, ...) and returns the next one
  (`h_out`, ...): the caller carries it, zeros start an episode;
- rsl_rl's (`syncfree.rsl_rl`'s `export_policy_to_jit` / `_to_onnx`, the policies' `torchscript_actor` and
  `onnx_actor`): input `obs`, one env for a recurrent actor, whose TorchScript module keeps its state inside.

Each module is built from a policy's parts (normalizer, cells, layers), copied, or wraps the live policy (the token
actor-critic's graphs); this module imports no policy class: each policy builds its own.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syncfree.envs.api import ActionSpec
from syncfree.policy.normalizer import RunningNorm

ACTOR_OBS = "actor_obs"
"""The name of the actor observation's input in syncfree's graphs."""
STATE_NOTE = ("the caller carries the state: each output is the matching input of the next step; zeros start an "
              "episode (all of it at the first step, and a row's where its episode ended)")


@dataclass
class Graph:
    """One module to export: its forward's argument names are the ONNX input names (passed by name)."""

    name: str
    module: nn.Module
    inputs: dict[str, Tensor]
    """Input name -> example tensor."""
    outputs: list[str]
    state: list[tuple[str, str]] = field(default_factory=list)
    """The recurrent state: (input, output) name pairs."""
    axes: dict[str, dict[int, str]] = field(default_factory=dict)
    """Inputs' and outputs' dynamic axes (axis -> name) where they are not the first alone, as `batch`."""
    note: str = ""

    def dynamic_axes(self, name: str) -> dict[int, str]:
        return self.axes.get(name, {0: "batch"})


@dataclass
class Deployment:
    """What `syncfree export` writes of a policy: its graphs, and what the sidecar says of them."""

    kind: str
    """The sidecar's `policy_kind`."""
    graphs: list[Graph]
    action_spec: ActionSpec
    observation: dict[str, Any]
    """The sidecar's `observation` section: the input's name, its width and layout, or its shape, and the
    normalization."""
    sections: dict[str, Any] = field(default_factory=dict)
    """Further sidecar sections (the token actor-critic's `tokens`)."""


def flat_observation(layout: dict[str, int], normalized: bool) -> dict[str, Any]:
    """The sidecar's `observation` of a flat actor observation: its parts' names, offsets and widths."""
    parts, start = [], 0
    for name, width in layout.items():
        parts.append({"name": name, "start": start, "width": width})
        start += width
    return {"input": ACTOR_OBS, "width": start, "layout": parts,
            "normalization": "running mean/std of the checkpoint, inside the graphs" if normalized else "none"}


def restart(state: tuple[Tensor, ...], dones: Tensor) -> tuple[Tensor, ...]:
    """`state` ([batch, ...] tensors) zeroed on the rows whose `dones` is set: their next step starts an episode."""
    return tuple(s * (dones == 0).unsqueeze(-1).to(s.dtype) for s in state)


def normalizer_buffers(module: nn.Module, norm: nn.Module, dim: int) -> None:
    """`mean` and `scale` buffers on `module`: the observation normalizer `norm` as `(obs - mean) / scale`."""
    if isinstance(norm, RunningNorm):
        scale = norm.var.sqrt() + norm.std_offset if norm.std_offset else torch.sqrt(norm.var + norm.eps)
        mean = norm.mean
    else:
        mean, scale = torch.zeros(dim), torch.ones(dim)
    module.register_buffer("mean", mean.detach().clone())
    module.register_buffer("scale", scale.detach().clone())


class DeployedActor(nn.Module):
    """A copy of the MLP actor (TorchScript and ONNX): `(obs - mean) / scale`, then the MLP -> the Gaussian mean
    (a categorical policy's logits); equal to the live policy's (the same operations in the same order)."""

    is_recurrent = False
    if TYPE_CHECKING:  # buffers (annotated only for the type checker: TorchScript cannot read the annotations)
        mean: Tensor
        scale: Tensor

    def __init__(self, norm: nn.Module, layers: nn.Sequential, obs_dim: int) -> None:
        super().__init__()
        self.input_names, self.output_names = ["obs"], ["actions"]
        normalizer_buffers(self, norm, obs_dim)
        self.mlp = nn.Sequential(*copy.deepcopy(list(layers)))
        self.input_size = obs_dim

    def forward(self, actor_obs: Tensor) -> Tensor:
        return self.mlp((actor_obs - self.mean) / self.scale)

    @torch.jit.export
    def reset(self) -> None:
        """No recurrent state (rsl_rl's exported models have this method)."""

    def get_dummy_inputs(self) -> tuple[Tensor]:
        return (torch.zeros(1, self.input_size),)


class ArgMax(nn.Module):
    """A categorical actor's deterministic action: the arg-max (int64), and the `logits` it is taken from."""

    def __init__(self, logits: nn.Module) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, actor_obs: Tensor) -> tuple[Tensor, Tensor]:
        logits = self.logits(actor_obs)
        return logits.argmax(-1), logits


def mlp_actor_graph(norm: nn.Module, layers: nn.Sequential, obs_dim: int, discrete: bool, rows: int) -> Graph:
    """syncfree's graph of an MLP actor (`DeployedActor`): `actor_obs -> actions` (and `logits` when `discrete`),
    with an example input of `rows` rows."""
    actor = DeployedActor(norm, layers, obs_dim)
    module, outputs = (ArgMax(actor), ["actions", "logits"]) if discrete else (actor, ["actions"])
    return Graph("actor", module.eval(), {ACTOR_OBS: torch.zeros(rows, obs_dim)}, outputs)


def torch_rnn(cells: nn.ModuleList) -> nn.LSTM | nn.GRU:
    """Stacked LSTM (or GRU) cells as one `torch.nn.LSTM` (or `GRU`) with the same weights: the module rsl_rl's
    exported recurrent models hold."""
    first = cells[0]
    rnn = (nn.LSTM if isinstance(first, nn.LSTMCell) else nn.GRU)(first.input_size, first.hidden_size, len(cells))
    with torch.no_grad():
        for layer, cell in enumerate(cells):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(rnn, f"{name}_l{layer}").copy_(getattr(cell, name))
    return rnn


class DeployedRecurrentActor(nn.Module):
    """The recurrent actor for TorchScript, as rsl_rl exports its own: one env (`obs [1, D] -> actions [1, A]`),
    its state kept in buffers from call to call, `reset()` zeroes it. `of(...)` gives the LSTM's or the GRU's
    (TorchScript compiles one `forward` per class)."""

    is_recurrent = True
    if TYPE_CHECKING:
        mean: Tensor
        scale: Tensor
        hidden_state: Tensor
        cell_state: Tensor

    @staticmethod
    def of(norm: nn.Module, cells: nn.ModuleList, layers: nn.Sequential, obs_dim: int) -> DeployedRecurrentActor:
        lstm = isinstance(cells[0], nn.LSTMCell)
        return (DeployedLSTMActor if lstm else DeployedGRUActor)(norm, cells, layers, obs_dim)

    def __init__(self, norm: nn.Module, cells: nn.ModuleList, layers: nn.Sequential, obs_dim: int) -> None:
        super().__init__()
        normalizer_buffers(self, norm, obs_dim)
        self.rnn = torch_rnn(cells)
        self.mlp = nn.Sequential(*copy.deepcopy(list(layers)))
        size = (self.rnn.num_layers, 1, self.rnn.hidden_size)
        self.register_buffer("hidden_state", torch.zeros(size))
        self.register_buffer("cell_state", torch.zeros(size if isinstance(self.rnn, nn.LSTM) else (0,)))

    @torch.jit.export
    def reset(self) -> None:
        self.hidden_state[:] = 0.0
        self.cell_state[:] = 0.0


class DeployedLSTMActor(DeployedRecurrentActor):
    def forward(self, x: Tensor) -> Tensor:
        x, (h, c) = self.rnn(((x - self.mean) / self.scale).unsqueeze(0), (self.hidden_state, self.cell_state))
        self.hidden_state[:] = h
        self.cell_state[:] = c
        return self.mlp(x.squeeze(0))


class DeployedGRUActor(DeployedRecurrentActor):
    def forward(self, x: Tensor) -> Tensor:
        x, h = self.rnn(((x - self.mean) / self.scale).unsqueeze(0), self.hidden_state)
        self.hidden_state[:] = h
        return self.mlp(x.squeeze(0))


class OnnxRecurrentActor(nn.Module):
    """The recurrent actor for ONNX, as rsl_rl exports its own: inputs `obs`, `h_in` (and `c_in` for an
    LSTM, `[layers, batch, hidden]`), outputs `actions` (a categorical policy's: the arg-max, then its `logits`),
    `h_out` (and `c_out`); the caller carries the state."""

    is_recurrent = True
    if TYPE_CHECKING:
        mean: Tensor
        scale: Tensor

    def __init__(self, norm: nn.Module, cells: nn.ModuleList, layers: nn.Sequential, obs_dim: int,
                 discrete: bool = False) -> None:
        super().__init__()
        normalizer_buffers(self, norm, obs_dim)
        self.rnn = torch_rnn(cells)
        self.mlp = nn.Sequential(*copy.deepcopy(list(layers)))
        self.lstm = isinstance(self.rnn, nn.LSTM)
        self.discrete = discrete
        self.input_size = obs_dim
        names = ["h", "c"] if self.lstm else ["h"]
        self.state_names = [(f"{s}_in", f"{s}_out") for s in names]
        self.input_names = ["obs", *(i for i, _ in self.state_names)]
        self.output_names = ["actions", *(["logits"] if discrete else []), *(o for _, o in self.state_names)]

    def forward(self, actor_obs: Tensor, h_in: Tensor, c_in: Tensor | None = None) -> tuple[Tensor, ...]:
        x = ((actor_obs - self.mean) / self.scale).unsqueeze(0)
        if self.lstm:
            x, (h, c) = self.rnn(x, (h_in, c_in))
            state: tuple[Tensor, ...] = (h, c)
        else:
            x, h = self.rnn(x, h_in)
            state = (h,)
        out = self.mlp(x.squeeze(0))
        return (out.argmax(-1), out, *state) if self.discrete else (out, *state)

    def get_dummy_inputs(self, rows: int = 1) -> tuple[Tensor, ...]:
        state = torch.zeros(self.rnn.num_layers, rows, self.rnn.hidden_size)
        return (torch.zeros(rows, self.input_size), *([state, state.clone()] if self.lstm else [state]))

    def graph(self, rows: int) -> Graph:
        """syncfree's actor graph of this module (inputs by the forward's names), with example inputs of `rows`
        rows; the state's batch axis is its second."""
        names = [ACTOR_OBS, *(i for i, _ in self.state_names)]
        return Graph("actor", self.eval(), dict(zip(names, self.get_dummy_inputs(rows), strict=True)),
                     self.output_names, self.state_names, {name: {1: "batch"} for pair in self.state_names
                                                           for name in pair})


class TokenSetEncoder(Protocol):
    """The recurrent token policy's encoder, as its actor's graph calls it."""

    def encode(self, tokens: Tensor, embedding_tables: bool = False) -> Tensor: ...


class TokenRecurrentActor(nn.Module):
    """The recurrent token policy's actor for ONNX: `actor_obs` (the tokens the policy reads, `[batch, tokens, 3]`
    uint8), the cell's state (`h_in`, and `c_in` for an LSTM, `[batch, hidden]`) and, where the policy reads it,
    the previous action one-hot (`last_action_in` `[batch, actions]`; a zero row: none, as at an episode's start)
    -> the arg-max action, the `logits` and the next state (`h_out`, `c_out`, `last_action_out`); the caller
    carries the state."""

    def __init__(self, encoder: TokenSetEncoder, core: nn.LSTMCell | nn.GRUCell, last_action: nn.Embedding | None,
                 actor: nn.Linear) -> None:
        super().__init__()
        self.encoder = encoder
        """The token encoder as the policy hands it over (a copy, on the conventional arithmetic)."""
        self.core, self.actor = copy.deepcopy(core), copy.deepcopy(actor)
        self.last_action = copy.deepcopy(last_action)
        self.lstm = isinstance(core, nn.LSTMCell)
        names = [*(["h", "c"] if self.lstm else ["h"]), *(["last_action"] if last_action is not None else [])]
        self.state_names = [(f"{s}_in", f"{s}_out") for s in names]
        self.output_names = ["actions", "logits", *(o for _, o in self.state_names)]

    def forward(self, actor_obs: Tensor, h_in: Tensor, c_in: Tensor | None = None,
                last_action_in: Tensor | None = None) -> tuple[Tensor, ...]:
        x = self.encoder.encode(actor_obs)
        if self.last_action is not None and last_action_in is not None:
            x = x + last_action_in @ self.last_action.weight  # the embedding of a one-hot row; 0 for none
        state = tuple(self.core(x, (h_in, c_in))) if self.lstm else (self.core(x, h_in),)
        logits = self.actor(state[0])
        actions = logits.argmax(-1)
        if self.last_action is not None:
            state = (*state, F.one_hot(actions, logits.shape[-1]).to(logits.dtype))
        return (actions, logits, *state)

    def graph(self, rows: int, tokens: int | None) -> Graph:
        """syncfree's actor graph of this module, with example inputs of `rows` rows: `tokens` tokens each (None:
        any count, the token axis dynamic)."""
        hidden = self.core.hidden_size
        inputs = {ACTOR_OBS: torch.full((rows, tokens or 8, 3), 0xFF, dtype=torch.uint8),
                  **{i: torch.zeros(rows, hidden) for i, _ in self.state_names}}
        if self.last_action is not None:
            inputs["last_action_in"] = torch.zeros(rows, self.actor.out_features)
        return Graph("actor", self.eval(), inputs, self.output_names, self.state_names,
                     {} if tokens else {ACTOR_OBS: {0: "batch", 1: "tokens"}})


class TokenActor(Protocol):
    """What the token actor-critic's graphs call."""

    def encode(self, actor_obs: Tensor) -> Tensor: ...
    def decode(self, tokens: Tensor, actor_obs: Tensor) -> Tensor: ...
    def act_deterministic(self, actor_obs: Tensor) -> Tensor: ...


class TokenEncoderGraph(nn.Module):
    """The token actor-critic's encoders: `actor_obs -> tokens`."""

    def __init__(self, policy: TokenActor) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, actor_obs: Tensor) -> Tensor:
        return self.policy.encode(actor_obs)


class TokenDecoderGraph(nn.Module):
    """The token actor-critic's decoder: `tokens, actor_obs -> actions` (the mean)."""

    def __init__(self, policy: TokenActor) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, tokens: Tensor, actor_obs: Tensor) -> Tensor:
        return self.policy.decode(tokens, actor_obs)


class TokenActorGraph(nn.Module):
    """The token actor-critic's encoders and decoder combined: `actor_obs -> actions` (the mean)."""

    def __init__(self, policy: TokenActor) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, actor_obs: Tensor) -> Tensor:
        return self.policy.act_deterministic(actor_obs)
