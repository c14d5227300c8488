"""A user's env whose step does not compile as one graph, under `perf.compile=auto`: what the probe costs, what a
500-iteration run under the defaults takes (the trainer compiled, the env eager) against the eager run, and what a
run of 1000 iterations that `callbacks.stop_when` ends after 10 pays for a compile it never recovers (cartpole: `step`,
what `auto` chose for it before it weighed early stopping, against `auto` now), and what a compile in a second
process costs the eager loop beside it and itself (the two cores shared: compiling in the background).

    python benchmarks/own_env_compile.py [--iterations 500] [--envs 64]

Every run is `syncfree train` (on `--task own_env_compile:ItemEnv`, this file's env: a `.item()` in a branch of
its step, as Isaac Lab-style code has) in its own process, one thread, with torch's compile caches in a fresh folder
(`cold`) or in the folder a first compiled run filled (`warm`); the probe's figures come from one process per env.
Writes benchmarks/results/own-env-compile-cpu/results.json and results.md."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from syncfree.envs.api import ActionSpec, TorchVecEnv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROBED = ["cartpole", "cartpole-continuous", "pendulum", "point-mass", "point-mass-goal", "point-mass-maze", "ItemEnv"]
"""The built-in torch tasks (whose steps compile) and the env of this file (whose step does not)."""


class ItemEnv(TorchVecEnv):
    """A point pushed along a line, with a host read in a branch of its step: eager code runs it, a whole graph
    cannot hold it."""

    state_names = ("state",)
    action_spec = ActionSpec("continuous", 1)

    def __init__(self, num_envs: int = 64, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(num_envs, device, seed, max_episode_length=100)
        self.obs_shapes = {"policy": (2,), "critic": (2,)}
        self.state = torch.zeros(num_envs, 2, device=self.device)

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.state[:, 1].add_(0.1 * actions[:, 0].clamp(-1.0, 1.0))
        self.state[:, 0].add_(0.1 * self.state[:, 1])
        if self.state.abs().max().item() > 10:
            self.state.clamp_(-10.0, 10.0)
        return -self.state.pow(2).sum(1), self.state[:, 0].abs() > 2

    def _initial_state(self) -> dict[str, torch.Tensor]:
        return {"state": self._uniform(-0.5, 0.5, 2)}

    def _observe(self) -> dict[str, torch.Tensor]:
        return {"policy": self.state.clone(), "critic": self.state.clone()}


def probe_in_this_process(name: str, repeats: int) -> dict:
    """Seconds of importing dynamo, of the first probe of `name`'s env and the median of `repeats` more."""
    from syncfree.tasks import make_env

    torch.set_num_threads(1)
    env = ItemEnv(64) if name == "ItemEnv" else make_env(name, num_envs=64)
    env.reset()
    start = time.perf_counter()
    importlib.import_module("torch._dynamo")  # a compiled run imports it anyway

    imported = time.perf_counter() - start
    seconds, found = [], None
    for _ in range(1 + repeats):
        start = time.perf_counter()
        found = env.step_graph_break()
        seconds.append(time.perf_counter() - start)
    return {"env": name, "import_dynamo_s": round(imported, 3), "first_s": round(seconds[0], 3),
            "repeat_s": round(statistics.median(seconds[1:]), 3), "graph_break": str(found) if found else None}


