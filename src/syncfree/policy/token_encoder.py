"""Universal-token actor-critic: per-modality encoders, finite scalar quantization, a shared action decoder.

Each environment names the encoder that reads its command (`tokenizer/encoder_index`). Every encoder runs on
the whole batch and the tokens are selected per sample with `torch.where`, so the forward pass has no
data-dependent shapes and no host reads. The decoder maps the tokens and the proprioception to the mean of a
diagonal Gaussian whose parameters are stored as `cat(mean, std)`, like `GaussianHead`, so PPO's KL, log-prob
and entropy code is shared with `ActorCritic`.

The actor observation is one flat tensor, the concatenation of the parts named in `layout` (name -> width, in
order). `concat_observations` builds it from an observation dict.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import Tensor, nn

from syncfree.envs.api import ActionSpec
from syncfree.policy.actor_critic import PolicyBase, chunked_value, mlp
from syncfree.policy.deploy import (
    ACTOR_OBS,
    Deployment,
    Graph,
    TokenActorGraph,
    TokenDecoderGraph,
    TokenEncoderGraph,
    flat_observation,
)
from syncfree.policy.heads import GaussianHead
from syncfree.policy.normalizer import RunningNorm
from syncfree.policy.settings import TokenEncoderConfig

POLICY_PART = "policy"
"""Layout part read by the decoder (proprioception with history and command)."""
ENCODER_INDEX_PART = "tokenizer/encoder_index"
"""Layout part holding each env's encoder number as a float ([N, 1], values 0, 1, ...)."""


def round_ste(x: Tensor) -> Tensor:
    """Round to the nearest integer with a straight-through (identity) gradient."""
    return x + (x.round() - x).detach()


