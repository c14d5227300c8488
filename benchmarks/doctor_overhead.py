"""How much `syncfree doctor` slows the loop it examines: env steps per second of a task's env stepped plainly and
under the doctor's per-line counters, interleaved, one thread.

    python benchmarks/doctor_overhead.py [--task point-mass] [--num_envs 4096] [--steps 50] [--repeats 9]

Writes benchmarks/results/doctor-overhead-cpu/results.json and prints the ratio (instrumented / plain speed) per
interleaved pair of measurements, median and range."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from syncfree import doctor
from syncfree.core.phases import PhaseCounter, Phases
from syncfree.core.switches import PerfConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="point-mass")
    parser.add_argument("--num_envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", default="benchmarks/results/doctor-overhead-cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    env = doctor.task_env(args.task, args.num_envs, PerfConfig())
    actions = doctor.random_actions(env, args.steps)
    env.reset()

    def plain() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for a in actions:
                env.step(a)
        return time.perf_counter() - start

    def instrumented() -> float:
        phases, counter = Phases(), PhaseCounter(sites=True)
        start = time.perf_counter()
        with torch.inference_mode(), phases.attached(counter):
            for a in actions:
                with phases(doctor.ENV_PHASE):
                    env.step(a)
        return time.perf_counter() - start

    plain(), instrumented()  # warm-up
    times: dict[str, list[float]] = {"plain": [], "doctor": []}
    for _ in range(args.repeats):
        times["plain"].append(plain())
        times["doctor"].append(instrumented())
    steps_per_s = {k: args.steps * args.num_envs / statistics.median(v) for k, v in times.items()}
    ratios = [p / d for p, d in zip(times["plain"], times["doctor"], strict=True)]  # per interleaved pair
    ratio = statistics.median(ratios)
    result = {"task": args.task, "num_envs": args.num_envs, "steps": args.steps, "repeats": args.repeats,
              "torch": torch.__version__, "python": platform.python_version(), "processor": platform.processor(),
              "seconds": times, "env_steps_per_s": steps_per_s, "doctor_over_plain_per_repeat": ratios,
              "doctor_over_plain": ratio}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=1))
    print(f"{args.task}, {args.num_envs} envs: plain {steps_per_s['plain']:,.0f} env steps/s, under the doctor "
          f"{steps_per_s['doctor']:,.0f}; speed under the doctor / plain, per interleaved pair: median {ratio:.2f}x "
          f"({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