def environment(**more: str) -> dict[str, str]:
    """One torch thread, this checkout's package first on the path."""
    return {**os.environ, "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]), **more}


def launch(task: str, args: list[str], cache: Path, runs: Path, name: str) -> dict:
    """Start one `syncfree train` process (one thread, torch's compile caches in `cache`)."""
    command = [sys.executable, "-m", "syncfree", "train", "--task", task, *args,
               "--log.dir", str(runs), "--log.run_name", name, "--log.progress", "false"]
    process = subprocess.Popen(command, env=environment(TORCHINDUCTOR_CACHE_DIR=str(cache)), cwd=HERE,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return {"process": process, "started": time.perf_counter(), "task": task, "args": args, "runs": runs,
            "name": name}


def collect(run: dict) -> dict:
    """A launched run's wall time, its iterations' seconds and its start line, once it has ended."""
    _, stderr = run["process"].communicate(timeout=3600)
    wall = time.perf_counter() - run["started"]
    if run["process"].returncode != 0:
        raise SystemExit(f"{run['name']}: exit {run['process'].returncode}\n{stderr[-2000:]}")
    metrics = run["runs"] / run["name"] / "metrics.jsonl"
    seconds = [json.loads(line)["iteration_seconds"] for line in metrics.read_text().splitlines()]
    start_line = next(line for line in stderr.splitlines() if line.startswith("training "))
    return {"name": run["name"], "task": run["task"], "args": run["args"], "wall_s": round(wall, 2),
            "iterations": len(seconds), "first_s": round(seconds[0], 3),
            "median_s": round(statistics.median(seconds[1:] or seconds), 4), "loop_s": round(sum(seconds), 2),
            "start_line": start_line}


def train(task: str, args: list[str], cache: Path, runs: Path, name: str) -> dict:
    return collect(launch(task, args, cache, runs, name))


def report(results: dict) -> str:
    lines = [f"# An own env whose step breaks the graph, under perf.compile=auto ({results['machine']})", "",
             "Rerun: `python benchmarks/own_env_compile.py`.", "",
             "## The probe (one process per env, 64 envs)", "",
             "| env | import dynamo, s | first probe, s | later probes, s | graph break |", "|---|---|---|---|---|"]
    for p in results["probe"]:
        lines.append(f"| {p['env']} | {p['import_dynamo_s']} | {p['first_s']} | {p['repeat_s']} | "
                     f"{p['graph_break'] or 'none: one graph'} |")
    lines += ["", "## Runs", "", "| run | iterations | wall, s | loop, s | first iteration, s | median s/it |",
              "|---|---|---|---|---|---|"]
    for r in results["runs"]:
        lines.append(f"| {r['name']} | {r['iterations']} | {r['wall_s']} | {r['loop_s']} | {r['first_s']} | "
                     f"{r['median_s']} |")
    lines += ["", "Start lines:", ""] + [f"- {r['name']}: `{r['start_line']}`" for r in results["runs"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5, help="probes after the first, per env")
    parser.add_argument("--probe-one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "own-env-compile-cpu")
    args = parser.parse_args()
    if args.probe_one:
        print(json.dumps(probe_in_this_process(args.probe_one, args.repeats)))
        return
    from compile_payback import cpu_model

    probe = [sys.executable, __file__, "--repeats", str(args.repeats), "--probe-one"]
    probes = [json.loads(subprocess.run([*probe, name], check=True, env=environment(), capture_output=True, text=True,
                                        timeout=600).stdout.splitlines()[-1]) for name in PROBED]
    own, full = "own_env_compile:ItemEnv", ["--env.num_envs", str(args.envs), "--iterations", str(args.iterations)]
    stopping = ["--iterations", "1000", "--callbacks.stop_when", "iteration >= 10"]
    compile_only = ["--iterations", "1", "--perf.compile", "step"]
    with tempfile.TemporaryDirectory() as work:
        runs, fresh = Path(work) / "runs", lambda name: Path(work) / name
        measured = [train(own, [*full, "--perf.compile", "off"], fresh("eager"), runs, "ItemEnv, off"),
                    train(own, full, fresh("own"), runs, "ItemEnv, auto, empty caches"),
                    train(own, full, fresh("own"), runs, "ItemEnv, auto, caches kept"),
                    train("cartpole", [*stopping, "--perf.compile", "step"], fresh("stop"), runs,
                          "cartpole stopped at 10, step (what auto chose before), empty caches"),
                    train("cartpole", stopping, fresh("stop-auto"), runs, "cartpole stopped at 10, auto"),
                    train("cartpole", compile_only, fresh("alone"), runs, "cartpole, 1 iteration, step, empty caches")]
        # a compile in another process beside the eager loop: what compiling in the background costs both here
        eager = launch(own, [*full, "--perf.compile", "off"], fresh("eager-beside"), runs,
                       "ItemEnv, off, beside the compile below")
        compiling = launch("cartpole", compile_only, fresh("beside"), runs,
                           "cartpole, 1 iteration, step, empty caches, beside the eager run above")
        measured += [collect(eager), collect(compiling)]
    results = {"machine": f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}", "probe": probes,
               "runs": measured}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "results.md").write_text(report(results))
    print(report(results))


if __name__ == "__main__":
    main()
