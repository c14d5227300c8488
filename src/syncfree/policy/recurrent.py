"""Recurrent token policy for MettaGrid: token encoder -> LSTM core -> categorical actor and critic heads.

Observations are MettaGrid tokens `[..., tokens, 3]` uint8: (packed coordinate, feature id, value), all three
bytes 0xFF on an empty token. Each token is embedded (coordinate and feature id by lookup, value by a linear map
of value / 255), passed through a small MLP and max-pooled over the valid tokens. Optionally the agent's previous
action is embedded and added (zero at an episode's first step). The recurrent core is an LSTM or a GRU cell; the
state of an agent is zeroed before a step whose `done` flag says its observation starts a new episode.

Two entry points share every module: `step` for rollouts (one time step of a batch of agents) and
`evaluate_sequence` for training (whole `[segments, T]` rows, replayed from their initial state with the same
resets), so replaying a stored row gives what the rollout computed. Both are pure tensor-in/tensor-out with no
host reads.
"""

from __future__ import annotations

import copy
from typing import NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syncfree.core.fields import Field
from syncfree.envs.api import ActionSpec
from syncfree.policy.deploy import ACTOR_OBS, Deployment, TokenRecurrentActor
from syncfree.policy.token_pool import field_tables, linear_max_pool, table_sum

EMPTY_TOKEN = 0xFF
"""Byte value of every field of an empty (padding) token."""


class LSTMState(NamedTuple):
    h: Tensor
    """[batch, hidden] hidden state."""
    c: Tensor
    """[batch, hidden] cell state."""


class GRUState(NamedTuple):
    h: Tensor
    """[batch, hidden] hidden state."""


CORES: dict[str, tuple[type[nn.LSTMCell | nn.GRUCell], type[LSTMState | GRUState]]] = {
    "lstm": (nn.LSTMCell, LSTMState), "gru": (nn.GRUCell, GRUState)}
"""Recurrent core name -> (cell module, state tuple)."""


class ActionOutput(NamedTuple):
    actions: Tensor
    log_prob: Tensor
    entropy: Tensor
    full_log_probs: Tensor | None
    """Log-probabilities of every action, or None when the `ActionProbs` does not emit them."""


class StepOutput(NamedTuple):
    actions: Tensor
    """[batch] int64 sampled actions ([batch, size] float32 for the recurrent MLP policy's continuous ones)."""
    log_prob: Tensor
    entropy: Tensor | None
    """None where the policy does not compute it (no rollout reads it)."""
    value: Tensor
    full_log_probs: Tensor | None


class SequenceEvaluation(NamedTuple):
    log_prob: Tensor
    """[segments, T] log-probability of the given actions."""
    entropy: Tensor
    value: Tensor
    full_log_probs: Tensor | None
    """[segments, T, actions] when the policy emits full log-probs, else None."""


class ActionProbs(nn.Module):
    """Categorical over logits: sampled (or given) actions, their log-prob, the entropy, and the full log-probs
    only when `emit_full_log_probs` (losses such as distillation or a KL to a teacher need them; PPO does not).

    The chosen action's log-prob and the entropy come from the logits, their log-normaliser and the probabilities
    (`log p(a) = logit(a) - logsumexp`, `H = logsumexp - sum(p * logits)`), the same arithmetic either way; the
    `[..., actions]` log-probability table (a `log_softmax`, its storage in the rollout buffer and its backward)
    exists only when emitted."""

    def __init__(self, emit_full_log_probs: bool = True) -> None:
        super().__init__()
        self.emit_full_log_probs = emit_full_log_probs

    def forward(self, logits: Tensor, actions: Tensor | None = None, greedy: bool = False) -> ActionOutput:
        """Sample one action per row of `logits` [..., actions] (the most likely one when `greedy`) unless
        `actions` [...] are given."""
        probs = logits.softmax(-1)
        if actions is None and greedy:
            actions = logits.argmax(-1)
        if actions is None:
            flat = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, replacement=True)
            actions = flat.view(probs.shape[:-1])
        log_norm = logits.logsumexp(-1)
        log_prob = logits.gather(-1, actions.unsqueeze(-1)).squeeze(-1) - log_norm
        entropy = log_norm - (probs * logits).sum(-1)
        return ActionOutput(actions, log_prob, entropy, logits.log_softmax(-1) if self.emit_full_log_probs else None)


