"""When compiling pays for itself: each task preset eager, compiled with empty compile caches, and compiled again
with the caches the first compiled run left, on one thread; the figures `perf.compile=auto` decides by.

    python benchmarks/compile_payback.py [--tasks cartpole point-mass ...] [--learners sac td3] [--iterations 5]

Each run is `syncfree train --task T --iterations N` in its own process (`OMP_NUM_THREADS=1`, torch's compile
caches in a fresh folder for the cold run), timed per iteration from its `metrics.jsonl`. From the three runs:

- eager and compiled seconds per iteration: the median of the iterations after the first that updates (2..N);
- the warm-up: what the compiled run's iterations up to the first that updates took more than the eager run's
  (what compiling adds);
- the break-even: the fewest updating iterations after which the compiled run's total time is below the eager
  run's, `1 + ceil(warm-up / (eager - compiled))` (none when compiled iterations are not faster).

The off-policy learners (`--learners`, on `--learner_tasks`) are measured apart, from each task's preset for the
learner with no random steps first (`A.learning_starts 0`) over `--learner_iterations`: their first gradient step
compiles where their buffer first holds a batch, which may be the second iteration or later
(`iterations_before_learning`); their break-even counts updating iterations, as `auto` does.

Writes benchmarks/results/compile-payback-cpu/results.json and results.md, the table `perf.compile=auto` reads
(src/syncfree/train/compile_payback.json: the cold figures, since a first run has no caches) and the table of
docs/performance.md. `--tasks` (and `--learners`) measures those again and keeps the others' earlier figures."""

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
LEARNERS = ("sac", "td3")
LEARNER_TASKS = ["pendulum", "point-mass", "gym:HalfCheetah-v5"]
"""Where the off-policy learners' figures are measured: their two built-in presets and the Gymnasium one."""
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


def figures(eager: list[float], compiled: list[float], first: int = 1) -> dict[str, float | int | None]:
    """Seconds per iteration eager and compiled, the compile warm-up and the break-even iteration count (`first`:
    the first iteration that updates, 1-based)."""
    eager_s, compiled_s = statistics.median(eager[first:]), statistics.median(compiled[first:])
    warmup = max(sum(compiled[:first]) - sum(eager[:first]), 0.0)
    saving = eager_s - compiled_s
    break_even = 1 + math.ceil(warmup / saving) if saving > 0 else None
    return {"eager_s": round(eager_s, 4), "compiled_s": round(compiled_s, 4), "warmup_s": round(warmup, 2),
            "break_even": break_even}


def learner_setup(task: str, algorithm: str) -> tuple[list[str], int]:
    """The arguments that train `task` with `algorithm` from its first iterations on (no random steps), and the
    first iteration that updates then."""
    from syncfree.tasks import preset

    cfg = preset(task, algorithm=algorithm)
    getattr(cfg, algorithm).learning_starts = 0
    return ["--algorithm", algorithm, f"--{algorithm}.learning_starts", "0"], cfg.iterations_before_learning() + 1


def case_name(task: str, algorithm: str | None) -> str:
    """How the tables name a case: the task, and the learner measured apart on it."""
    return task if algorithm is None else f"{task} ({algorithm})"


def measure(task: str, iterations: int, work: Path, algorithm: str | None = None) -> dict:
    extra, first = learner_setup(task, algorithm) if algorithm is not None else ([], 1)
    cache = work / f"inductor-{task.replace(':', '-')}-{algorithm or 'own'}"
    runs = work / "runs"
    stem = f"{task.replace(':', '-')}-{algorithm or 'own'}"
    eager = run(task, "off", iterations, cache, runs, f"{stem}-eager", extra)
    cold = run(task, "step", iterations, cache, runs, f"{stem}-cold", extra)
    warm = run(task, "step", iterations, cache, runs, f"{stem}-warm", extra)
    return {"task": task, "algorithm": algorithm, "iterations": iterations, "first_update": first, "eager": eager,
            "cold": cold, "warm": warm, "cold_figures": figures(eager, cold, first),
            "warm_figures": figures(eager, warm, first)}


