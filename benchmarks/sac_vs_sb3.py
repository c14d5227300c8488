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

With `--preset`, syncfree trains the task's SAC preset as it is (`gym:<id>`: 16 envs x 4 steps per iteration, 32
gradient steps of 256, 10,000 random env steps, [256, 256] ReLU networks, observation normalization, the critics' and
the temperature's rates 1e-3, 3-step returns), and SB3 the preset's envs, steps per env (`train_freq`), gradient
steps, batch, random steps, networks, `gamma`, `tau`, buffer and n-step returns (`n_steps`, its `NStepReplayBuffer`)
with its own defaults for the rest (one rate of 3e-4, no observation normalization): each library as a user would
run it at the same env steps and replay ratio. `--n_step` sets both libraries' n-step returns (`--n_step 1` reruns
the comparisons made before the preset took 3-step returns).

Evaluation: the first episode of `--eval_envs` fresh envs under the deterministic actor (syncfree: `syncfree.evaluate`;
SB3: `evaluate_policy` on as many envs, seeded from 10,000 + seed). With `--eval_every K` the policy is also
evaluated so every K iterations (an iteration: the envs' steps between two updates), and the report gives the mean
of those in the last 10 % of the iterations, as `learning_seeds.py --eval_every` does. `--libraries sb3` runs one
side only (to set beside a syncfree figure measured before with the same settings).

Precision: `--autocast` is syncfree's `perf.autocast`. Its default, `auto`, runs the gradient steps' hidden layers
(a batch of 256 through layers of 256) in bfloat16 on a CPU with bfloat16 instructions (AVX512-BF16, AMX), as
syncfree trains there by default; `off` keeps float32 throughout, as Stable-Baselines3 does.

Speed: env steps/s over the whole loop, and, without `--eval_every`, over the iterations from two past the first
that trains to the end (`steady_from`): the speed once syncfree's `--compile` mode (`off` by default; `hot`,
`step`) has compiled, which its first training iteration does.
"""

from __future__ import annotations

import argparse
import json
import math
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


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="Pendulum-v1", help="a Gymnasium id with a continuous action space")
    p.add_argument("--steps", type=int, default=20_000, help="env steps per run (all envs together)")
    p.add_argument("--envs", type=int, default=4)
    p.add_argument("--learning_starts", type=int, default=None,
                   help="uniform random env steps first (default 1,000; with --preset the preset's)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--eval_envs", type=int, default=20)
    p.add_argument("--eval_every", type=int, default=0,
                   help="also evaluate every this many iterations; report the mean over the last 10 %% of them")
    p.add_argument("--n_step", type=int, default=None,
                   help="both libraries' n-step returns (SB3's `n_steps`; default 1, with --preset the preset's)")
    p.add_argument("--preset", action="store_true",
                   help="syncfree: the gym:<env> SAC preset as it is; SB3: its layout, its own other defaults")
    p.add_argument("--libraries", nargs="+", default=["syncfree", "sb3"], choices=["syncfree", "sb3"])
    p.add_argument("--compile", default="off", choices=["off", "hot", "step"],
                   help="syncfree's perf.compile (its first iteration that trains compiles)")
    p.add_argument("--autocast", default="auto", choices=["off", "auto", "bf16"],
                   help="syncfree's perf.autocast (`auto`: bfloat16 gradient steps on a CPU with bfloat16 "
                        "instructions; `off`: float32, as Stable-Baselines3)")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    args.layout = layout(args)
    return args


def layout(args: argparse.Namespace) -> dict[str, Any]:
    """Envs, steps per env and gradient steps per iteration, batch, random steps, networks and coefficients both
    libraries share: the preset's with `--preset`, else `--envs` envs stepped once per `--envs` gradient steps."""
    if args.n_step is not None and args.n_step < 1:
        raise SystemExit(f"sac_vs_sb3: --n_step {args.n_step} is invalid: n-step returns sum at least 1 step")
    if not args.preset:
        args.learning_starts = 1_000 if args.learning_starts is None else args.learning_starts
        return {"envs": args.envs, "steps_per_env": 1, "gradient_steps": args.envs, "batch_size": 256,
                "learning_starts": args.learning_starts, "hidden": HIDDEN, "activation": "relu", "gamma": 0.99,
                "tau": 0.005, "buffer_size": 1_000_000, "n_step": args.n_step or 1}
    from syncfree.tasks import preset

    cfg = preset(f"gym:{args.env}", algorithm="sac")
    sac, policy = cfg.sac, cfg.policy
    if policy.actor_hidden != policy.critic_hidden or policy.activation not in ("relu", "tanh", "elu"):
        raise SystemExit(f"sac_vs_sb3: the preset's networks ({policy}) have no SB3 counterpart here")
    starts = sac.learning_starts if args.learning_starts is None else args.learning_starts
    return {"envs": cfg.env.num_envs, "steps_per_env": sac.steps_per_env, "gradient_steps": sac.updates_per_iteration,
            "batch_size": sac.batch_size, "learning_starts": starts, "hidden": policy.actor_hidden,
            "activation": policy.activation, "gamma": sac.gamma, "tau": sac.tau, "buffer_size": sac.buffer_size,
            "n_step": sac.n_step if args.n_step is None else args.n_step}


