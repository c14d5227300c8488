"""Exact arithmetic cuts of the recurrent token encoder (`syncfree.policy.recurrent.TokenEncoder`), each behind a
`PerfConfig` switch whose off path is the conventional formulation.

- `embedding_tables` (`perf.token_embedding_tables`): the encoder's first layer is linear and reads the sum of a
  coordinate, a feature and a value embedding, so its pre-activation is the sum of three mapped embeddings. Each
  field is one byte: three `[256, hidden]` tables (the first layer applied to every row of each embedding, the
  value's 256 levels included, the bias riding in the value table) replace the per-token product. Per call the
  tables cost `3 x 256` rows of that product instead of one per token; the lookup-sum's backward adds each token's
  gradient into its three table rows (`index_add_`), which is cheaper than the embeddings' own backward. The same
  function of the parameters up to the order of floating-point sums. In float32 only: under bfloat16 autocast the
  encoder keeps the conventional first layer (the float32 tables feeding a bfloat16 last layer moved a minibatch's
  embedding gradients further from float32's than the conventional bfloat16 encoder does: cosine 0.91 against
  0.9997 on grid-arena's test minibatch).
- `linear_max_pool` (`perf.sparse_token_max`): the last layer and the max over tokens as one function. The
  forward takes the values with `amax` (a vectorized reduction; `max` with indices is not). Each output's
  gradient reaches one token, its maximum, as with `max`: the backward gathers those tokens' rows and scatters
  back into them, where autograd's backward of `max` fills a zero tensor over every token and multiplies it
  through the last layer twice (two products 64 times larger, at 64 tokens). The same values bit for bit, and
  the same gradients up to the order of sums.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def field_tables(coordinate: nn.Embedding, feature: nn.Embedding, value: nn.Linear, first: nn.Linear,
                 levels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The first layer's pre-activation part of every coordinate byte, feature byte and value level (`levels`:
    the values' 256 inputs, byte / 255, as `[256, 1]`): `[256, hidden]` each, the layer's bias in the last."""
    weight = first.weight.t()
    return coordinate.weight @ weight, feature.weight @ weight, F.linear(value(levels), first.weight, first.bias)


class _TableSum(torch.autograd.Function):
    """`tables[0][index[0]] + tables[1][index[1]] + tables[2][index[2]]`, with `index` `[3, rows]` int64; the
    backward adds the rows' gradient into each table (`index_add_`)."""

    @staticmethod
    def forward(ctx: Any, index: Tensor, *tables: Tensor) -> Tensor:
        out = tables[0].index_select(0, index[0])
        for k in range(1, len(tables)):
            out += tables[k].index_select(0, index[k])
        ctx.save_for_backward(index)
        ctx.table_shapes = [t.shape for t in tables]
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        (index,) = ctx.saved_tensors
        grads = [grad.new_zeros(shape).index_add_(0, index[k], grad) if ctx.needs_input_grad[k + 1] else None
                 for k, shape in enumerate(ctx.table_shapes)]
        return (None, *grads)


def table_sum(index: Tensor, tables: tuple[Tensor, ...]) -> Tensor:
    """Per row, the sum of each table's row named by `index` (`[len(tables), rows]` int64) -> `[rows, width]`."""
    return _TableSum.apply(index, *tables)


def _features_and_max(hidden: Tensor, weight: Tensor, bias: Tensor, padding: Tensor) -> tuple[Tensor, Tensor]:
    """`hidden @ weight.T + bias + padding` ([rows, tokens, out]) and its max over the tokens ([rows, out])."""
    rows, tokens, width = hidden.shape
    features = torch.addmm(bias, hidden.reshape(rows * tokens, width), weight.t()).view(rows, tokens, -1)
    return features, features.add_(padding).amax(1)


class _LinearMaxPool(torch.autograd.Function):
    """`max over tokens of (hidden @ weight.T + bias + padding)`: hidden `[rows, tokens, width]`, padding
    `[rows, tokens, 1]` (0 or -inf, no gradient) -> `[rows, out]`. Each output's gradient goes to its first
    maximal token only."""

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, bias: Tensor, padding: Tensor) -> Tensor:
        features, pooled = _features_and_max(hidden, weight, bias, padding)
        rows, tokens, _ = hidden.shape
        # the first token holding each output's maximum; a NaN output equals none, and takes token 0 (`max` takes
        # the first NaN, token 0 when the NaN comes from the weights). Positions as floats keep the reduction
        # vectorized, exact below 2**24 tokens
        positions = torch.arange(tokens, dtype=torch.float32, device=pooled.device).view(1, tokens, 1)
        first = torch.where(features == pooled.unsqueeze(1), positions, float(tokens)).amin(1)
        rows_start = torch.arange(0, rows * tokens, tokens, device=pooled.device).unsqueeze(1)
        winners = (first.long().remainder_(tokens) + rows_start).view(-1)
        ctx.save_for_backward(hidden, weight, winners)
        return pooled

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        hidden, weight, winners = ctx.saved_tensors
        rows, tokens, width = hidden.shape
        grad_hidden = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:  # a token's gradient sums over the outputs it won: in float32
            spread = (grad.float().unsqueeze(-1) * weight.float()).view(-1, width)
            grad_hidden = spread.new_zeros(rows * tokens, width).index_add_(0, winners, spread)
            grad_hidden = grad_hidden.view(hidden.shape).to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            chosen = hidden.reshape(rows * tokens, width).index_select(0, winners).view(rows, -1, width)
            grad_weight = torch.einsum("ro,row->ow", grad, chosen.to(grad.dtype)).to(weight.dtype)
        if ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0).to(weight.dtype)
        return grad_hidden, grad_weight, grad_bias, None


def linear_max_pool(hidden: Tensor, last: nn.Linear, padding: Tensor) -> Tensor:
    """`last` on every token of `hidden` ([rows, tokens, width]) plus `padding` ([rows, tokens, 1]), max over the
    tokens -> [rows, out]; see the module docstring. Where no gradient is taken (a rollout step) the winning tokens
    are not looked for."""
    if torch.is_grad_enabled() and (hidden.requires_grad or last.weight.requires_grad or last.bias.requires_grad):
        return _LinearMaxPool.apply(hidden, last.weight, last.bias, padding)
    return _features_and_max(hidden, last.weight, last.bias, padding)[1]
