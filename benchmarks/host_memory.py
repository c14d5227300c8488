"""`perf.retain_host_memory` on and off, each in its own process (the setting is process-wide, so `syncfree bench`
cannot compare it in one): steps/s, system time and minor page faults of a few training iterations, alternated.

    python benchmarks/host_memory.py --task g1-track --num_envs 4096 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from syncfree.bench.report import save_results

CHILD = """
import json, resource, sys, torch
torch.set_num_threads({threads})
from syncfree.tasks import preset
from syncfree.bench.timing import time_iterations
from syncfree.train.runner import Runner
cfg = preset({task!r})
cfg.env.num_envs, cfg.log.progress, cfg.perf.retain_host_memory = {num_envs}, False, {retain}
cfg.perf.compile = {compile!r}
trainer = Runner(cfg)
time_iterations(trainer, 1)
before = resource.getrusage(resource.RUSAGE_SELF)
seconds = time_iterations(trainer, {iterations})
after = resource.getrusage(resource.RUSAGE_SELF)
steps = trainer.env.num_envs * cfg.ppo.steps_per_env
print(json.dumps({{"steps_per_s": steps / seconds, "system_s": (after.ru_stime - before.ru_stime) / {iterations},
                  "minor_faults": (after.ru_minflt - before.ru_minflt) / {iterations}}}))
"""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="g1-track")
    p.add_argument("--num_envs", type=int, default=4096)
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", default="off", help="perf.compile of both (default off: no compile wait)")
    p.add_argument("--out", default="")
    return p.parse_args()


def run(args: argparse.Namespace, retain: bool) -> dict[str, float]:
    code = CHILD.format(task=args.task, num_envs=args.num_envs, retain=retain, iterations=args.iterations,
                        threads=args.threads, compile=args.compile)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    args = parse()
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(args.repeats):
        for name in ("off", "on"):
            runs[name].append(run(args, name == "on"))
            print(name, runs[name][-1], flush=True)
    ratios = [on["steps_per_s"] / off["steps_per_s"] for off, on in zip(runs["off"], runs["on"], strict=True)]
    summary = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()}
    result = {"task": args.task, "num_envs": args.num_envs, "iterations": args.iterations, "threads": args.threads,
              "compile": args.compile, "runs": runs, "median": summary, "ratio_on_to_off": {
                  "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}}
    lines = [f"retain_host_memory on {args.task}, {args.num_envs} envs, {args.threads} thread(s), compile "
             f"{args.compile}, median of {args.repeats} alternated processes x {args.iterations} iterations:",
             "| setting | steps/s | system s / iteration | minor faults / iteration |", "|---|---|---|---|"]
    for name, m in summary.items():
        lines.append(f"| {name} | {m['steps_per_s']:,.0f} | {m['system_s']:.2f} | {m['minor_faults']:,.0f} |")
    lines.append(f"\non / off: {result['ratio_on_to_off']['median']:.3f} "
                 f"({result['ratio_on_to_off']['min']:.3f}-{result['ratio_on_to_off']['max']:.3f})")
    print("\n".join(lines))
    if args.out:
        save_results(Path(args.out), result, "\n".join(lines))


if __name__ == "__main__":
    main()
