"""Two studies of one sampler seed (`--sampler random --sampler-seed S`), with and without a pruner, trial by trial:
states, the trials' time, env steps trained, the best trials, whether they tried the same settings and whether each
trial trained the same in both (its training records over the iterations both ran).

    python benchmarks/tune_pruning_compare.py --dir runs --pruned seeded-median --unpruned seeded-none \
        --budget-steps 1228800 [--out comparison.json]

See docs/tune.md, "Pruning, compared trial by trial"."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import optuna

TIMES = ("steps_per_s", "iteration_seconds")
"""Record fields that are timings: they differ between runs of the same training."""


def load(folder: Path, name: str) -> list[Any]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{(folder / name / 'study.db').resolve()}")
    return sorted(study.trials, key=lambda t: t.number)


def seconds(trial: Any) -> float:
    return (trial.datetime_complete - trial.datetime_start).total_seconds()


def trained_steps(trial: Any, budget: int, reports: int) -> int:
    """A pruned trial stopped at its last report (at a `reports`th of the budget each)."""
    if trial.state == optuna.trial.TrialState.PRUNED:
        return budget * max(trial.intermediate_values) // reports
    return budget


def records(trial: Any) -> list[dict[str, Any]]:
    path = Path(trial.user_attrs["run_dir"]) / "metrics.jsonl"
    return [{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in path.read_text().splitlines()]


def summary(trials: list[Any], budget: int, reports: int) -> dict[str, Any]:
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    best = max(done, key=lambda t: t.value)
    states: dict[str, int] = {}
    for t in trials:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    return {"states": states, "trial_seconds": round(sum(seconds(t) for t in trials), 1),
            "env_steps": sum(trained_steps(t, budget, reports) for t in trials), "best_trial": best.number,
            "best_return": round(best.value, 1),
            "top": [(t.number, round(t.value, 1)) for t in sorted(done, key=lambda t: -t.value)[:6]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="runs", help="the folder holding both study folders")
    parser.add_argument("--pruned", required=True)
    parser.add_argument("--unpruned", required=True)
    parser.add_argument("--budget-steps", type=int, required=True)
    parser.add_argument("--reports", type=int, default=4)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder = Path(args.dir)
    pruned, unpruned = load(folder, args.pruned), load(folder, args.unpruned)
    out = {name: summary(trials, args.budget_steps, args.reports)
           for name, trials in ((args.pruned, pruned), (args.unpruned, unpruned))}
    for name, figures in out.items():
        print(f"{name}: {figures['states']}, trials' time {figures['trial_seconds']:.0f} s, env steps "
              f"{figures['env_steps']:,}, best {figures['best_return']} (trial {figures['best_trial']}); top "
              f"{figures['top']}")
    same_settings = all(a.params == b.params for a, b in zip(pruned, unpruned, strict=True))
    same_training = all(records(a) == records(b)[: len(records(a))] for a, b in zip(pruned, unpruned, strict=True))
    saved = 1 - out[args.pruned]["trial_seconds"] / out[args.unpruned]["trial_seconds"]
    steps_saved = 1 - out[args.pruned]["env_steps"] / out[args.unpruned]["env_steps"]
    print(f"same settings trial by trial: {same_settings}; same training records: {same_training}")
    print(f"trials' time saved by pruning: {100 * saved:.1f} %; env steps saved: {100 * steps_saved:.1f} %")
    print("trial  unpruned: return (s)  pruned: state return (s)  reports")
    for a, b in zip(unpruned, pruned, strict=True):
        value = b.value if b.value is not None else b.intermediate_values[max(b.intermediate_values)]
        print(f"{a.number:5d}  {a.value:9.1f} ({seconds(a):5.1f})  {b.state.name:8s} {value:9.1f} ({seconds(b):5.1f})"
              f"  {[round(v) for v in b.intermediate_values.values()]}")
    out.update(same_settings_trial_by_trial=same_settings, same_training_records=same_training,
               trial_time_saved=round(saved, 3), env_steps_saved=round(steps_saved, 3))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
