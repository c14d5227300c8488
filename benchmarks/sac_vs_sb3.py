"""SAC in syncfree against Stable-Baselines3's SAC on the same Gymnasium env, side by side in one process: the same
env steps, parallel envs, networks, replay ratio and coefficients; per seed the training wall time (env steps/s) and
the deterministic return of the final policy.

    python benchmarks/sac_vs_sb3.py --env Pendulum-v1 --steps 20000 --seeds 0 1 2 --out results.json

Both train `--envs` Gymnasium envs stepped together (SB3: `make_vec_env`, `train_freq=1`; syncfree: `gym:<id>`,
`sac.steps_per_env=1`) and take `--envs` gradient steps of 256 transitions per vector step (a replay ratio of 1, SB3's
default), from `--learning_starts` uniform random env steps on. Networks: 256 x 256 ReLU MLPs for the actor and each of
the twin critics; Adam at 3e-4 for the actor, the critics and the temperature (SB3's defaults; syncfree's defaults are
set to them), `tau` 0.005, `gamma` 0.99, automatic temperature from 1.0 with target entropy -|A|, no observation
normalization. What differs: SB3 clamps the actor's log standard deviation to [-20, 2], syncfree squashes it into
[-5, 2]. One thread (`OMP_NUM_THREADS=1`); the two run one after the other for each seed, on the same machine.

Evaluation: the first episode of `--eval_envs` fresh envs under the deterministic actor (syncfree: `syncfree.evaluate`;
SB3: `evaluate_policy` on as many episodes of envs seeded from 10,000 + seed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HIDDEN = [256, 256]
RATE = 3e-4


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="Pendulum-v1", help="a Gymnasium id with a continuous action space")
    p.add_argument("--steps", type=int, default=20_000, help="env steps per run (all envs together)")
    p.add_argument("--envs", type=int, default=4)
    p.add_argument("--learning_starts", type=int, default=1_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--eval_envs", type=int, default=20)
    p.add_argument("--out", default="")
    return p.parse_args()


def train_syncfree(args: argparse.Namespace, seed: int, folder: Path) -> tuple[float, list[float]]:
    import syncfree

    iterations = args.steps // args.envs
    result = syncfree.learn(
        f"gym:{args.env}", algorithm="sac", seed=seed, iterations=iterations, run_dir=folder / f"syncfree-{seed}",
        **{"env.num_envs": args.envs, "log.progress": False, "perf.compile": "off",
           "policy.actor_hidden": HIDDEN, "policy.critic_hidden": HIDDEN, "policy.activation": "relu",
           "policy.normalize_obs": False, "sac.steps_per_env": 1, "sac.updates_per_iteration": args.envs,
           "sac.batch_size": 256, "sac.learning_starts": args.learning_starts, "sac.gamma": 0.99, "sac.tau": 0.005,
           "sac.actor_learning_rate": RATE, "sac.critic_learning_rate": RATE, "sac.alpha_learning_rate": RATE,
           "sac.buffer_size": 1_000_000})
    assert result.run_dir is not None
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    seconds = sum(r["iteration_seconds"] for r in records)  # the loop's time, without building the run
    returns = syncfree.evaluate(result.run_dir / "latest.pt", num_envs=args.eval_envs, seed=10_000 + seed)
    return seconds, [float(r) for r in returns]


def train_sb3(args: argparse.Namespace, seed: int) -> tuple[float, list[float]]:
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    env = make_vec_env(args.env, n_envs=args.envs, seed=seed)
    model = SAC("MlpPolicy", env, learning_rate=RATE, buffer_size=1_000_000, learning_starts=args.learning_starts,
                batch_size=256, tau=0.005, gamma=0.99, train_freq=1, gradient_steps=args.envs, ent_coef="auto_1.0",
                policy_kwargs={"net_arch": HIDDEN, "activation_fn": torch.nn.ReLU}, seed=seed, device="cpu",
                verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    seconds = time.perf_counter() - start
    eval_env = make_vec_env(args.env, n_envs=1, seed=10_000 + seed)
    returns, _ = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_envs, deterministic=True,
                                 return_episode_rewards=True)
    return seconds, [float(r) for r in returns]


def summary(values: list[float]) -> dict[str, float]:
    mean = statistics.fmean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": mean, "std": spread}


def main() -> int:
    args = parse()
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        print("sac_vs_sb3: needs Stable-Baselines3 (pip install 'stable-baselines3>=2.9')", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for name, train in (("syncfree", lambda s: train_syncfree(args, s, Path(tmp))),
                                ("sb3", lambda s: train_sb3(args, s))):
                seconds, returns = train(seed)
                run = {"library": name, "seed": seed, "seconds": seconds, "steps_per_s": args.steps / seconds,
                       "return": statistics.fmean(returns), "returns": returns}
                runs.append(run)
                print(f"{name} seed {seed}: {run['steps_per_s']:.0f} env steps/s ({seconds:.1f} s), deterministic "
                      f"return {run['return']:.1f}", flush=True)
    table = {}
    for name in ("syncfree", "sb3"):
        mine = [r for r in runs if r["library"] == name]
        table[name] = {"steps_per_s": summary([r["steps_per_s"] for r in mine]),
                       "return": summary([r["return"] for r in mine])}
    differences = [a["return"] - b["return"] for a, b in zip(runs[::2], runs[1::2], strict=True)]
    speed = [a["steps_per_s"] / b["steps_per_s"] for a, b in zip(runs[::2], runs[1::2], strict=True)]
    report = {"env": args.env, "steps": args.steps, "envs": args.envs, "learning_starts": args.learning_starts,
              "seeds": args.seeds, "eval_envs": args.eval_envs, "machine": platform.processor() or platform.machine(),
              "torch": torch.__version__, "threads": torch.get_num_threads(), "runs": runs, "summary": table,
              "return_difference": summary(differences), "speed_ratio": summary(speed)}
    for name, row in table.items():
        print(f"{name}: {row['steps_per_s']['mean']:.0f} ± {row['steps_per_s']['std']:.0f} env steps/s, return "
              f"{row['return']['mean']:.1f} ± {row['return']['std']:.1f} over seeds {args.seeds}")
    print(f"syncfree / sb3 speed: {report['speed_ratio']['mean']:.2f}x ± {report['speed_ratio']['std']:.2f}; return "
          f"difference {report['return_difference']['mean']:.1f} ± {report['return_difference']['std']:.1f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
