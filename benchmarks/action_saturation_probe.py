"""How far each learner's deterministic actions sit at the ends of their range on g1-track (the wall-clock study's
settings: `benchmarks/learning_parity.py`'s g1-track study, `ALGO.action_bounds=unit`).

    python benchmarks/action_saturation_probe.py --learners syncfree-td3 syncfree-sac syncfree --seeds 0 1

Each learner trains its study's preset on one thread and, after each of `--at` iterations (PPO: `--ppo_at`), acts
deterministically on the first observations of 64 fresh envs (seeded 1000 + seed). Reported per point: the mean
|action| in the env's units, the share of action components at |action| >= 0.995 (a tanh there passes about 1 % of
its gradient), and for SAC and TD3 the mean |pre-tanh| output of the actor. Writes `--out`/result.json (one entry
per learner and seed) and prints one line per point.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from learning_parity import EVAL_SEED, OFF_POLICY, learner_config

SATURATED = 0.995
"""|tanh(u)| >= 0.995 where |u| >= 3: its derivative 1 - tanh^2 is below 0.01 there."""


def probe(learner: str, seed: int, points: list[int], settings: list[str], eval_envs: int = 64) -> list[dict]:
    from syncfree.tasks import make_env
    from syncfree.train.runner import Runner

    torch.set_num_threads(1)
    extra = ["ALGO.action_bounds=unit", *settings] if learner in OFF_POLICY else []
    cfg = learner_config("g1-track", learner, seed, extra, iterations=max(points) if learner in OFF_POLICY else None)
    cfg.iterations = max(cfg.iterations, max(points))
    runner = Runner(cfg)
    rows = []
    for it in points:
        runner.learn(until=it)
        policy = runner.policy
        obs = make_env("g1-track", eval_envs, seed=EVAL_SEED + seed).reset()
        with torch.no_grad():
            actor_obs = policy.actor_input(obs)
            actions = policy.act_deterministic(actor_obs)
            row = {"iteration": it, "mean_abs_action": float(actions.abs().mean()),
                   "saturated_share": float((actions.abs() >= SATURATED).float().mean())}
            if learner in OFF_POLICY:
                raw = policy.actor(policy.actor_norm(actor_obs))[..., : policy.action_dim]
                row["mean_abs_pre_tanh"] = float(raw.abs().mean())
        rows.append(row)
        print(f"{learner} seed {seed} iteration {it}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()
                                                                   if k != "iteration"), flush=True)
    runner.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", nargs="+", default=["syncfree-td3", "syncfree-sac", "syncfree"],
                        choices=["syncfree", *OFF_POLICY])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--at", nargs="+", type=int, default=[350, 1400], help="SAC's and TD3's iterations")
    parser.add_argument("--ppo_at", nargs="+", type=int, default=[10, 40, 100], help="PPO's iterations")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", dest="settings",
                        help="SAC's and TD3's settings beyond the study's (`ALGO.pre_tanh_penalty=0.01`); the "
                             "result's keys name them")
    parser.add_argument("--out", default="benchmarks/results/action-saturation-g1-track-cpu")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "result.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    for learner in args.learners:
        for seed in args.seeds:
            points = sorted(args.ppo_at if learner == "syncfree" else args.at)
            settings = args.settings if learner in OFF_POLICY else []
            results[" ".join([f"{learner}-seed{seed}", *settings])] = probe(learner, seed, points, settings)
            path.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
