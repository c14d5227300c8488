"""What a study costs beyond its trials' training: the time `syncfree tune` spends in Optuna's sampler and in the
study's storage (a SQLite file), per trial, against the trial's own time, in one worker.

    python benchmarks/tune_overhead.py [--trials 8] [--budget-steps 8192] [--num_envs 64] [--startup 3]

Runs a study of PPO's default space on pendulum (small trials), timing the study loop (`work`) and, inside it, each
trial's run (`run_trial`); the study's share is the loop's time outside the trials plus the Optuna calls inside them
(the settings drawn, the reports and prune checks, the trial's attributes). TPE models from trial `--startup` on (the
command's default is 10, which 8 trials would not reach). The heartbeat thread's writes (one every 10 s) run beside
the trial and are left out. Writes benchmarks/results/tune-overhead-cpu/results.json, naming the CPU."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

import syncfree
from syncfree.tuning import study as study_module

TIMES: dict[str, list[float]] = defaultdict(list)
"""Seconds of each timed call, by what it is."""
IN_TRIAL = [False]
"""Whether a trial's run is under way (an Optuna call then counts inside it)."""


def timed(name: str, fn: Callable[..., Any], trial: bool = False) -> Callable[..., Any]:
    """`fn`, its calls timed under `name` (prefixed `in trial:` or `outside:` where `name` is an Optuna call that may
    come from either side); `trial`: `fn` is a trial's run."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = name if trial or name in ("study loop",) else f"{'in trial' if IN_TRIAL[0] else 'outside'}: {name}"
        IN_TRIAL[0] = IN_TRIAL[0] or trial
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[key].append(time.perf_counter() - start)
            IN_TRIAL[0] = IN_TRIAL[0] and not trial

    return wrapper


INSIDE = {"suggest": ("suggest_float", "suggest_int", "suggest_categorical"), "report": ("report", "should_prune"),
          "attributes": ("set_user_attr",)}
"""The Optuna calls a trial makes while it runs, by what they are."""


def instrument() -> None:
    """Time the study loop, each trial's run, and the Optuna calls inside and outside the trials."""
    study_module.work = timed("study loop", study_module.work)
    study_module.run_trial = timed("trial", study_module.run_trial, trial=True)
    for what, names in INSIDE.items():
        for name in names:
            setattr(optuna.trial.Trial, name, timed(what, getattr(optuna.trial.Trial, name)))
    optuna.study.Study.ask = timed("ask (sampler + storage)", optuna.study.Study.ask)
    optuna.study.Study.tell = timed("tell (storage)", optuna.study.Study.tell)
    study_module.next_step = timed("next step (storage reads)", study_module.next_step)
    study_module.surplus = timed("surplus check (storage read)", study_module.surplus)


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")),
                "unknown")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--budget-steps", type=int, default=8192)
    parser.add_argument("--num_envs", type=int, default=64)
    parser.add_argument("--startup", type=int, default=3, help="random trials before TPE models (command: 10)")
    parser.add_argument("--out", default="benchmarks/results/tune-overhead-cpu")
    args = parser.parse_args()
    instrument()
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        result = syncfree.tune("pendulum", trials=args.trials, budget_steps=args.budget_steps, folder=folder,
                               study="overhead", sampler=optuna.samplers.TPESampler(n_startup_trials=args.startup,
                                                                                    seed=0),
                               **{"env.num_envs": args.num_envs, "perf.compile": "off", "threads": 1,
                                  "callbacks.eval_envs": 8})
        total = time.perf_counter() - start
        states = [t.state.name for t in result.study.trials]
    loop, trials = sum(TIMES["study loop"]), TIMES["trial"]
    inside = {name: sum(values) for name, values in TIMES.items() if name.startswith("in trial:")}
    outside_calls = {name: sum(values) for name, values in TIMES.items()
                     if name not in ("study loop", "trial") and not name.startswith("in trial:")}
    study_inside = sum(inside.values())
    outside = loop - sum(trials)
    trial_own = sum(trials) - study_inside
    per_trial = (outside + study_inside) / len(trials)
    record = {
        "cpu": cpu_name(), "python": platform.python_version(), "optuna": optuna.__version__,
        "storage": "sqlite (a file in a temporary folder)", "task": "pendulum", "space": "PPO's default (10 settings)",
        "sampler": f"TPE, {args.startup} random trials first", "trials": len(trials), "states": states,
        "budget_steps": args.budget_steps, "num_envs": args.num_envs,
        "command_seconds": total, "study_loop_seconds": loop,
        "trial_seconds": {"median": statistics.median(trials), "min": min(trials), "max": max(trials)},
        "study_seconds_per_trial": per_trial,
        "study_outside_trials_seconds": outside, "study_inside_trials_seconds": study_inside,
        "by_call_seconds": {**outside_calls, "outside: the rest of the loop": outside - sum(outside_calls.values()),
                            **inside},
        "study_share_of_trial_time": (outside + study_inside) / trial_own,
    }
    asks = TIMES["outside: ask (sampler + storage)"]
    record["ask_seconds"] = {"first": asks[0], "median": statistics.median(asks), "max": max(asks)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    print(f"study overhead: {1000 * per_trial:.1f} ms a trial = {100 * record['study_share_of_trial_time']:.2f} % of "
          f"a trial's own time (median trial {statistics.median(trials):.2f} s) on {record['cpu']}")


if __name__ == "__main__":
    main()
