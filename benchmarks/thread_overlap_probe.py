"""Can a host simulator step in a worker thread while the policy acts in the main thread? Times, per simulator, S
env steps alone, S policy acts alone (the rollout's `act`, eager), and both at once (the env in a thread): a
speed-up above 1 means the two overlap; at or below 1 the simulator holds the GIL (an overlap then needs worker
processes).

    python benchmarks/thread_overlap_probe.py --envs 8 --steps 100 --repeats 3 \
        --out benchmarks/results/thread-overlap-probe-cpu

One torch thread. Writes `results.json` and `results.md` in `--out`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from syncfree.bench.report import save_results
from syncfree.envs.api import VecEnv
from syncfree.tasks import preset
from syncfree.train.runner import Runner


def simulators(envs: int) -> dict[str, tuple[Callable[[], VecEnv], str]]:
    from syncfree.envs.adapters.gymnasium import make_gymnasium
    from syncfree.envs.adapters.mettagrid import MettaGridVecEnv, learnable_spec

    return {"MettaGrid (grid-arena)": (lambda: MettaGridVecEnv(learnable_spec(), envs, seed=0), "grid-arena"),
            "Gymnasium Hopper-v5": (lambda: make_gymnasium("Hopper-v5", envs, seed=0), "gym:Hopper-v5")}


def step_env(env: VecEnv, steps: int, actions: torch.Tensor) -> None:
    for _ in range(steps):
        env.step(actions)


def act(runner: Runner, steps: int) -> None:
    with torch.inference_mode():
        for t in range(steps):
            runner.algorithm.act(runner.obs, t % runner.algorithm.steps_per_env)


def seconds(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def probe(make_env: Callable[[], VecEnv], task: str, envs: int, steps: int, repeats: int) -> dict:
    env = make_env()
    env.reset()
    spec = env.action_spec
    actions = (torch.zeros(env.num_envs, dtype=torch.int64) if spec.kind == "discrete"
               else torch.zeros(env.num_envs, spec.size))
    cfg = preset(task)
    cfg.perf.compile, cfg.log.progress, cfg.env.num_envs = "off", False, envs
    runner = Runner(cfg)
    step_env(env, 10, actions)
    act(runner, 5)
    rows = []
    for _ in range(repeats):
        alone_env = seconds(lambda: step_env(env, steps, actions))
        alone_policy = seconds(lambda: act(runner, steps))

        def both() -> None:
            worker = threading.Thread(target=step_env, args=(env, steps, actions))
            worker.start()
            act(runner, steps)
            worker.join()

        rows.append({"env_s": alone_env, "policy_s": alone_policy, "both_s": seconds(both)})
    env.close()
    runner.close()
    return {"repeats": rows, "speedup": statistics.median((r["env_s"] + r["policy_s"]) / r["both_s"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/thread-overlap-probe-cpu"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {name: probe(make, task, args.envs, args.steps, args.repeats)
               for name, (make, task) in simulators(args.envs).items()}
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    lines = ["# Env stepping in a worker thread beside the policy's act", "",
             f"`python benchmarks/thread_overlap_probe.py --envs {args.envs} --steps {args.steps} --repeats "
             f"{args.repeats}` on {machine}, one torch thread; seconds for {args.steps} steps, median over the repeats.",
             "", "| simulator | env alone | act alone | both, env in a thread | (env + act) ÷ both |", "|---|---|---|---|---|"]
    for name, r in results.items():
        med = {k: statistics.median(x[k] for x in r["repeats"]) for k in ("env_s", "policy_s", "both_s")}
        lines.append(f"| {name} | {med['env_s']:.3f} | {med['policy_s']:.3f} | {med['both_s']:.3f} | "
                     f"{r['speedup']:.2f} |")
    save_results(args.out, {"machine": machine, "results": results}, "\n".join(lines), show=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