class FSQ(nn.Module):
    """Finite scalar quantization (Mentzer et al. 2023, "Finite Scalar Quantization: VQ-VAE Made Simple").

    Dimension i of the last axis is bounded with tanh to `levels[i]` integer values (shifted by half a step when
    the count is even), rounded with a straight-through gradient and divided by `levels[i] // 2`: codes lie on
    the grid `(k - levels[i] // 2) / (levels[i] // 2)`, k = 0 .. levels[i] - 1, within [-1, 1].
    """

    _half_l: Tensor
    _offset: Tensor
    _shift: Tensor
    _half_width: Tensor
    _levels: Tensor
    _basis: Tensor

    def __init__(self, levels: list[int], eps: float = 1e-3) -> None:
        super().__init__()
        if not levels or any(int(n) < 2 for n in levels):
            raise ValueError(f"FSQ: every level count must be an integer >= 2, got {levels}")
        self.levels = [int(n) for n in levels]
        self.dim = len(self.levels)
        self.codebook_size = math.prod(self.levels)
        lv = torch.tensor(self.levels, dtype=torch.float64)
        half_l = (lv - 1) * (1 + eps) / 2
        offset = torch.where(lv.remainder(2) == 0, 0.5, 0.0)
        basis = torch.cumprod(torch.tensor([1, *self.levels[:-1]], dtype=torch.int64), 0)
        self.register_buffer("_half_l", half_l.float(), persistent=False)
        self.register_buffer("_offset", offset.float(), persistent=False)
        self.register_buffer("_shift", (offset / half_l).atanh().float(), persistent=False)
        self.register_buffer("_half_width", (lv // 2).float(), persistent=False)
        self.register_buffer("_levels", torch.tensor(self.levels, dtype=torch.int64), persistent=False)
        self.register_buffer("_basis", basis, persistent=False)

    def bound(self, z: Tensor) -> Tensor:
        """Squash each dimension into (-levels // 2 - eps, levels // 2 + eps), even counts shifted by -1/2."""
        return torch.tanh(z + self._shift) * self._half_l - self._offset

    def forward(self, z: Tensor) -> Tensor:
        """Quantized codes of `z` [..., dim], with straight-through gradients."""
        return round_ste(self.bound(z)) / self._half_width

    def codes_to_indices(self, codes: Tensor) -> Tensor:
        """Codebook index (int64, in [0, codebook_size)) of each code vector [..., dim] -> [...]."""
        digits = (codes * self._half_width + self._half_width).round().long()
        return (digits * self._basis).sum(-1)

    def indices_to_codes(self, indices: Tensor) -> Tensor:
        """Inverse of `codes_to_indices`: [...] int -> [..., dim] float codes."""
        digits = torch.div(indices.long().unsqueeze(-1), self._basis, rounding_mode="floor").remainder(self._levels)
        return (digits.float() - self._half_width) / self._half_width


class ClampedGaussianHead(GaussianHead):
    """`GaussianHead` whose learned log standard deviation is clamped to [log min_std, log max_std]."""

    def __init__(self, size: int, init_std: float, min_std: float, max_std: float, validate: bool = False) -> None:
        if not 0 < min_std <= init_std <= max_std:
            raise ValueError(f"need 0 < min_std <= init_std <= max_std, got {min_std}, {init_std}, {max_std}")
        super().__init__(size, init_std, validate)
        self.log_min_std, self.log_max_std = math.log(min_std), math.log(max_std)

    def std(self) -> Tensor:
        return self.log_std.clamp(self.log_min_std, self.log_max_std).exp()


def default_layout(shapes: dict[str, tuple[int, ...]], cfg: TokenEncoderConfig | None = None) -> dict[str, int]:
    """Layout `policy`, `tokenizer/encoder_index`, then every encoder input once, in config order, with widths
    from observation shapes (e.g. `env.obs_shapes`, where the tokenizer group is not concatenated)."""
    cfg = cfg or TokenEncoderConfig()
    names = [POLICY_PART, ENCODER_INDEX_PART]
    for parts in cfg.encoders.values():
        names += [p for p in parts if p not in names]
    missing = [n for n in names if n not in shapes]
    if missing:
        raise ValueError(f"token policy: observations lack {missing}; have {sorted(shapes)}")
    return {name: int(math.prod(shapes[name])) for name in names}


def concat_observations(obs: dict[str, Tensor], layout: dict[str, int], out: Tensor | None = None) -> Tensor:
    """The flat actor observation: `obs` entries concatenated in layout order (into `out` when given, so a
    rollout step allocates nothing)."""
    parts = [obs[name] for name in layout]
    if out is None:
        return torch.cat(parts, dim=-1)
    return torch.cat(parts, dim=-1, out=out)


class TokenActorCritic(PolicyBase):
    """Drop-in replacement for `ActorCritic` (same methods and return types) with a universal-token actor.

    Args:
        layout: name -> width of the parts of the flat actor observation, in order. Needs `policy`,
            `tokenizer/encoder_index` and every encoder input.
        critic_obs_dim: width of the critic observation.
        action_spec: continuous actions only.
        cfg: sizes and options (`TokenEncoderConfig()` when None).
        validate_distributions: sample and evaluate through `torch.distributions` with argument checks.
        cache_encoded_outputs: diagnostics; every `encode` stores host copies (`.detach().cpu()`) of the tokens
            and of the pre-quantization latents (both [N, num_tokens, token_dim]) in `self.encoded_outputs`
            under "tokens" and "latents". One device-to-host copy each per call, i.e. a host sync per call
            on an accelerator. Outputs are unchanged.
        cache_full_latent: diagnostics; every `decode` keeps a device copy (`.detach().clone()`) of the decoder
            input (flattened tokens and normalized `policy` part) in `self.full_latent`. One extra allocation
            and copy per call, no sync. Outputs are unchanged.
    """

    assembles_actor_obs = True

    def __init__(self, layout: dict[str, int], critic_obs_dim: int, action_spec: ActionSpec,
                 cfg: TokenEncoderConfig | None = None, validate_distributions: bool = False,
                 cache_encoded_outputs: bool = False, cache_full_latent: bool = False,
                 critic_chunk_size: int = 0) -> None:
        super().__init__()
        self.critic_chunk_size = critic_chunk_size
        cfg = cfg or TokenEncoderConfig()
        if action_spec.kind != "continuous":
            raise ValueError(f"token policy: needs continuous actions, got {action_spec.kind}")
        self._check_config(layout, cfg)
        self.cfg = cfg
        self.action_spec = action_spec
        self.layout = dict(layout)
        self.actor_obs_dim = sum(layout.values())
        self.critic_obs_dim = critic_obs_dim
        starts, offset = {}, 0
        for name, width in layout.items():
            starts[name] = offset
            offset += width
        self._slices = {name: (starts[name], width) for name, width in layout.items()}
        self.encoder_names = list(cfg.encoders)
        self._encoder_inputs = [self._input_plan(parts) for parts in cfg.encoders.values()]
        self.fsq = FSQ(cfg.fsq_levels)
        self.num_tokens, self.token_dim = cfg.num_tokens, self.fsq.dim
        token_width = self.num_tokens * self.token_dim

        norm = (lambda d: RunningNorm(d)) if cfg.normalize_obs else (lambda d: nn.Identity())
        self.encoders = nn.ModuleList(
            mlp(sum(layout[p] for p in parts), cfg.encoder_hidden, token_width, cfg.activation)
            for parts in cfg.encoders.values())
        self.encoder_norms = nn.ModuleList(norm(sum(layout[p] for p in parts)) for parts in cfg.encoders.values())
        self.policy_norm = norm(layout[POLICY_PART])
        self.decoder = mlp(token_width + layout[POLICY_PART], cfg.decoder_hidden, action_spec.size, cfg.activation)
        self.head = ClampedGaussianHead(action_spec.size, cfg.init_std, cfg.min_std, cfg.max_std,
                                        validate_distributions)
        self.critic = mlp(critic_obs_dim, cfg.critic_hidden, 1, cfg.activation)
        self.critic_norm = norm(critic_obs_dim)
        self._recon_encoder = self.encoder_names.index(cfg.reconstruction_target)
        target_dim = sum(layout[p] for p in cfg.encoders[cfg.reconstruction_target])
        self.reconstructor = mlp(token_width, cfg.reconstruction_hidden, target_dim, cfg.activation)
        self.normalize_obs = cfg.normalize_obs

        self.cache_encoded_outputs = cache_encoded_outputs
        self.cache_full_latent = cache_full_latent
        self.encoded_outputs: dict[str, Tensor] = {}
        """Host copies of the last `encode` call's "tokens" and "latents" (when `cache_encoded_outputs`)."""
        self.full_latent: Tensor | None = None
        """Device copy of the last `decode` call's decoder input (when `cache_full_latent`)."""

    @staticmethod
    def _check_config(layout: dict[str, int], cfg: TokenEncoderConfig) -> None:
        bad = {k: v for k, v in layout.items() if not isinstance(v, int) or v < 1}
        if bad:
            raise ValueError(f"token policy: layout widths must be integers >= 1, got {bad}")
        missing = [n for n in (POLICY_PART, ENCODER_INDEX_PART) if n not in layout]
        if missing:
            raise ValueError(f"token policy: layout lacks {missing}; has {list(layout)}")
        if layout[ENCODER_INDEX_PART] != 1:
            raise ValueError(f"token policy: {ENCODER_INDEX_PART} must have width 1, got {layout[ENCODER_INDEX_PART]}")
        if not cfg.encoders:
            raise ValueError("token policy: at least one encoder is needed")
        for name, parts in cfg.encoders.items():
            unknown = [p for p in parts if p not in layout]
            if not parts or unknown:
                raise ValueError(f"token policy: encoder {name!r} reads {parts}; not in the layout: {unknown}")
            if ENCODER_INDEX_PART in parts or POLICY_PART in parts:
                raise ValueError(f"token policy: encoder {name!r} may not read {POLICY_PART!r} or "
                                 f"{ENCODER_INDEX_PART!r}")
        if cfg.reconstruction_target not in cfg.encoders:
            raise ValueError(f"token policy: reconstruction_target {cfg.reconstruction_target!r} is not an "
                             f"encoder; have {list(cfg.encoders)}")
        if cfg.num_tokens < 1:
            raise ValueError(f"token policy: num_tokens must be >= 1, got {cfg.num_tokens}")

    def _input_plan(self, parts: list[str]) -> list[tuple[int, int]]:
        """(start, width) runs of the flat observation an encoder reads; adjacent parts merge into one run, so
        an encoder whose parts are contiguous in the layout reads a view."""
        runs: list[tuple[int, int]] = []
        for part in parts:
            start, width = self._slices[part]
            if runs and runs[-1][0] + runs[-1][1] == start:
                runs[-1] = (runs[-1][0], runs[-1][1] + width)
            else:
                runs.append((start, width))
        return runs

    # ----------------------------------------------------------------------------------------- observation parts
    def part(self, actor_obs: Tensor, name: str) -> Tensor:
        """View of one layout part of the flat actor observation."""
        start, width = self._slices[name]
        return actor_obs.narrow(-1, start, width)

    def _check_obs(self, actor_obs: Tensor) -> None:
        if actor_obs.dim() != 2 or actor_obs.shape[-1] != self.actor_obs_dim:
            raise ValueError(f"token policy: expected actor observations [N, {self.actor_obs_dim}] "
                             f"(layout {self.layout}), got {tuple(actor_obs.shape)}")

    def encoder_input(self, actor_obs: Tensor, k: int) -> Tensor:
        """Raw input of encoder k: a view when its parts are contiguous in the layout, else a concatenation."""
        runs = self._encoder_inputs[k]
        if len(runs) == 1:
            return actor_obs.narrow(-1, *runs[0])
        return torch.cat([actor_obs.narrow(-1, s, w) for s, w in runs], dim=-1)

    # ------------------------------------------------------------------------------------------------- encoding
    def _encoder_latents(self, actor_obs: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """Every encoder on the whole batch: (normalized inputs, pre-quantization latents [N, K, D])."""
        inputs = [norm(self.encoder_input(actor_obs, k)) for k, norm in enumerate(self.encoder_norms)]
        latents = [enc(x).view(-1, self.num_tokens, self.token_dim) for enc, x in zip(self.encoders, inputs, strict=True)]
        return inputs, latents

    def route(self, per_encoder: list[Tensor], actor_obs: Tensor) -> Tensor:
        """Per sample, the entry of `per_encoder` ([N, ...] each) named by its encoder index (`torch.where`, no
        masked subsets); indices without an encoder get encoder 0's."""
        index = self.part(actor_obs, ENCODER_INDEX_PART)
        out = per_encoder[0]
        if len(per_encoder) == 1:
            return out
        index = index.view(-1, *([1] * (out.dim() - 1)))
        for k in range(1, len(per_encoder)):
            out = torch.where(index == k, per_encoder[k], out)
        return out

    def encode(self, actor_obs: Tensor) -> Tensor:
        """Quantized tokens [N, num_tokens, token_dim] of each sample's own encoder."""
        self._check_obs(actor_obs)
        _, latents = self._encoder_latents(actor_obs)
        latent = self.route(latents, actor_obs)
        tokens = self.fsq(latent)
        if self.cache_encoded_outputs:
            self.encoded_outputs = {"tokens": tokens.detach().cpu(), "latents": latent.detach().cpu()}
        return tokens

    def decode(self, tokens: Tensor, actor_obs: Tensor) -> Tensor:
        """Action mean from tokens [N, num_tokens, token_dim] and the `policy` part of `actor_obs`."""
        full_latent = torch.cat((tokens.flatten(1), self.policy_norm(self.part(actor_obs, POLICY_PART))), dim=-1)
        if self.cache_full_latent:
            self.full_latent = full_latent.detach().clone()
        return self.decoder(full_latent)

    # ------------------------------------------------------------------------------------- ActorCritic interface
    def dist_params(self, actor_obs: Tensor) -> Tensor:
        return self.head.params(self.decode(self.encode(actor_obs), actor_obs))

    def value(self, critic_obs: Tensor) -> Tensor:
        return chunked_value(self.critic, self.critic_norm, critic_obs, self.critic_chunk_size)

    def actor_input(self, obs: dict[str, Tensor], out: Tensor | None = None) -> Tensor:
        """The flat actor observation assembled from the env's groups (into `out` when given)."""
        return concat_observations(obs, self.layout, out)

    def act_deterministic(self, actor_obs: Tensor) -> Tensor:
        """The decoder mean."""
        return self.decode(self.encode(actor_obs), actor_obs)

    @torch.no_grad()
    def update_normalizers(self, actor_obs: Tensor, critic_obs: Tensor) -> None:
        if self.normalize_obs:  # the norms are then `RunningNorm`s (`nn.Identity` otherwise)
            cast(RunningNorm, self.policy_norm).update(self.part(actor_obs, POLICY_PART))
            for k, norm in enumerate(self.encoder_norms):
                cast(RunningNorm, norm).update(self.encoder_input(actor_obs, k))
            cast(RunningNorm, self.critic_norm).update(critic_obs)

    # -------------------------------------------------------------------------------------------------- deployment
    def deployment(self, rows: int) -> Deployment:
        """What `syncfree export` writes: the encoders (`actor_obs -> tokens`), the decoder (`tokens, actor_obs ->
        actions`) and both combined, on the live modules, with example inputs of `rows` rows (encoder index 0).
        The diagnostic caches are turned off: they are host copies, not graph operations."""
        self.cache_encoded_outputs = self.cache_full_latent = False
        obs = torch.zeros(rows, self.actor_obs_dim)
        with torch.no_grad():
            tokens = self.encode(obs)
        graphs = [Graph("encoder", TokenEncoderGraph(self).eval(), {ACTOR_OBS: obs}, ["tokens"]),
                  Graph("decoder", TokenDecoderGraph(self).eval(), {"tokens": tokens, ACTOR_OBS: obs}, ["actions"]),
                  Graph("actor", TokenActorGraph(self).eval(), {ACTOR_OBS: obs}, ["actions"],
                        note="encoder and decoder combined")]
        fsq = self.fsq
        tokens_section = {
            "num_tokens": self.num_tokens, "token_dim": self.token_dim, "fsq_levels": fsq.levels,
            "codebook_size": fsq.codebook_size, "encoders": self.encoder_names,
            "note": "encoder k serves rows whose tokenizer/encoder_index is k (others: encoder 0); token values "
                    "are FSQ codes (k - levels // 2) / (levels // 2)",
        }
        return Deployment("token", graphs, self.action_spec, flat_observation(self.layout, self.normalize_obs),
                          {"tokens": tokens_section})

    # ------------------------------------------------------------------------------------------ auxiliary loss
    def auxiliary_loss(self, actor_obs: Tensor) -> Tensor:
        """`reconstruction_weight` x the mean squared error of reconstructing the normalized input of the
        `reconstruction_target` encoder from the tokens of EVERY encoder, on every sample (whatever its
        encoder index): each encoder gets gradients (through the straight-through quantizer) on the whole
        batch, and all encoders are pulled into one token space. A scalar with a graph."""
        self._check_obs(actor_obs)
        inputs, latents = self._encoder_latents(actor_obs)
        target = inputs[self._recon_encoder].detach()
        losses = [(self.reconstructor(self.fsq(z).flatten(1)) - target).square().mean() for z in latents]
        total = losses[0]
        for loss in losses[1:]:
            total = total + loss
        return total * (self.cfg.reconstruction_weight / len(losses))
