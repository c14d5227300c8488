"""Twin critics as two networks (syncfree's `TwinCritics`) or as one batched network: the gradient of the critics'
loss timed both ways, in float32 and with bfloat16 hidden layers, eagerly and compiled.

    OMP_NUM_THREADS=1 python benchmarks/batched_twin_critics.py --out results.json

The loss is the off-policy learners' critic loss on one batch: each critic's squared error against a target,
averaged, from `--rows` rows of `--inputs` features (the critic observation and the action). Two networks: syncfree's
`MLP`s, one per critic, each its own matrix products. Batched: the first layers of both critics as one product (their
weights side by side: both read the same input), the hidden and output layers as batched products (`baddbmm`) of a
stacked pair; the same parameters, so the same loss. The gradient (`torch.func.grad`, parameters given detached, as
the whole compiled gradient steps take them) is checked equal between the two forms before anything is timed;
compiled: `torch.compile(fullgraph=True)` over that gradient. `--repeats` rounds of `--calls` calls each, the two
forms interleaved round by round; the figure is the two networks' median seconds per call over the batched one's
(above 1: batching is faster).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import torch
from autocast_threshold import interleaved_medians, prepare_timing, write_cells
from torch import Tensor

Params = dict[str, Tensor]


Layers = list[tuple[Tensor, Tensor]]
"""A critic's linear layers in order, each (weight [out, in], bias [out])."""


def linear_layers(q: torch.nn.Module) -> Layers:
    return [(m.weight, m.bias) for m in q.modules() if isinstance(m, torch.nn.Linear)]


def batched_params(first: Layers, second: Layers) -> Params:
    """Two critics' layers stacked for the batched form: the first layer's weights side by side ([in, 2 x width]),
    the others as pairs ([2, in, out]) with their biases as [2, 1, out]."""
    (w1, b1), (w2, b2) = first[0], second[0]
    params = {"w0": torch.cat([w1.T, w2.T], dim=1).detach().contiguous(), "b0": torch.cat([b1, b2]).detach()}
    for i, ((w1, b1), (w2, b2)) in enumerate(zip(first[1:], second[1:], strict=True), start=1):
        params[f"w{i}"] = torch.stack([w1.T, w2.T]).detach().contiguous()
        params[f"b{i}"] = torch.stack([b1, b2]).unsqueeze(1).detach()
    return params


def batched_q(params: Params, x: Tensor, precision: str) -> Tensor:
    """Both critics' outputs, [2, rows]: ReLU hidden layers (in bfloat16 under `bf16`), a float32 output layer."""
    layers = len(params) // 2
    rows = x.shape[0]
    with torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16"):
        h = torch.relu(torch.addmm(params["b0"], x, params["w0"]))
        h = h.view(rows, 2, -1).transpose(0, 1)
        for i in range(1, layers - 1):
            h = torch.relu(torch.baddbmm(params[f"b{i}"], h, params[f"w{i}"]))
    last = layers - 1
    return torch.baddbmm(params[f"b{last}"], h.float(), params[f"w{last}"]).squeeze(-1)


def critic_loss(q: Tensor, target: Tensor) -> Tensor:
    """The twin critics' loss from their outputs [2, rows]: the mean of each one's mean squared error."""
    return 0.5 * (q - target).square().mean(-1).sum()


def cell(rows: int, width: int, inputs: int, precision: str, compiled: bool, calls: int,
         repeats: int) -> dict[str, Any]:
    from syncfree.policy.actor_critic import mlp, set_autocast

    torch.manual_seed(0)
    x, target = torch.randn(rows, inputs), torch.randn(rows)
    q1, q2 = mlp(inputs, [width, width], 1, "relu"), mlp(inputs, [width, width], 1, "relu")
    set_autocast(q1, precision)
    set_autocast(q2, precision)
    pair = {**{f"q1.{n}": p.detach() for n, p in q1.named_parameters()},
            **{f"q2.{n}": p.detach() for n, p in q2.named_parameters()}}
    nets = torch.nn.ModuleDict({"q1": q1, "q2": q2})

    def two_networks(p: Params) -> Tensor:
        q = torch.stack([torch.func.functional_call(nets[k], {n[3:]: v for n, v in p.items() if n[:2] == k},
                                                    (x,)).squeeze(-1) for k in ("q1", "q2")])
        return critic_loss(q, target)

    def batched(p: Params) -> Tensor:
        return critic_loss(batched_q(p, x, precision), target)

    forms: dict[str, tuple[Callable[[Any], Any], Any]] = {}
    for name, loss, params in (("two", two_networks, pair), ("batched", batched, batched_params(linear_layers(q1), linear_layers(q2)))):
        grad = torch.func.grad(loss)
        forms[name] = (torch.compile(grad, fullgraph=True) if compiled else grad), params
    check_equal(forms, precision)
    medians = interleaved_medians(forms, calls, repeats)
    two, batched_s = medians["two"], medians["batched"]
    return {"rows": rows, "width": width, "precision": precision, "compiled": compiled, "two_networks_ms": two * 1e3,
            "batched_ms": batched_s * 1e3, "speedup": two / batched_s}


def check_equal(forms: dict[str, tuple[Callable[[Any], Any], Any]], precision: str) -> None:
    """The batched form's gradient is the two networks', every weight and bias (float32 within 1e-4; bfloat16 hidden
    layers, whose products round differently in the two forms, within 2 %)."""
    two = forms["two"][0](forms["two"][1])
    layers = sorted({int(name.split(".")[1]) for name in two})
    expected = batched_params(*([(two[f"{critic}.{i}.weight"], two[f"{critic}.{i}.bias"]) for i in layers]
                                for critic in ("q1", "q2")))
    batched = forms["batched"][0](forms["batched"][1])
    rtol, atol = (2e-2, 2e-3) if precision == "bf16" else (1e-4, 1e-6)
    for name, grad in expected.items():
        torch.testing.assert_close(batched[name], grad, rtol=rtol, atol=atol, msg=name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[256])
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--inputs", type=int, default=23, help="input features (HalfCheetah's 17 + 6 actions: 23)")
    p.add_argument("--precisions", nargs="+", default=["off", "bf16"], choices=["off", "bf16"])
    p.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    prepare_timing()
    cells = []
    for mode in args.modes:
        for precision in args.precisions:
            for rows in args.rows:
                row = cell(rows, args.width, args.inputs, precision, mode == "compiled", args.calls, args.repeats)
                cells.append(row)
                print(f"{mode:8} {precision:4} rows {rows:5} width {args.width}: two networks "
                      f"{row['two_networks_ms']:.3f} ms, batched {row['batched_ms']:.3f} ms, {row['speedup']:.2f}x",
                      flush=True)
    write_cells(args, cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
