"""SAC and TD3 eager, under `perf.compile=hot` (the two losses compiled, each with its backward) and under `step`
(each gradient step one graph: `syncfree.algo.offpolicy_step`): seconds per iteration, on one thread.

    python benchmarks/offpolicy_compile.py [--tasks pendulum point-mass] [--algorithms sac td3] [--iterations 12]

Each run is `syncfree train --task T --algorithm A --perf.compile M` from the task's preset for the learner, with no
random steps first (`A.learning_starts 0`), so every iteration takes its gradient steps; in its own process
(`OMP_NUM_THREADS=1`, torch's compile caches in a fresh folder), timed per iteration from its `metrics.jsonl`
(`compile_payback.run`). The modes run interleaved, `--repeats` times. Figures: the median of the iterations after
the first that updates (the first whose buffer holds a batch: `iterations_before_learning`) of each run, the median
over repeats; the warm-up is what a compiled run's iterations up to that first took more than the eager run's.
Writes `results.json` and `README.md` under `--out`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from compile_payback import cpu_model, learner_setup, run
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
MODES = ("off", "hot", "step")


def measure(task: str, algorithm: str, iterations: int, repeats: int, work: Path) -> dict:
    extra, first = learner_setup(task, algorithm)
    times: dict[str, list[list[float]]] = {mode: [] for mode in MODES}
    for repeat in range(repeats):
        for mode in MODES:
            name = f"{task.replace(':', '-')}-{algorithm}-{mode}-{repeat}"
            times[mode].append(run(task, mode, iterations, work / f"cache-{name}", work / "runs", name, extra))
    per_iteration = {mode: statistics.median(statistics.median(r[first:]) for r in runs)
                     for mode, runs in times.items()}
    warmup = {mode: statistics.median(sum(r[:first]) - sum(e[:first])
                                      for r, e in zip(times[mode], times["off"], strict=True))
              for mode in ("hot", "step")}
    return {"task": task, "algorithm": algorithm, "iterations": iterations, "repeats": repeats,
            "first_update": first, "times": times,
            "seconds_per_iteration": {m: round(v, 4) for m, v in per_iteration.items()},
            "warmup_s": {m: round(v, 1) for m, v in warmup.items()}}


def report(results: list[dict], machine: str, command: str) -> str:
    lines = [f"# SAC and TD3: eager, `compile=hot` and `compile=step` ({machine}, one thread)", "",
             f"Rerun: `{command}`. Seconds per iteration: the median of the iterations after the first that "
             "updates of each run, the median over repeats; warm-up: what a compiled run's iterations up to that "
             "first took more than the eager run's (fresh compile caches).",
             "", "| task | learner | eager s/it | hot s/it | step s/it | eager / step | hot / step | warm-up hot, s "
             "| warm-up step, s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s, w = r["seconds_per_iteration"], r["warmup_s"]
        lines.append(f"| {r['task']} | {r['algorithm']} | {s['off']:.3f} | {s['hot']:.3f} | {s['step']:.3f} | "
                     f"{s['off'] / s['step']:.2f}x | {s['hot'] / s['step']:.2f}x | {w['hot']:.1f} | {w['step']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["pendulum", "point-mass"])
    parser.add_argument("--algorithms", nargs="+", default=["sac", "td3"], choices=["sac", "td3"])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "offpolicy-compile-cpu")
    args = parser.parse_args()
    cases = [(task, algorithm) for task in args.tasks for algorithm in args.algorithms]
    results = []
    with tempfile.TemporaryDirectory() as work:
        for task, algorithm in tqdm(cases, desc="compile modes", unit="case"):
            results.append(measure(task, algorithm, args.iterations, args.repeats, Path(work)))
    machine = cpu_model()
    command = (f"python benchmarks/offpolicy_compile.py --tasks {' '.join(args.tasks)} --algorithms "
               f"{' '.join(args.algorithms)} --iterations {args.iterations} --repeats {args.repeats}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"machine": machine, "results": results}, indent=1) + "\n")
    text = report(results, machine, command)
    (args.out / "README.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
