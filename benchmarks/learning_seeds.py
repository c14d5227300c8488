"""A task's preset trained with several seeds: the learning figure of iteration windows, mean and spread over seeds.

    python benchmarks/learning_seeds.py --task grid-arena --seeds 0 1 2 3 4 --out results.json
    python benchmarks/learning_seeds.py --task pendulum --algorithm sac --seeds 0 1 2 --eval_envs 32 ...
    python benchmarks/learning_seeds.py --task pendulum --set ppo.optimizer=muon ...   # a setting changed
    python benchmarks/learning_seeds.py --merge s0.json s1.json s2.json --windows 91-100 --out all.json   # seeds run apart
    PYTHONPATH=/tmp/before/src python benchmarks/learning_seeds.py ...   # the same with another checkout's syncfree

The figure is `reward_per_agent_step` for multi-agent tasks (grid-arena) and `mean_return` otherwise, averaged over
each window of iterations (`--windows 11-20 31-50 76-100`, 1-based, inclusive), per seed; the report gives each
window's mean, sample standard deviation, min and max over the seeds, and the wall time of each run. With
`--eval_envs N` each run's final policy also plays on N fresh envs (seeded 12345, as `syncfree eval`), once with
its deterministic (greedy) actions and once with sampled ones (`syncfree eval --sample`), and the report gives the
mean first-episode return of each per seed; with `--eval_every K` too, the deterministic policy also plays those
envs every K iterations, and the report gives the mean of these evaluations over the last 10 % of the iterations
(one evaluation of a policy that still moves, an off-policy learner's, says little; the evaluations leave the
training as it is). For a preset whose learning rate
adapts (`ppo.schedule=adaptive`) the report gives, per seed, the share of iterations that ended with the rate at a
bound of the schedule (1e-5 or 1e-2). Runs go one after another on one intra-op thread. Imports either layout of
the trainer (`syncfree.train.runner.Runner`, or before it `syncfree.train.trainer.make_trainer`), so two checkouts
can be compared with the same script.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

try:
    from syncfree.algo.optim import MAX_LR, MIN_LR
    from syncfree.tasks import preset
    from syncfree.train.runner import Runner as make_runner
except ImportError:  # a checkout from before the runner
    from syncfree.config import preset
    from syncfree.train.trainer import make_trainer as make_runner

    MIN_LR = MAX_LR = None


def final_eval(runner, cfg, num_envs: int, greedy: bool) -> float:
    """Mean first-episode return of the trained policy's deterministic (`greedy`) or sampled actions on fresh envs,
    as `syncfree eval [--sample]`."""
    import contextlib

    from syncfree.train.evaluate import evaluate_task

    # the weights to evaluate (schedule-free AdamW's average); a checkout from before them has no such block
    weights = getattr(runner.algorithm, "average_weights", contextlib.nullcontext)
    with weights():
        return float(evaluate_task(cfg, runner.policy, num_envs, runner.device, seed=12345, greedy=greedy).mean())


def run(task: str, seed: int, iterations: int, eval_envs: int, algorithm: str = "",
        settings: dict[str, Any] | None = None, eval_every: int = 0) -> dict:
    cfg = preset(task, algorithm=algorithm) if algorithm else preset(task)
    if settings:
        from syncfree.config import with_values

        cfg = with_values(cfg, settings)
        cfg.validate()
    cfg.seed, cfg.log.progress = seed, False
    cfg.iterations = iterations or cfg.iterations
    runner = make_runner(cfg)
    figures, records, rates, evaluations = [], [], [], []
    start = time.perf_counter()
    for it in tqdm(range(1, cfg.iterations + 1), desc=f"{task} seed {seed}", unit="it", file=sys.stderr):
        record = runner.learn(until=it)
        records.append(record)
        if eval_envs and eval_every and it % eval_every == 0:
            evaluations.append({"iteration": it, "eval_return": final_eval(runner, cfg, eval_envs, greedy=True)})
        rates.append(record.get("learning_rate", float("nan")))
        figures.append(record.get("reward_per_agent_step", record.get("mean_return", float("nan"))))
    wall = time.perf_counter() - start
    result = {"seed": seed, "figure": figures, "learning_rate": rates, "wall_seconds": wall,
              "last_record": records[-1]}
    if getattr(getattr(cfg, "ppo", None), "schedule", None) == "adaptive" and MIN_LR is not None:
        result["share_at_bound"] = sum(rate <= MIN_LR or rate >= MAX_LR for rate in rates) / len(rates)
    if eval_envs:
        result["eval_return"] = final_eval(runner, cfg, eval_envs, greedy=True)
        result["eval_return_sampled"] = final_eval(runner, cfg, eval_envs, greedy=False)
    if evaluations:  # the steadier figure of a policy that still moves: its evaluations over the last 10 %
        result["evaluations"] = evaluations
        late = [e["eval_return"] for e in evaluations if e["iteration"] >= 0.9 * cfg.iterations]
        result["eval_return_late"] = statistics.mean(late or [result["eval_return"]])
    runner.close()
    return result


def window_summary(runs: list[dict], first: int, last: int) -> dict:
    """Each run's mean figure over iterations `first`-`last` (1-based, inclusive) and their mean, sample standard
    deviation, min and max over the runs. An iteration in which no episode ended has no figure (NaN) and is left out;
    a run with none in the window is NaN and left out of the summary (`seeds` counts those in it)."""
    def finite_mean(values: list[float]) -> float:
        finite = [v for v in values if math.isfinite(v)]
        return statistics.mean(finite) if finite else math.nan

    values = [finite_mean(r["figure"][first - 1 : last]) for r in runs]
    kept = [v for v in values if math.isfinite(v)]
    return {"per_seed": values, "seeds": len(kept), "mean": statistics.mean(kept) if kept else math.nan,
            "sd": statistics.stdev(kept) if len(kept) > 1 else 0.0 if kept else math.nan,
            "min": min(kept, default=math.nan), "max": max(kept, default=math.nan)}


def parse_setting(item: str) -> tuple[str, Any]:
    """`key=value` of `--set`: the value as JSON (numbers, booleans, lists), else as a string."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise SystemExit(f"--set {item!r} is invalid; allowed: KEY=VALUE, e.g. ppo.optimizer=muon")
    try:
        return key, json.loads(text)
    except json.JSONDecodeError:
        return key, text