class TokenEncoder(nn.Module):
    """Token set -> one vector: embed each token, a two-layer ReLU MLP, max over valid tokens (0 when none).

    `max_tokens` reads only the first tokens of each observation (MettaGrid packs the valid tokens first, so a
    bound above the most tokens an agent sees loses nothing and saves the work on the padding).

    With `autocast_dtype` set (`PerfConfig.autocast`, through `set_autocast`), a call on at least
    `autocast_min_work` (tokens x hidden width) runs the encoder (the value embedding and the token MLP) under
    `torch.autocast` in that dtype and returns float32, so the recurrent core and the heads stay in float32.
    `autocast=auto` leaves it in float32 (`autocast_auto`): bfloat16 has not been measured faster for it anywhere
    (on a CPU without bfloat16 instructions it ran 9.8x slower, `benchmarks/recurrent_encoder_modes.py`).

    `embedding_tables` folds the first layer into per-field tables (in float32; under autocast the first layer
    stays conventional) and `sparse_max` takes the max over tokens with a backward through the winning tokens only
    (`syncfree.policy.token_pool`); off, the conventional embeddings, layer and `max`. The parameters are the same
    either way."""

    autocast_dtype: torch.dtype | None = None
    autocast_min_work: int = 0
    autocast_auto = False
    _levels: Tensor

    def __init__(self, embed_dim: int, hidden: int, out_dim: int, max_tokens: int | None = None,
                 embedding_tables: bool = False, sparse_max: bool = False) -> None:
        super().__init__()
        self.max_tokens = max_tokens
        self.embedding_tables, self.sparse_max = embedding_tables, sparse_max
        self.coordinate = nn.Embedding(256, embed_dim)
        self.feature = nn.Embedding(256, embed_dim)
        self.value = nn.Linear(1, embed_dim)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim), nn.ReLU())
        self.register_buffer("_levels", torch.arange(256, dtype=torch.float32).unsqueeze(-1) / 255.0,
                             persistent=False)

    def forward(self, tokens: Tensor) -> Tensor:
        """[..., tokens, 3] uint8 -> [..., out_dim] float32."""
        if self.max_tokens is not None:
            tokens = tokens[..., : self.max_tokens, :]
        work = tokens.shape[:-1].numel() * cast(nn.Linear, self.mlp[0]).out_features
        if self.autocast_dtype is None or work < self.autocast_min_work:
            return self.encode(tokens, self.embedding_tables)
        with torch.autocast(tokens.device.type, dtype=self.autocast_dtype):
            return self.encode(tokens, embedding_tables=False).float()  # the tables: float32 only

    def encode(self, tokens: Tensor, embedding_tables: bool = False) -> Tensor:
        """The encoder on the tokens it reads (the first layer as folded tables with `embedding_tables`)."""
        rows = tokens.reshape(-1, *tokens.shape[-2:])
        hidden = self._hidden(rows, embedding_tables)
        # padding goes to -inf, so it never wins the max over a valid token and an observation without one ends as
        # relu(-inf) = 0; the add's backward passes the gradient through, where a masked copy would cost a pass each
        # way
        padding = torch.where(rows[..., :1] == EMPTY_TOKEN, float("-inf"), 0.0)
        last = cast(nn.Linear, self.mlp[2])
        if self.sparse_max:
            pooled = linear_max_pool(hidden.view(*rows.shape[:-1], -1), last, padding)
        else:
            # `max` sends each output's gradient to one token, `amax` shares it among equal maxima (a mask, a
            # count and a product over the whole tensor); they differ only where two tokens tie at a positive
            # value, and at or below 0 the ReLU passes no gradient
            pooled = last(hidden).add_(padding.flatten(0, -2)).view(*rows.shape[:-1], -1).max(-2).values
        # the last ReLU after the max over tokens (relu(max) = max(relu), ReLU being monotonic): it runs on
        # [..., out_dim] instead of [..., tokens, out_dim], forward and backward
        return torch.relu_(pooled).view(*tokens.shape[:-2], -1)

    def _hidden(self, rows: Tensor, embedding_tables: bool) -> Tensor:
        """The first layer and its ReLU on every token, [rows x tokens, hidden]: on the embeddings' sum, or as the
        sum of the folded tables' rows (`embedding_tables`). Each layer's output is a tensor of its own, so the
        ReLU runs in place (on a view, autograd would copy the whole base back in the backward)."""
        first = cast(nn.Linear, self.mlp[0])
        if embedding_tables:
            index = rows.reshape(-1, 3).t().long()
            tables = field_tables(self.coordinate, self.feature, self.value, first, self._levels)
            return torch.relu_(table_sum(index, tables))
        index = rows.long()
        x = self.coordinate(index[..., 0]) + self.feature(index[..., 1]) + self.value(rows[..., 2:].float() / 255.0)
        return torch.relu_(first(x.flatten(0, -2)))


