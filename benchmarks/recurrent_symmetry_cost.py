"""What mirror symmetry costs a recurrent policy: env steps per second with and without it, interleaved.

    python benchmarks/recurrent_symmetry_cost.py [--num_envs 1024] [--repeats 3] [--iterations 2]

point-mass with the recurrent MLP policy (`policy.kind=recurrent`: an LSTM of 256 and the preset's MLPs), eager
(`perf.compile=off`: the compiled minibatch graph with symmetry takes minutes to build on a CPU), one torch thread.
Settings: `ppo` (no symmetry) and `ppo + symmetry` (augmentation and the mirror loss, weight 0.5). Each repeat times
`--iterations` iterations of each trainer after one warm-up iteration, the trainers in turn. Writes
benchmarks/results/recurrent-symmetry-cost-cpu/results.json and results.md."""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from syncfree.algo.settings import SymmetryConfig
from syncfree.bench.report import save_results
from syncfree.tasks import preset, with_algorithm
from syncfree.train.runner import Runner

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"ppo": SymmetryConfig(),
            "ppo + symmetry": SymmetryConfig(augment=True, mirror_loss=True, mirror_loss_coef=0.5)}


def trainer(setting: str, num_envs: int) -> Runner:
    cfg = with_algorithm(preset("point-mass"), "recurrent-ppo")
    cfg.env.num_envs, cfg.perf.compile, cfg.log.progress, cfg.device = num_envs, "off", False, "cpu"
    cfg.symmetry = SETTINGS[setting]
    return Runner(cfg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num_envs", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    runners = {name: trainer(name, args.num_envs) for name in SETTINGS}
    for runner in runners.values():
        runner.iterate()  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for _ in range(args.repeats):
        for name, runner in runners.items():
            start = time.perf_counter()
            for _ in range(args.iterations):
                runner.iterate()
            rates[name].append(args.iterations * runner.steps_per_iteration / (time.perf_counter() - start))
    first = next(iter(runners.values()))
    rows = ["| setting | env steps/s, median (min–max) | of `ppo` |", "|---|---|---|"]
    base = statistics.median(rates["ppo"])
    for name, values in rates.items():
        median = statistics.median(values)
        rows.append(f"| {name} | {median:,.0f} ({min(values):,.0f}–{max(values):,.0f}) | {median / base:.2f}x |")
    markdown = "\n".join([
        "# Mirror symmetry's cost to a recurrent policy (point-mass)",
        "",
        f"`python benchmarks/recurrent_symmetry_cost.py --num_envs {args.num_envs} --repeats {args.repeats} "
        f"--iterations {args.iterations}`: {args.num_envs} envs x {first.cfg.ppo.steps_per_env} steps, the "
        f"recurrent MLP policy (LSTM {first.cfg.policy.rnn.hidden}), eager, one thread, {args.repeats} interleaved "
        "repeats.",
        "",
        *rows,
    ])
    save_results(ROOT / "benchmarks" / "results" / "recurrent-symmetry-cost-cpu",
                 {"num_envs": args.num_envs, "repeats": args.repeats, "iterations": args.iterations,
                  "steps_per_s": rates}, markdown, show=True)


if __name__ == "__main__":
    main()