def table_lines(results: list[dict]) -> list[str]:
    """The markdown table of the figures, one row per task (results.md and docs/performance.md)."""
    lines = ["| task | eager s/it | compiled s/it | warm-up, empty caches, s | break-even, empty caches | "
             "warm-up, caches kept, s | break-even, caches kept |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        c, w = r["cold_figures"], r["warm_figures"]
        lines.append(f"| {case_name(r['task'], r.get('algorithm'))} | {c['eager_s']:.3f} | {c['compiled_s']:.3f} | "
                     f"{c['warmup_s']:.1f} | {c['break_even'] or 'never'} | {w['warmup_s']:.1f} | "
                     f"{w['break_even'] or 'never'} |")
    return lines


def report(results: list[dict], machine: str) -> str:
    lines = [f"# perf.compile: when the warm-up pays back ({machine})", "",
             "Rerun: `python benchmarks/compile_payback.py`. Seconds per iteration are medians of the iterations "
             "after the first that updates (2..N); the warm-up is what the compiled run's iterations up to that "
             "first took more than the eager run's; the break-even is the fewest updating iterations after which "
             "the compiled run has taken less time in all. `(sac)`, `(td3)`: the task's preset for that learner, "
             "with no random steps first.", "",
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


def ordered_results(results: dict[tuple[str, str | None], dict]) -> list[dict]:
    """The tasks in `TASKS`' order, then the learners' cases, then any others measured."""
    order = [(t, None) for t in TASKS] + [(t, a) for a in LEARNERS for t in LEARNER_TASKS]
    return [results[k] for k in order if k in results] + [r for k, r in results.items() if k not in order]


def shipped_table(ordered: list[dict], machine: str) -> dict:
    """The table `perf.compile=auto` reads: each case's cold figures, the learners' under `learners`."""
    learners: dict[str, dict] = {}
    for r in ordered:
        if r.get("algorithm") is not None:
            learners.setdefault(r["algorithm"], {})[r["task"]] = r["cold_figures"]
    return {"machine": machine, "device": "cpu", "rerun": "python benchmarks/compile_payback.py",
            "tasks": {r["task"]: r["cold_figures"] for r in ordered if r.get("algorithm") is None},
            "learners": learners}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=TASKS)
    parser.add_argument("--learners", nargs="*", default=list(LEARNERS), choices=LEARNERS)
    parser.add_argument("--learner_tasks", nargs="+", default=LEARNER_TASKS)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--learner_iterations", type=int, default=12)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "compile-payback-cpu")
    parser.add_argument("--table", type=Path, default=TABLE, help="the table perf.compile=auto reads")
    args = parser.parse_args()
    machine = f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}"
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / "results.json"
    results = {(r["task"], r.get("algorithm")): r for r in json.loads(saved.read_text())["results"]} \
        if saved.is_file() else {}
    cases = [(t, None) for t in args.tasks] + [(t, a) for a in args.learners for t in args.learner_tasks]
    with tempfile.TemporaryDirectory() as work:
        for task, algorithm in tqdm(cases, desc="compile payback", unit="case"):
            iterations = args.learner_iterations if algorithm else ITERATIONS.get(task, args.iterations)
            results[task, algorithm] = measure(task, iterations, Path(work), algorithm)
            saved.write_text(json.dumps({"machine": machine, "results": list(results.values())}, indent=1))
    ordered = ordered_results(results)
    (args.out / "results.md").write_text(report(ordered, machine))
    args.table.write_text(json.dumps(shipped_table(ordered, machine), indent=1) + "\n")
    DOCS.write_text(docs_with_table(DOCS.read_text(), ordered, machine))
    print(report(ordered, machine))


if __name__ == "__main__":
    main()