def merged(paths: list[str]) -> dict:
    """The `--out` files of runs of one task, algorithm and settings (each seed its own command, run side by side)
    as one: their seeds and runs in order; one line naming the file that differs from the first."""
    parts = [json.loads(Path(p).read_text()) for p in paths]
    first = parts[0]
    for path, part in zip(paths, parts, strict=True):
        for key in ("task", "algorithm", "settings"):
            if part[key] != first[key]:
                sys.exit(f"learning_seeds.py: --merge {path}: {key} {part[key]!r}, where {paths[0]} has "
                         f"{first[key]!r}")
    seeds = [seed for part in parts for seed in part["seeds"]]
    if len(set(seeds)) != len(seeds):
        sys.exit(f"learning_seeds.py: --merge: seed repeated among {seeds}")
    return {**{key: first[key] for key in ("task", "algorithm", "settings")}, "seeds": seeds,
            "runs": [run for part in parts for run in part["runs"]]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="grid-arena")
    parser.add_argument("--algorithm", default="", help="the algorithm that trains the task (default: its own)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--iterations", type=int, default=0, help="0: the preset's")
    parser.add_argument("--windows", nargs="+", default=["11-20", "31-50", "76-100"])
    parser.add_argument("--eval_envs", type=int, default=0,
                        help="evaluate each final policy on this many fresh envs (grid-arena: simulations); 0: none")
    parser.add_argument("--eval_every", type=int, default=0,
                        help="with --eval_envs, also evaluate the deterministic policy every this many iterations "
                             "and report the mean of those in the last 10 %% of the iterations; 0: the final only")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="settings of the preset to change, e.g. ppo.optimizer=muon (values read as JSON, else "
                             "as strings)")
    parser.add_argument("--merge", nargs="+", default=[], metavar="FILE",
                        help="train nothing: report the runs of these --out files (one seed each, say) as one, "
                             "written to --out")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    settings = dict(parse_setting(item) for item in args.set)
    torch.set_num_threads(1)
    if args.eval_envs < 0:
        parser.error(f"--eval_envs={args.eval_envs} is invalid; allowed: an integer >= 0")
    if args.eval_every < 0 or (args.eval_every and not args.eval_envs):
        parser.error(f"--eval_every={args.eval_every} is invalid; allowed: an integer >= 0, with --eval_envs")
    if args.merge:
        whole = merged(args.merge)
        args.task, args.algorithm, args.seeds = whole["task"], whole["algorithm"], whole["seeds"]
        settings, runs = whole["settings"], whole["runs"]
        args.eval_every = next((r["evaluations"][1]["iteration"] - r["evaluations"][0]["iteration"] for r in runs
                                if len(r.get("evaluations", [])) > 1), args.eval_every)
    else:
        runs = [run(args.task, seed, args.iterations, args.eval_envs, args.algorithm, settings, args.eval_every)
                for seed in args.seeds]
    windows = {}
    for window in args.windows:
        first, last = (int(x) for x in window.split("-"))
        windows[window] = w = window_summary(runs, first, last)
        print(f"iterations {window}: {w['mean']:.3f} ± {w['sd']:.3f} (min {w['min']:.3f}, max {w['max']:.3f}) "
              f"over {w['seeds']} seeds" + ("" if w["seeds"] == len(runs) else
                                           f" ({len(runs) - w['seeds']} without a finished episode in them)"))
    walls = [r["wall_seconds"] for r in runs]
    print(f"wall time per run: {statistics.mean(walls):.0f} s (min {min(walls):.0f}, max {max(walls):.0f})")
    shares = [r["share_at_bound"] for r in runs if "share_at_bound" in r]
    if shares:
        print(f"learning rate at a bound of the adaptive schedule after {', '.join(f'{x:.0%}' for x in shares)} "
              "of the iterations (per seed)")
    late = [r["eval_return_late"] for r in runs if "eval_return_late" in r]
    if late:
        spread = statistics.stdev(late) if len(late) > 1 else 0.0
        print(f"deterministic evaluations over the last 10 % of the iterations (every {args.eval_every}): mean "
              f"return {statistics.mean(late):.2f} ± {spread:.2f} over {len(late)} seeds (per seed: "
              f"{', '.join(f'{e:.2f}' for e in late)})")
    for key, actions in (("eval_return", "deterministic"), ("eval_return_sampled", "sampled")):
        evals = [r[key] for r in runs if key in r]
        if evals:
            spread = statistics.stdev(evals) if len(evals) > 1 else 0.0
            envs = f", {args.eval_envs} envs" if args.eval_envs else ""
            print(f"final policy, {actions} actions{envs}: mean return {statistics.mean(evals):.2f} "
                  f"± {spread:.2f} over {len(evals)} seeds (per seed: {', '.join(f'{e:.2f}' for e in evals)})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"task": args.task, "algorithm": args.algorithm, "settings": settings,
                                              "seeds": args.seeds,
                                              "windows": windows, "wall_seconds": walls, "runs": runs},
                                             indent=2) + "\n")


if __name__ == "__main__":
    main()