class RecurrentTokenPolicy(nn.Module):
    """Token encoder, recurrent cell, linear actor (logits) and critic heads.

    Args:
        num_actions: size of the discrete action space.
        embed_dim, encoder_hidden: token embedding width and the encoder MLP's hidden width.
        hidden: core input and state width.
        max_tokens: tokens read per observation (None: all); see `TokenEncoder`.
        emit_full_log_probs: whether `step` and `evaluate_sequence` return the full log-probs.
        core: `lstm` or `gru`.
        last_action_input: add an embedding of the agent's previous action to the core's input (`step` and
            `evaluate_sequence` then need `last_actions`).
        embedding_tables, sparse_max: the encoder's exact arithmetic cuts (`syncfree.policy.token_pool`;
            `perf.token_embedding_tables`, `perf.sparse_token_max`).
    """

    def __init__(self, num_actions: int, embed_dim: int = 32, encoder_hidden: int = 64, hidden: int = 64,
                 max_tokens: int | None = None, emit_full_log_probs: bool = True, core: str = "lstm",
                 last_action_input: bool = False, embedding_tables: bool = False, sparse_max: bool = False) -> None:
        super().__init__()
        if core not in CORES:
            raise ValueError(f"core={core!r} is unknown; use one of {', '.join(CORES)}")
        self.num_actions, self.hidden = num_actions, hidden
        self.encoder = TokenEncoder(embed_dim, encoder_hidden, hidden, max_tokens, embedding_tables, sparse_max)
        cell, self._state_type = CORES[core]
        self.core = cell(hidden, hidden)
        self.last_action = nn.Embedding(num_actions, hidden) if last_action_input else None
        self.actor = nn.Linear(hidden, num_actions)
        self.critic = nn.Linear(hidden, 1)
        self.action_probs = ActionProbs(emit_full_log_probs)

    @property
    def emit_full_log_probs(self) -> bool:
        return self.action_probs.emit_full_log_probs

    @emit_full_log_probs.setter
    def emit_full_log_probs(self, value: bool) -> None:
        self.action_probs.emit_full_log_probs = value

    @property
    def state_size(self) -> int:
        """Tensors in the recurrent state (2 for an LSTM, 1 for a GRU), each [batch, hidden]."""
        return len(self._state_type._fields)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> tuple[Tensor, ...]:
        return self._state_type(*(torch.zeros(batch, self.hidden, device=device) for _ in range(self.state_size)))

    # -- what the recurrent algorithm asks of a policy (`syncfree.policy.recurrent_mlp` answers the same) --------

    def stored_tokens(self, obs_shapes: dict[str, tuple[int, ...]]) -> int:
        """Tokens stored per observation: those the policy reads (MettaGrid packs the valid ones first)."""
        tokens = obs_shapes["policy"][0]
        return min(tokens, self.encoder.max_tokens or tokens)

    def observation_fields(self, obs_shapes: dict[str, tuple[int, ...]]) -> dict[str, Field]:
        """The rollout buffer's observation field: the tokens the policy reads."""
        return {"obs": Field((self.stored_tokens(obs_shapes), obs_shapes["policy"][-1]), torch.uint8)}

    @staticmethod
    def action_field() -> Field:
        return Field((), torch.int64)

    @staticmethod
    def rollout_input(obs: dict[str, Tensor]) -> Tensor:
        return obs["policy"]

    def stored_observation(self, obs: dict[str, Tensor]) -> dict[str, Tensor]:
        return {"obs": obs["policy"][:, : self.encoder.max_tokens]}

    @staticmethod
    def sequence_input(data: dict[str, Tensor]) -> Tensor:
        return data["obs"]

    def update_normalizers(self, obs: dict[str, Tensor]) -> None:
        """Nothing to update: token values are scaled by a fixed 1/255."""

    def _advance(self, x: Tensor, state: tuple[Tensor, ...], done: Tensor) -> LSTMState | GRUState:
        """One core step from `state`, zeroed first on rows whose `done` is set."""
        keep = (~done).unsqueeze(-1).to(x.dtype)
        kept = tuple(s * keep for s in state)
        out = self.core(x, kept if len(kept) > 1 else kept[0])
        # a bare tensor comes from the GRU cell
        return self._state_type(*out) if isinstance(out, tuple) else cast("type[GRUState]", self._state_type)(out)

    def _input(self, encoded: Tensor, last_actions: Tensor | None, done: Tensor) -> Tensor:
        """The core's input: the encoded tokens, plus the previous action's embedding unless the step starts an
        episode."""
        if self.last_action is None:
            return encoded
        if last_actions is None:
            raise ValueError("this policy reads the previous action: pass last_actions")
        keep = (~done).unsqueeze(-1).to(encoded.dtype)
        return encoded + self.last_action(last_actions) * keep

    def step(self, obs_tokens: Tensor, state: tuple[Tensor, ...], done: Tensor, last_actions: Tensor | None = None,
             greedy: bool = False) -> tuple[StepOutput, tuple[Tensor, ...]]:
        """One rollout step: `obs_tokens` [B, tokens, 3] uint8, `state` from the previous step, `done` [B] bool
        (the observation starts a new episode), `last_actions` [B] int64 (with `last_action_input`) -> sampled
        actions (the most likely ones when `greedy`) with log-prob, entropy, value, and the state."""
        x = self._input(self.encoder(obs_tokens), last_actions, done)
        new_state = self._advance(x, state, done)
        out = self.action_probs(self.actor(new_state.h), greedy=greedy)
        value = self.critic(new_state.h).squeeze(-1)
        return StepOutput(out.actions, out.log_prob, out.entropy, value, out.full_log_probs), new_state

    def evaluate_sequence(self, obs: Tensor, actions: Tensor, initial_state: tuple[Tensor, ...], dones: Tensor,
                          last_actions: Tensor | None = None) -> SequenceEvaluation:
        """Replay rows: `obs` [S, T, tokens, 3], `actions` [S, T], the state each row started from ([S, hidden]
        per state tensor), `dones` and `last_actions` [S, T] (as given to `step`) -> log-probs of `actions`,
        entropies and values, [S, T] each."""
        segments, horizon = actions.shape
        x = self.encoder(obs.flatten(0, 1)).view(segments, horizon, -1)
        x = self._input(x, last_actions, dones)
        state, hs = self._state_type(*initial_state), []
        for t in range(horizon):
            state = self._advance(x[:, t], state, dones[:, t])
            hs.append(state.h)
        h = torch.stack(hs, 1)
        out = self.action_probs(self.actor(h), actions)
        return SequenceEvaluation(out.log_prob, out.entropy, self.critic(h).squeeze(-1), out.full_log_probs)

    # -- acting outside training (play) and deployment -----------------------------------------------------------

    @staticmethod
    def actor_input(obs: dict[str, Tensor]) -> Tensor:
        return obs["policy"]

    def initial_actor_state(self, batch: int, device: torch.device | str = "cpu") -> tuple[Tensor, ...]:
        """The core's state and, where the policy reads it, the previous action one-hot `[batch, actions]` (a zero
        row: none): zeros at an episode's start, as every policy's state."""
        state = tuple(self.initial_state(batch, device))
        if self.last_action is None:
            return state
        return (*state, torch.zeros(batch, self.num_actions, device=device))

    def act_carrying(self, actor_obs: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
        """The most likely action on `actor_obs` [B, tokens, 3] one step on from `state` (`initial_actor_state`'s
        layout) and the new state: how acting outside training asks every policy."""
        x = self.encoder(actor_obs)
        if self.last_action is not None:
            x = x + state[self.state_size] @ self.last_action.weight  # the embedding of a one-hot row; 0 for none
        core = self._advance(x, state[: self.state_size], torch.zeros(x.shape[0], dtype=torch.bool, device=x.device))
        actions = self.actor(core.h).argmax(-1)
        if self.last_action is None:
            return actions, tuple(core)
        return actions, (*core, F.one_hot(actions, self.num_actions).to(x.dtype))

    def deployment(self, rows: int) -> Deployment:
        """What `syncfree export` writes: the actor (`TokenRecurrentActor`) on a copy of the encoder computing
        conventionally (the tables and the sparse max are training's cuts of the same function), its state as
        inputs and outputs, with example inputs of `rows` rows."""
        encoder = copy.deepcopy(self.encoder)
        encoder.embedding_tables = encoder.sparse_max = False
        read = self.encoder.max_tokens
        tokens = (f"the observation's first {read} tokens (those the policy reads)" if read else
                  "the observation's tokens, any count")
        observation = {
            "input": ACTOR_OBS, "shape": ["batch", read or "tokens", 3], "dtype": "uint8",
            "tokens": f"{tokens}: MettaGrid tokens (packed coordinate, feature id, value), the valid ones first, all "
                      "three bytes 0xFF on an empty token",
            "normalization": "none (token values are scaled by 1/255 inside the graph)"}
        actor = TokenRecurrentActor(encoder, self.core, self.last_action, self.actor)
        return Deployment("recurrent-token", [actor.graph(rows, read)], ActionSpec("discrete", self.num_actions),
                          observation)
