"""The recurrent policy's token encoder, forward and backward on one grid-arena minibatch, eagerly in float32, under
`torch.compile`, and under bfloat16 autocast: why `perf.compile` compiles the recurrent algorithm and
`perf.autocast` leaves it in float32.

    python benchmarks/recurrent_encoder_modes.py --out benchmarks/results/recurrent-encoder-modes-cpu/results.json

The input is what one minibatch of the grid-arena preset replays: 32 rows x 16 steps of observations with
`policy.recurrent.max_tokens` tokens read, of which 30-56 valid (MettaGrid's token layout, drawn at random). The
modes are timed in turn (A B C A B C ...) after a warm-up that includes compiling; medians over the repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from syncfree.bench.run import machine_info
from syncfree.policy.recurrent import EMPTY_TOKEN, TokenEncoder
from syncfree.policy.settings import RecurrentPolicyConfig


def observations(rows: int, tokens: int, gen: torch.Generator) -> torch.Tensor:
    """Valid tokens first (30-56 of them), then padding, as MettaGrid writes them."""
    obs = torch.stack([torch.randint(0, 121, (rows, tokens), generator=gen),
                       torch.randint(0, 24, (rows, tokens), generator=gen),
                       torch.randint(0, 8, (rows, tokens), generator=gen)], -1).to(torch.uint8)
    count = torch.randint(30, 57, (rows, 1), generator=gen)
    return obs.masked_fill((torch.arange(tokens) >= count).unsqueeze(-1), EMPTY_TOKEN)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=32 * 16, help="observations per minibatch (rows x steps)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5, help="forward-backward calls per measurement")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = RecurrentPolicyConfig()
    torch.manual_seed(0)
    encoder = TokenEncoder(cfg.embed_dim, cfg.encoder_hidden, cfg.hidden, cfg.max_tokens)
    tokens = observations(args.rows, 500, torch.Generator().manual_seed(0))

    def step() -> None:
        encoder.zero_grad()
        encoder(tokens).sum().backward()

    def bf16() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            step()

    modes = {"eager float32": step, "torch.compile float32": torch.compile(step), "eager bfloat16 autocast": bf16}
    warmup = {}
    for name, fn in modes.items():
        start = time.perf_counter()
        fn()
        fn()
        warmup[name] = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.repeats):
        for name, fn in modes.items():
            start = time.perf_counter()
            for _ in range(args.calls):
                fn()
            times[name].append((time.perf_counter() - start) / args.calls * 1000)
    eager = statistics.median(times["eager float32"])
    result = {"rows": args.rows, "max_tokens": cfg.max_tokens, "machine": machine_info("cpu"),
              "ms_per_forward_backward": {n: statistics.median(t) for n, t in times.items()},
              "relative_to_eager": {n: statistics.median(t) / eager for n, t in times.items()},
              "all_ms": times, "warmup_seconds": warmup}
    for name in modes:
        print(f"{name}: {result['ms_per_forward_backward'][name]:.1f} ms ({result['relative_to_eager'][name]:.2f}x eager)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