def iterations(args: argparse.Namespace) -> int:
    return args.steps // (args.layout["envs"] * args.layout["steps_per_env"])


def steady_from(args: argparse.Namespace) -> int:
    """The iteration after which both libraries run at their steady speed: two past the first that trains (which
    compiles, under `--compile`)."""
    per_iteration = args.layout["envs"] * args.layout["steps_per_env"]
    return -(-args.layout["learning_starts"] // per_iteration) + 2


def late(evaluations: list[tuple[int, float]], total: int) -> list[float]:
    """The returns of the evaluations in the last 10 % of `total` iterations."""
    return [value for iteration, value in evaluations if iteration >= 0.9 * total]


Trained = tuple[float, list[float], list[tuple[int, float]], float | None]
"""The loop's seconds (evaluations left out), the final policy's returns, (iteration, mean return) of each
evaluation on the way, and the seconds of the iterations after `steady_from` (None with evaluations)."""


def train_syncfree(args: argparse.Namespace, seed: int, folder: Path) -> Trained:
    import syncfree
    from syncfree.train.evaluate import evaluate_task

    shape = args.layout
    settings: dict[str, Any] = {"env.num_envs": shape["envs"], "log.progress": False, "perf.compile": args.compile,
                                "perf.autocast": args.autocast, "sac.learning_starts": shape["learning_starts"],
                                "sac.n_step": shape["n_step"]}
    if not args.preset:
        settings.update({
            "policy.actor_hidden": HIDDEN, "policy.critic_hidden": HIDDEN, "policy.activation": "relu",
            "policy.normalize_obs": False, "sac.steps_per_env": 1, "sac.updates_per_iteration": args.envs,
            "sac.batch_size": 256, "sac.gamma": 0.99, "sac.tau": 0.005,
            "sac.actor_learning_rate": RATE, "sac.critic_learning_rate": RATE, "sac.alpha_learning_rate": RATE,
            "sac.buffer_size": 1_000_000})
    evaluations: list[tuple[int, float]] = []

    def evaluate(run: Any, record: dict[str, Any]) -> None:  # after the iteration's seconds were taken
        if args.eval_every and record["iteration"] % args.eval_every == 0:
            returns = evaluate_task(run.cfg, run.runner.policy, args.eval_envs, run.runner.device, seed=10_000 + seed,
                                    greedy=True)
            evaluations.append((record["iteration"], float(returns.mean())))

    result = syncfree.learn(f"gym:{args.env}", algorithm="sac", seed=seed, iterations=iterations(args),
                            run_dir=folder / f"syncfree-{seed}", on_iteration=[evaluate], **settings)
    assert result.run_dir is not None
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    seconds = sum(r["iteration_seconds"] for r in records)  # the loop's time, without building the run
    steady = None if args.eval_every else sum(r["iteration_seconds"] for r in records
                                              if r["iteration"] > steady_from(args))
    returns = syncfree.evaluate(result.run_dir / "latest.pt", num_envs=args.eval_envs, seed=10_000 + seed)
    return seconds, [float(r) for r in returns], evaluations, steady


def train_sb3(args: argparse.Namespace, seed: int) -> Trained:
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    shape = args.layout
    per_iteration = shape["envs"] * shape["steps_per_env"]

    def evaluate(model: Any) -> list[float]:
        env = make_vec_env(args.env, n_envs=args.eval_envs, seed=10_000 + seed)
        returns, _ = evaluate_policy(model, env, n_eval_episodes=args.eval_envs, deterministic=True,
                                     return_episode_rewards=True)
        env.close()
        return [float(r) for r in returns]

    class Evaluations(BaseCallback):
        """Every `--eval_every` iterations, at the start of a rollout (after the last iteration's update)."""

        def __init__(self) -> None:
            super().__init__()
            self.evaluations: list[tuple[int, float]] = []
            self.seconds = 0.0
            self.steady_start = math.nan

        def _on_rollout_start(self) -> None:
            iteration = self.num_timesteps // per_iteration
            if iteration == steady_from(args):  # the iterations after it follow
                self.steady_start = time.perf_counter()
            if args.eval_every and iteration and iteration % args.eval_every == 0 and (
                    not self.evaluations or self.evaluations[-1][0] != iteration):
                start = time.perf_counter()
                self.evaluations.append((iteration, statistics.fmean(evaluate(self.model))))
                self.seconds += time.perf_counter() - start

        def _on_step(self) -> bool:
            return True

    activation = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "elu": torch.nn.ELU}[shape["activation"]]
    env = make_vec_env(args.env, n_envs=shape["envs"], seed=seed)
    coefficients: dict[str, Any] = {} if args.preset else {"learning_rate": RATE, "ent_coef": "auto_1.0"}
    model = SAC("MlpPolicy", env, buffer_size=shape["buffer_size"], learning_starts=shape["learning_starts"],
                batch_size=shape["batch_size"], tau=shape["tau"], gamma=shape["gamma"],
                train_freq=shape["steps_per_env"], gradient_steps=shape["gradient_steps"], n_steps=shape["n_step"],
                policy_kwargs={"net_arch": shape["hidden"], "activation_fn": activation}, seed=seed, device="cpu",
                verbose=0, **coefficients)
    callback = Evaluations()
    start = time.perf_counter()
    model.learn(total_timesteps=iterations(args) * per_iteration, callback=callback)
    end = time.perf_counter()
    seconds = end - start - callback.seconds
    return seconds, evaluate(model), callback.evaluations, None if args.eval_every else end - callback.steady_start


