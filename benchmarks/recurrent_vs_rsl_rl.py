"""Recurrent policies: syncfree's recurrent MLP policy against rsl_rl 5.5.1's `RNNModel`, timed in one run.

    python benchmarks/recurrent_vs_rsl_rl.py --task cartpole-continuous --repeats 5 --out benchmarks/results/...

Both train the task's preset with an LSTM of `--hidden` before each network's MLP (the preset's sizes), on the same
env (rsl_rl sees it through `SyncfreeToRslRl`), one thread: syncfree eager (`perf.compile=off`), syncfree with
the rollout step and the minibatch losses compiled (`perf.compile=hot`; the first iterations compile, untimed),
and rsl_rl's runner. Each repeat times `--iterations` iterations of every learner in turn (interleaved, so a busy
spell of the machine falls on all alike); the figure is the median over repeats of the seconds per iteration, and
the host syncs of one iteration (counted, not timed). Writes `result.json` and `README.md` under `--out`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import time
from pathlib import Path

import torch
from side_by_side_rsl_rl import rsl_rl_config

from syncfree.bench.run import machine_info
from syncfree.core.counters import count_syncs
from syncfree.envs.adapters.rsl_rl import SyncfreeToRslRl
from syncfree.policy.settings import RecurrentCoreConfig
from syncfree.tasks import make_env, preset, with_algorithm
from syncfree.train.runner import Runner


def syncfree_learner(task: str, hidden: int, compile_mode: str):
    cfg = with_algorithm(preset(task), "recurrent-ppo")
    cfg.policy.rnn = RecurrentCoreConfig(hidden=hidden)
    cfg.perf.compile, cfg.log.progress, cfg.device, cfg.iterations = compile_mode, False, "cpu", 10**6
    runner = Runner(cfg)

    def train(iterations: int) -> None:
        runner.learn(until=runner.iteration + iterations)

    return cfg, train


def rsl_rl_learner(task: str, hidden: int):
    from rsl_rl.runners import OnPolicyRunner

    cfg = with_algorithm(preset(task), "recurrent-ppo")
    cfg.policy.rnn = RecurrentCoreConfig(hidden=hidden)
    torch.manual_seed(cfg.seed)
    env = SyncfreeToRslRl(make_env(task, cfg.env.num_envs, seed=cfg.seed))
    with contextlib.redirect_stdout(io.StringIO()):
        runner = OnPolicyRunner(env, rsl_rl_config(cfg, check_for_nan=False, compile_mode=None, rnn=True),
                                log_dir=None, device="cpu")

    def train(iterations: int) -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            runner.learn(num_learning_iterations=iterations)

    return cfg, train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="cartpole-continuous")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=2, help="timed iterations per learner and repeat")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first (compilation happens here)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    learners = {"syncfree eager": lambda: syncfree_learner(args.task, args.hidden, "off"),
                "syncfree compile=hot": lambda: syncfree_learner(args.task, args.hidden, "hot"),
                "rsl_rl": lambda: rsl_rl_learner(args.task, args.hidden)}
    built, seconds, syncs = {}, {name: [] for name in learners}, {}
    for name, make in learners.items():
        cfg, train = make()
        train(args.warmup)
        with count_syncs() as counts:
            train(1)
        built[name], syncs[name] = train, counts.syncs
    for _ in range(args.repeats):
        for name, train in built.items():
            start = time.perf_counter()
            train(args.iterations)
            seconds[name].append((time.perf_counter() - start) / args.iterations)
    steps = cfg.env.num_envs * cfg.ppo.steps_per_env
    result = {"machine": machine_info("cpu"), "task": args.task, "hidden": args.hidden,
              "num_envs": cfg.env.num_envs, "steps_per_env": cfg.ppo.steps_per_env, "repeats": args.repeats,
              "iterations": args.iterations, "seconds_per_iteration": seconds, "syncs_per_iteration": syncs,
              "median": {name: statistics.median(v) for name, v in seconds.items()}}
    rsl = result["median"]["rsl_rl"]
    lines = [f"# Recurrent policies: syncfree against rsl_rl on {args.task}", "",
             f"`python benchmarks/recurrent_vs_rsl_rl.py --task {args.task} --hidden {args.hidden} --repeats "
             f"{args.repeats} --iterations {args.iterations}` on {result['machine']['processor']}, one thread. "
             f"{cfg.env.num_envs} envs x {cfg.ppo.steps_per_env} steps = {steps} env steps per iteration, LSTM of "
             f"{args.hidden} before each network's MLP, {cfg.ppo.num_epochs} epochs x {cfg.ppo.num_minibatches} "
             "minibatches; median over repeats, the learners interleaved.", "",
             "| learner | s per iteration (median) | per repeat | × rsl_rl's speed | host syncs per iteration |",
             "|---|---|---|---|---|"]
    for name, values in seconds.items():
        lines.append(f"| {name} | {result['median'][name]:.3f} | {', '.join(f'{v:.3f}' for v in values)} | "
                     f"{rsl / result['median'][name]:.2f} | {syncs[name]} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "README.md").write_text(text)


if __name__ == "__main__":
    main()
