"""When compiling pays for itself: each task preset eager, compiled with empty compile caches, and compiled again
with the caches the first compiled run left, on one thread; the figures `perf.compile=auto` decides by.

    python benchmarks/compile_payback.py [--tasks cartpole point-mass ...] [--iterations 5]

Each run is `syncfree train --task T --iterations N` in its own process (`OMP_NUM_THREADS=1`, torch's compile
caches in a fresh folder for the cold run), timed per iteration from its `metrics.jsonl`. From the three runs:

- eager and compiled seconds per iteration: the median of iterations 2..N of each run;
- the warm-up: the compiled run's first iteration minus the eager run's first iteration (what compiling adds);
- the break-even: the fewest iterations after which the compiled run's total time is below the eager run's,
  `1 + ceil(warm-up / (eager - compiled))` (none when compiled iterations are not faster).

Writes benchmarks/results/compile-payback-cpu/results.json and results.md, the table `perf.compile=auto` reads
(src/syncfree/train/compile_payback.json: the cold figures, since a first run has no caches) and the table of
docs/performance.md. `--tasks` measures those again and keeps the others' earlier figures."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
TASKS = ["cartpole", "cartpole-continuous", "pendulum", "point-mass", "point-mass-goal", "point-mass-maze",
         "gym:CartPole-v1", "gym:Hopper-v5", "gym:Humanoid-v5", "grid-arena", "g1-track"]
ITERATIONS = {"g1-track": 3, "grid-arena": 4}
"""Iterations per run where one iteration takes tens of seconds (default: `--iterations`)."""
TABLE = ROOT / "src" / "syncfree" / "train" / "compile_payback.json"
DOCS = ROOT / "docs" / "performance.md"
DOCS_BLOCK = re.compile(r"(<!-- compile-payback-table -->\n).*?(<!-- /compile-payback-table -->)", re.S)


def run(task: str, compile: str, iterations: int, cache: Path, runs: Path, name: str,
        extra: Sequence[str] = ()) -> list[float]:
    """Seconds of each iteration of one `syncfree train` process (`extra`: more of its arguments)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "syncfree", "train", "--task", task, "--iterations", str(iterations),
               "--perf.compile", compile, "--log.dir", str(runs), "--log.run_name", name, "--log.progress", "false",
               "--save_every", str(iterations), *extra]
    subprocess.run(command, check=True, env=env, capture_output=True, text=True, timeout=3600)
    records = [json.loads(line) for line in (runs / name / "metrics.jsonl").read_text().splitlines()]
    return [r["iteration_seconds"] for r in records]


def figures(eager: list[float], compiled: list[float]) -> dict[str, float | int | None]:
    """Seconds per iteration eager and compiled, the compile warm-up and the break-even iteration count."""
    eager_s, compiled_s = statistics.median(eager[1:]), statistics.median(compiled[1:])
    warmup = max(compiled[0] - eager[0], 0.0)
    saving = eager_s - compiled_s
    break_even = 1 + math.ceil(warmup / saving) if saving > 0 else None
    return {"eager_s": round(eager_s, 4), "compiled_s": round(compiled_s, 4), "warmup_s": round(warmup, 2),
            "break_even": break_even}


def measure(task: str, iterations: int, work: Path) -> dict:
    cache = work / f"inductor-{task.replace(':', '-')}"
    runs = work / "runs"
    stem = task.replace(":", "-")
    eager = run(task, "off", iterations, cache, runs, f"{stem}-eager")
    cold = run(task, "step", iterations, cache, runs, f"{stem}-cold")
    warm = run(task, "step", iterations, cache, runs, f"{stem}-warm")
    return {"task": task, "iterations": iterations, "eager": eager, "cold": cold, "warm": warm,
            "cold_figures": figures(eager, cold), "warm_figures": figures(eager, warm)}


def table_lines(results: list[dict]) -> list[str]:
    """The markdown table of the figures, one row per task (results.md and docs/performance.md)."""
    lines = ["| task | eager s/it | compiled s/it | warm-up, empty caches, s | break-even, empty caches | "
             "warm-up, caches kept, s | break-even, caches kept |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        c, w = r["cold_figures"], r["warm_figures"]
        lines.append(f"| {r['task']} | {c['eager_s']:.3f} | {c['compiled_s']:.3f} | {c['warmup_s']:.1f} | "
                     f"{c['break_even'] or 'never'} | {w['warmup_s']:.1f} | {w['break_even'] or 'never'} |")
    return lines


def report(results: list[dict], machine: str) -> str:
    lines = [f"# perf.compile: when the warm-up pays back ({machine})", "",
             "Rerun: `python benchmarks/compile_payback.py`. Seconds per iteration are medians of iterations 2..N; "
             "the warm-up is the compiled run's first iteration minus the eager run's; the break-even is the "
             "fewest iterations after which the compiled run has taken less time in all.", "",
             *table_lines(results)]
    return "\n".join(lines) + "\n"


def docs_with_table(text: str, results: list[dict], machine: str) -> str:
    """docs/performance.md's text with its table block holding `results`."""
    block = "\n".join([f"On {machine}:", "", *table_lines(results)]) + "\n"
    return DOCS_BLOCK.sub(lambda m: m.group(1) + block + m.group(2), text)


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "compile-payback-cpu")
    parser.add_argument("--table", type=Path, default=TABLE, help="the table perf.compile=auto reads")
    args = parser.parse_args()
    machine = f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}"
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / "results.json"
    results = {r["task"]: r for r in json.loads(saved.read_text())["results"]} if saved.is_file() else {}
    with tempfile.TemporaryDirectory() as work:
        for task in tqdm(args.tasks, desc="compile payback", unit="task"):
            results[task] = measure(task, ITERATIONS.get(task, args.iterations), Path(work))
            saved.write_text(json.dumps({"machine": machine, "results": list(results.values())}, indent=1))
    ordered = [results[t] for t in TASKS if t in results] + [r for t, r in results.items() if t not in TASKS]
    (args.out / "results.md").write_text(report(ordered, machine))
    table = {"machine": machine, "device": "cpu", "rerun": "python benchmarks/compile_payback.py",
             "tasks": {r["task"]: r["cold_figures"] for r in ordered}}
    args.table.write_text(json.dumps(table, indent=1) + "\n")
    DOCS.write_text(docs_with_table(DOCS.read_text(), ordered, machine))
    print(report(ordered, machine))


if __name__ == "__main__":
    main()