def summary(values: list[float]) -> dict[str, float]:
    mean = statistics.fmean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": mean, "std": spread}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        if "sb3" in args.libraries:
            import stable_baselines3  # noqa: F401
    except ImportError:
        print("sac_vs_sb3: needs Stable-Baselines3 (pip install 'stable-baselines3>=2.9')", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    runs: list[dict[str, Any]] = []
    trainers = {"syncfree": train_syncfree, "sb3": lambda a, s, folder: train_sb3(a, s)}
    steps = iterations(args) * args.layout["envs"] * args.layout["steps_per_env"]
    steady_steps = (iterations(args) - steady_from(args)) * args.layout["envs"] * args.layout["steps_per_env"]
    if steady_steps <= 0 and not args.eval_every:
        raise SystemExit(f"sac_vs_sb3: --steps {args.steps} end before iteration {steady_from(args)}, where the "
                         "steady speed is measured from: raise --steps or lower --learning_starts")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for name in args.libraries:
                seconds, returns, evaluations, steady = trainers[name](args, seed, Path(tmp))
                run = {"library": name, "seed": seed, "seconds": seconds, "steps_per_s": steps / seconds,
                       "return": statistics.fmean(returns), "returns": returns, "evaluations": evaluations}
                if steady is not None:
                    run["steady_steps_per_s"] = steady_steps / steady
                if evaluations:
                    run["return_late"] = statistics.fmean(late(evaluations, iterations(args)) or [run["return"]])
                runs.append(run)
                print(f"{name} seed {seed}: {run['steps_per_s']:.0f} env steps/s ({seconds:.1f} s"
                      + (f"; after iteration {steady_from(args)}: {run['steady_steps_per_s']:.0f}" if steady else "")
                      + "), deterministic "
                      f"return {run['return']:.1f}" + (f", over the last 10 % {run['return_late']:.1f}"
                                                       if evaluations else ""), flush=True)
    table = {}
    for name in args.libraries:
        mine = [r for r in runs if r["library"] == name]
        table[name] = {"steps_per_s": summary([r["steps_per_s"] for r in mine]),
                       "return": summary([r["return"] for r in mine])}
        if all("return_late" in r for r in mine):
            table[name]["return_late"] = summary([r["return_late"] for r in mine])
        if all("steady_steps_per_s" in r for r in mine):
            table[name]["steady_steps_per_s"] = summary([r["steady_steps_per_s"] for r in mine])
    report = {"env": args.env, "steps": steps, "layout": args.layout, "preset": args.preset, "compile": args.compile,
              "autocast": args.autocast,
              "steady_from": steady_from(args),
              "seeds": args.seeds, "eval_envs": args.eval_envs, "eval_every": args.eval_every,
              "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "runs": runs, "summary": table}
    for name, row in table.items():
        print(f"{name}: {row['steps_per_s']['mean']:.0f} ± {row['steps_per_s']['std']:.0f} env steps/s, return "
              f"{row['return']['mean']:.1f} ± {row['return']['std']:.1f} over seeds {args.seeds}")
    if len(args.libraries) == 2:
        ours, theirs = ([r for r in runs if r["library"] == name] for name in ("syncfree", "sb3"))
        report["return_difference"] = summary([a["return"] - b["return"] for a, b in zip(ours, theirs, strict=True)])
        report["speed_ratio"] = summary([a["steps_per_s"] / b["steps_per_s"] for a, b in zip(ours, theirs, strict=True)])
        if all("steady_steps_per_s" in r for r in runs):
            report["steady_speed_ratio"] = summary([a["steady_steps_per_s"] / b["steady_steps_per_s"]
                                                    for a, b in zip(ours, theirs, strict=True)])
            print(f"syncfree / sb3 speed after iteration {steady_from(args)}: "
                  f"{report['steady_speed_ratio']['mean']:.2f}x ± {report['steady_speed_ratio']['std']:.2f}")
        print(f"syncfree / sb3 speed: {report['speed_ratio']['mean']:.2f}x ± {report['speed_ratio']['std']:.2f}; "
              f"return difference {report['return_difference']['mean']:.1f} ± "
              f"{report['return_difference']['std']:.1f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
