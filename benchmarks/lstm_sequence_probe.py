"""Would a whole-sequence LSTM function speed up the recurrent replay? It is compared with the per-step
`nn.LSTMCell` replay that `syncfree.policy.recurrent_mlp` runs.

    OMP_NUM_THREADS=1 python benchmarks/lstm_sequence_probe.py [--steps 32] [--rows 16] [--hidden 256]

The function (`LSTMSequence`) is a custom autograd function over one minibatch's BPTT rows. It zeroes the state
where an episode starts (a `keep` mask, as the replay does). Its forward makes one input projection for every
step and only the recurrent product per step. Its backward makes one product per step, for the state's gradient;
the weight and input gradients are single products over all steps at the end.

The script checks that its outputs and gradients agree with the `LSTMCell` loop, within 1e-5 relative to each
tensor's largest magnitude. It prints seconds per forward and backward, eager and under `torch.compile`, for
both.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

Replay = Callable[[nn.LSTMCell, Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]


class LSTMSequence(torch.autograd.Function):
    """An LSTM layer over `x` [T, B, in] from `(h0, c0)`, the state multiplied by `keep` [T, B, 1] before each step;
    returns every step's hidden state [T, B, H] and the last `(h, c)`."""

    @staticmethod
    def forward(ctx, x, keep, h0, c0, w_ih, w_hh, bias):  # type: ignore[override]
        steps, rows, _ = x.shape
        hidden = h0.shape[1]
        projected = torch.addmm(bias, x.reshape(steps * rows, -1), w_ih.t()).view(steps, rows, 4 * hidden)
        hs, h_prev, c_prev, cs = (x.new_empty(steps, rows, hidden) for _ in range(4))
        gates = x.new_empty(steps, rows, 4 * hidden)
        h, c = h0, c0
        for t in range(steps):
            h, c = h * keep[t], c * keep[t]
            h_prev[t], c_prev[t] = h, c
            i, f, g, o = torch.addmm(projected[t], h, w_hh.t()).chunk(4, 1)
            i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
            c = f * c + i * g
            h = o * c.tanh()
            gates[t], cs[t], hs[t] = torch.cat((i, f, g, o), 1), c, h
        ctx.save_for_backward(x, keep, h_prev, c_prev, gates, cs, w_ih, w_hh)
        return hs, h, c

    @staticmethod
    def backward(ctx, d_hs, d_h, d_c):  # type: ignore[override]
        x, keep, h_prev, c_prev, gates, cs, w_ih, w_hh = ctx.saved_tensors
        steps, rows, hidden = h_prev.shape
        d_gates = x.new_empty(steps, rows, 4 * hidden)
        dh = torch.zeros_like(h_prev[0]) if d_h is None else d_h.clone()
        dc = torch.zeros_like(h_prev[0]) if d_c is None else d_c.clone()
        for t in range(steps - 1, -1, -1):
            dh = dh + d_hs[t]
            i, f, g, o = gates[t].chunk(4, 1)
            tanh_c = cs[t].tanh()
            dc = dc + dh * o * (1 - tanh_c * tanh_c)
            d = torch.cat((dc * g * i * (1 - i), dc * c_prev[t] * f * (1 - f), dc * i * (1 - g * g),
                           dh * tanh_c * o * (1 - o)), 1)
            d_gates[t] = d
            dh, dc = (d @ w_hh) * keep[t], dc * f * keep[t]
        flat = d_gates.reshape(steps * rows, 4 * hidden)
        return ((flat @ w_ih).view_as(x), None, dh, dc, flat.t() @ x.reshape(steps * rows, -1),
                flat.t() @ h_prev.reshape(steps * rows, hidden), flat.sum(0))


def cell_replay(cell: nn.LSTMCell, x: Tensor, keep: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The replay as syncfree runs it: one `LSTMCell` call per step."""
    hs = []
    for t in range(x.shape[0]):
        h, c = cell(x[t], (h * keep[t], c * keep[t]))
        hs.append(h)
    return torch.stack(hs), h, c


def sequence_replay(cell: nn.LSTMCell, x: Tensor, keep: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return LSTMSequence.apply(x, keep, h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih + cell.bias_hh)


def seconds(replay: Replay, cell: nn.LSTMCell, inputs: tuple[Tensor, ...], repeats: int) -> float:
    """Seconds per forward and backward, after 3 untimed ones."""
    for i in range(3 + repeats):
        if i == 3:
            start = time.perf_counter()
        hs, _, _ = replay(cell, *inputs)
        hs.sum().backward()
    return (time.perf_counter() - start) / repeats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--inputs", type=int, default=5, help="observation width (cartpole-continuous: 5)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cell = nn.LSTMCell(args.inputs, args.hidden)
    x = torch.randn(args.steps, args.rows, args.inputs, requires_grad=True)
    keep = (torch.rand(args.steps, args.rows, 1) > 0.05).float()  # about one episode start in 20 steps
    h0, c0 = torch.randn(args.rows, args.hidden), torch.randn(args.rows, args.hidden)
    outputs = {}
    for name, replay in (("cell", cell_replay), ("sequence", sequence_replay)):
        cell.zero_grad()
        x.grad = None
        hs, h, c = replay(cell, x, keep, h0, c0)
        (hs.square().sum() + h.sum() + c.sum()).backward()
        outputs[name] = [hs.detach(), x.grad, *(p.grad for p in cell.parameters())]
    worst = max(float((a - b).abs().max() / a.abs().max()) for a, b in zip(*outputs.values(), strict=True))
    print(f"largest difference, relative to each tensor's largest magnitude: {worst:.1e}")
    if worst > 1e-5:
        raise SystemExit("the sequence function does not agree with the per-step replay")
    inputs = (x, keep, h0, c0)
    for label, wrap in (("eager", lambda f: f), ("compiled", torch.compile)):
        cell_s, sequence_s = (seconds(wrap(r), cell, inputs, args.repeats) for r in (cell_replay, sequence_replay))
        print(f"{label}: LSTMCell per step {cell_s:.4f} s, whole sequence {sequence_s:.4f} s per forward and backward")


if __name__ == "__main__":
    main()
