"""syncfree and rsl_rl's OnPolicyRunner on the very same syncfree task, timed and counted in one run.

    pip install -e '.[bench]'
    python benchmarks/side_by_side_rsl_rl.py --num_envs 64 4096 --threads 1

Same work per iteration, checked below: the same env (rsl_rl sees it through `SyncfreeToRslRl`), env steps per
iteration, epochs, minibatch count and size, network sizes and activation (parameter counts asserted equal),
observation normalization of actor and critic, Gaussian head with a learned log-std, the preset's learning-rate
schedule and PPO coefficients, and the env's step compiled as syncfree's default compiles it (both trainers step
the same compiled env). Known differences: rsl_rl folds observations into its normalizer once per iteration, syncfree
at every step; rsl_rl draws one minibatch permutation per update, syncfree one per epoch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import math
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

import torch

from syncfree.algo.settings import RNDConfig, SymmetryConfig
from syncfree.bench.config import BenchConfig, train_config
from syncfree.bench.floor import Floor
from syncfree.bench.report import save_results
from syncfree.bench.run import machine_info
from syncfree.bench.timing import count_iteration, sync, time_iterations
from syncfree.config import PerfConfig
from syncfree.core.compile import hot
from syncfree.core.counters import Counts, count_syncs
from syncfree.core.device import resolve_device
from syncfree.envs.adapters.rsl_rl import SyncfreeToRslRl, rsl_rl_augmentation
from syncfree.tasks import make_env
from syncfree.train.runner import Runner

SYNCFREE_VARIANTS = {
    "syncfree optimized": PerfConfig(compile="step"),
    "syncfree optimized, compile=hot": PerfConfig(compile="hot"),
    "syncfree optimized, eager": PerfConfig(compile="off"),
    "syncfree optimized, float32": PerfConfig(autocast="off"),
    "syncfree optimized, bf16": PerfConfig(autocast="bf16"),
    "syncfree baseline": PerfConfig.preset("baseline"),
}
"""The optimized values (compiled, the minibatch update as one graph, as `perf.compile=auto` chooses for a run long
enough to pay the compile back; bfloat16 hidden layers where they pay), the same with
the update compiled as forward and losses only (`hot`, replayed as CUDA graphs on a GPU), the same without compile,
the same in float32 and in bfloat16 wherever `autocast=bf16` lowers, and every switch at its conventional value. `retain_host_memory` is process-wide: once the first syncfree trainer
turned it on, every run of the process has it, rsl_rl's included."""

RSL_VARIANTS = {
    "rsl_rl": dict(check_for_nan=True, compile=None, logger=True),
    "rsl_rl nan-check off": dict(check_for_nan=False, compile=None, logger=True),
    "rsl_rl compiled": dict(check_for_nan=False, compile="default", logger=True),
    "rsl_rl no logger": dict(check_for_nan=False, compile=None, logger=False),
}
"""The logger variants track episode returns and lengths as syncfree does; "no logger" does less work."""


RND = RNDConfig(enabled=True, weight=0.5, num_outputs=16, predictor_hidden=[64, 64], target_hidden=[64, 64],
                state_normalization=True, reward_normalization=True)
"""`--rnd`: random network distillation on every trainer of both libraries, these settings (the policy group)."""


SYMMETRY = SymmetryConfig(augment=True, mirror_loss=True, mirror_loss_coef=0.5)
"""`--symmetry`: rsl_rl's symmetry augmentation with its mirror loss on every trainer, the task's own mirror."""


def rsl_rl_symmetry(sym: SymmetryConfig, env: SyncfreeToRslRl) -> dict:
    """`symmetry` as rsl_rl's `symmetry_cfg`, with the env's mirror as its augmentation function."""
    return {"use_data_augmentation": sym.augment, "use_mirror_loss": sym.mirror_loss,
            "mirror_loss_coeff": sym.mirror_loss_coef, "data_augmentation_func": rsl_rl_augmentation(env.env.mirror())}


def rsl_rl_rnd(rnd: RNDConfig) -> dict:
    """`rnd` as rsl_rl's `rnd_cfg` (the env the runner sees has a step_dt of 1 s: the weight is taken as it is)."""
    return {"weight": rnd.weight, "num_outputs": rnd.num_outputs, "predictor_hidden_dims": rnd.predictor_hidden,
            "target_hidden_dims": rnd.target_hidden, "activation": rnd.activation,
            "state_normalization": rnd.state_normalization, "reward_normalization": rnd.reward_normalization,
            "learning_rate": rnd.learning_rate}


def rsl_rl_config(cfg, check_for_nan: bool, compile_mode: str | None, rnn: bool = False) -> dict:
    """rsl_rl's runner config equal to a syncfree TrainConfig, as far as rsl_rl has the setting: its gradients are
    clipped per network, its learning rate adapts after every minibatch or stays fixed (it has no linear schedule)
    and its rewards are not normalized, whatever `ppo.grad_clip`, `ppo.kl_adapt_every`, `ppo.schedule=linear` and
    `ppo.normalize_rewards` say. `rnn`: `RNNModel`s with the recurrent core of `policy.rnn` (its defaults for a
    config without one: an LSTM of 256, one layer)."""
    p = cfg.ppo

    def model(hidden: list[int]) -> dict:
        base = {"class_name": "MLPModel", "hidden_dims": hidden, "activation": cfg.policy.activation,
                "obs_normalization": cfg.policy.normalize_obs}
        if not rnn:
            return base
        from syncfree.policy.settings import RecurrentCoreConfig

        core = getattr(cfg.policy, "rnn", RecurrentCoreConfig())
        return {**base, "class_name": "RNNModel", "rnn_type": core.core, "rnn_hidden_dim": core.hidden,
                "rnn_num_layers": core.num_layers}

    return {
        "num_steps_per_env": p.steps_per_env, "save_interval": 10**9, "check_for_nan": check_for_nan,
        "torch_compile_mode": compile_mode, "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "algorithm": {"class_name": "PPO", "learning_rate": p.learning_rate, "num_learning_epochs": p.num_epochs,
                      "num_mini_batches": p.num_minibatches, "desired_kl": p.desired_kl,
                      "schedule": "adaptive" if p.schedule == "adaptive" else "fixed",
                      "gamma": p.gamma, "lam": p.lam, "clip_param": p.clip_param, "value_loss_coef": p.value_loss_coef,
                      "use_clipped_value_loss": p.clipped_value_loss, "entropy_coef": p.entropy_coef,
                      "max_grad_norm": p.max_grad_norm, "optimizer": "adam",
                      "rnd_cfg": rsl_rl_rnd(cfg.rnd) if cfg.rnd.enabled else None},
        "actor": {**model(cfg.policy.actor_hidden),
                  "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": cfg.policy.init_std,
                                       "std_type": "log"}},
        "critic": model(cfg.policy.critic_hidden),
    }


class RslRlRun:
    """An OnPolicyRunner on the syncfree env, with its console output and checkpoint files suppressed."""

    def __init__(self, cfg, variant: dict, log_root: Path) -> None:
        from rsl_rl.runners import OnPolicyRunner

        torch.manual_seed(cfg.seed)
        env = make_env(cfg.task, cfg.env.num_envs, resolve_device(cfg.device), cfg.seed)
        env.compile_step(lambda fn: hot(fn, PerfConfig(compile="step"), env.device))  # the env syncfree steps, too
        self.env = SyncfreeToRslRl(env)
        self.env.unwrapped = types.SimpleNamespace(step_dt=1.0)  # read by rsl_rl's RND: its weight as configured
        log_dir = str(log_root / f"rsl_rl-{len(list(log_root.iterdir()))}") if variant["logger"] else None
        train_cfg = rsl_rl_config(cfg, variant["check_for_nan"], variant["compile"])
        if cfg.symmetry.active():
            train_cfg["algorithm"]["symmetry_cfg"] = rsl_rl_symmetry(cfg.symmetry, self.env)
        with contextlib.redirect_stdout(io.StringIO()):
            self.runner = OnPolicyRunner(self.env, train_cfg, log_dir=log_dir, device=str(env.device))
        self.runner.save = lambda *args, **kwargs: None  # no checkpoint files inside the timed region
        self.steps_per_iteration = cfg.ppo.steps_per_env * cfg.env.num_envs

    def learn(self, iterations: int) -> float:
        """Seconds per iteration."""
        sync(self.env.device)
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            self.runner.learn(num_learning_iterations=iterations)
        sync(self.env.device)
        return (time.perf_counter() - start) / iterations

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.runner.alg.actor.parameters()) + sum(
            p.numel() for p in self.runner.alg.critic.parameters())

    def count_iteration(self) -> dict[str, float]:
        """Ops and host syncs per rollout step on the trainer side (act, NaN check, storage, logger)."""
        import rsl_rl.runners.on_policy_runner as runner_module

        counts: dict[str, Counts] = {}

        def counted(name: str, fn: Callable) -> Callable:
            def wrapper(*args, **kwargs):
                with count_syncs() as c:
                    out = fn(*args, **kwargs)
                total = counts.setdefault(name, Counts())
                total.ops.update(c.ops)
                total.host_reads.update(c.host_reads)
                total.sync_ops.update(c.sync_ops)
                return out
            return wrapper

        alg, logger = self.runner.alg, self.runner.logger
        patches = [(alg, "act"), (alg, "process_env_step"), (logger, "process_env_step"), (alg, "update"),
                   (alg, "compute_returns"), (runner_module, "check_nan")]
        originals = [getattr(obj, name) for obj, name in patches]
        for (obj, name), fn in zip(patches, originals, strict=True):
            setattr(obj, name, counted(f"{getattr(obj, '__name__', type(obj).__name__)}.{name}", fn))
        try:
            self.learn(1)
        finally:
            for (obj, name), fn in zip(patches, originals, strict=True):
                setattr(obj, name, fn)
        steps = self.runner.cfg["num_steps_per_env"]
        per_step = [c for name, c in counts.items() if not name.endswith(("update", "compute_returns"))]
        return {"trainer_ops_per_step": sum(c.num_ops for c in per_step) / steps,
                "syncs_per_step": sum(c.syncs for c in per_step) / steps,
                "ops_per_step_by_part": {name: c.num_ops / steps for name, c in counts.items()
                                         if not name.endswith(("update", "compute_returns"))},
                "ops_per_iteration_update": counts["PPO.update"].num_ops if "PPO.update" in counts else None}


class SyncfreeRun:
    def __init__(self, cfg) -> None:
        self.trainer = Runner(cfg)
        self.steps_per_iteration = cfg.ppo.steps_per_env * cfg.env.num_envs

    def learn(self, iterations: int) -> float:
        return time_iterations(self.trainer, iterations)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.trainer.policy.parameters())

    def count_iteration(self) -> dict[str, float]:
        c = count_iteration(self.trainer)
        return {"trainer_ops_per_step": c["trainer_ops_per_step"], "syncs_per_step": c["syncs_per_step"],
                "ops_per_step_by_part": {k: v["ops"] / self.trainer.cfg.ppo.steps_per_env
                                         for k, v in c["phases"].items() if k in ("act", "store", "normalizer", "stats")}}


def run_size(num_envs: int, args: argparse.Namespace, log_root: Path) -> dict:
    runs: dict[str, SyncfreeRun | RslRlRun] = {}
    bench = BenchConfig(task=args.task, device=args.device)
    rnd = RND if args.rnd else RNDConfig()
    symmetry = SYMMETRY if args.symmetry else SymmetryConfig()
    for name, perf in SYNCFREE_VARIANTS.items():
        if name in args.syncfree_variants:
            runs[name] = SyncfreeRun(dataclasses.replace(train_config(bench, num_envs, perf), rnd=rnd,
                                                         symmetry=symmetry))
    cfg = dataclasses.replace(train_config(BenchConfig(task=args.task, device=args.device), num_envs, PerfConfig()),
                              rnd=rnd, symmetry=symmetry)
    for name in args.rsl_variants:
        runs[name] = RslRlRun(cfg, RSL_VARIANTS[name], log_root)
    params = {name: run.parameter_count() for name, run in runs.items()}
    assert len(set(params.values())) == 1, f"different networks: {params}"
    steps = {run.steps_per_iteration for run in runs.values()}
    assert len(steps) == 1, "different env steps per iteration"
    warm = {}
    for name, run in runs.items():
        start = time.perf_counter()
        run.learn(args.warmup)
        warm[name] = time.perf_counter() - start
        print(f"  {num_envs} envs: warmed up {name} ({warm[name]:.1f} s)", file=sys.stderr)
    floor = Floor(bench, num_envs)
    iterations = max(args.iterations, math.ceil(args.min_seconds / next(iter(runs.values())).learn(1)))
    times: dict[str, list[float]] = {name: [] for name in runs}
    floors = []
    for r in range(args.repeats):
        for name, run in runs.items():
            times[name].append(run.learn(iterations))
        floors.append(floor.measure())
        print(f"  {num_envs} envs: repeat {r + 1}/{args.repeats} done", file=sys.stderr)
    floor_seconds = {key: statistics.median(f[key] for f in floors) for key in floors[0]}
    rows = {}
    for name, run in runs.items():
        sps = [steps.copy().pop() / t for t in times[name]]
        rows[name] = {"steps_per_s": {"median": statistics.median(sps), "min": min(sps), "max": max(sps)},
                      "seconds_per_iteration": times[name], "warmup_seconds": warm[name],
                      "efficiency": floor_seconds["total"] / statistics.median(times[name]), **run.count_iteration()}
    return {"num_envs": num_envs, "steps_per_iteration": steps.pop(), "parameters": params.popitem()[1],
            "iterations_per_measurement": iterations, "floor_seconds": floor_seconds, "runs": rows}


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = ["# syncfree vs rsl_rl, side by side", "",
             f"Machine: {m['device']}{' (' + m['gpu'] + ')' if 'gpu' in m else ''}, {m['processor']}, {m['cpu_count']} "
             f"cores, torch {m['torch']} with {m['torch_threads']} thread(s), Python {m['python']}; rsl-rl-lib "
             f"{result['rsl_rl_version']}. Task `{result['task']}`, {result['ppo']['steps_per_env']} steps x "
             f"{result['ppo']['num_epochs']} epochs x {result['ppo']['num_minibatches']} minibatches, "
             f"{result['repeats']} interleaved repeats after warm-up"
             f"{'; random network distillation on every trainer: ' + str(result['rnd']) if result.get('rnd') else ''}"
             f"{'; symmetry on every trainer: ' + str(result['symmetry']) if result.get('symmetry') else ''}.",
             "",
             "Ops and syncs per step are the trainer's side of a rollout step (act, storage, normalizer, statistics, "
             "NaN check, logger), counted in one untimed iteration; the env's own ops are excluded. Compiled code is "
             "counted run eagerly (the counters cannot see inside a graph). Efficiency = compute floor time / "
             "measured time. Warm-up includes compile time (graphs compiled at an earlier size are not reused: "
             "shapes are static).", ""]
    for size in result["sizes"]:
        runs = size["runs"]
        same_work = [n for n in runs if n.startswith("rsl_rl") and n != "rsl_rl no logger"]
        best = max(same_work, key=lambda n: runs[n]["steps_per_s"]["median"]) if same_work else None
        lines += [f"## {size['num_envs']} envs ({size['steps_per_iteration']:,} steps per iteration, "
                  f"{size['parameters']:,} parameters, {size.get('iterations_per_measurement', result['iterations'])} "
                  "iterations per measurement)", "",
                  f"Compute floor (env-only + compiled policy-forward-only + update-only loops, median of repeats): "
                  f"{size['steps_per_iteration'] / size['floor_seconds']['total']:,.0f} steps/s.", "",
                  "| trainer | steps/s median (min–max) | × rsl_rl best | efficiency | trainer ops/step | syncs/step "
                  "| warm-up s |",
                  "|---|---|---|---|---|---|---|"]
        for name, row in runs.items():
            s = row["steps_per_s"]
            ratio = s["median"] / runs[best]["steps_per_s"]["median"] if best else float("nan")
            lines.append(f"| {name} | {s['median']:,.0f} ({s['min']:,.0f}–{s['max']:,.0f}) | {ratio:.2f} | "
                         f"{row['efficiency']:.2f} | {row['trainer_ops_per_step']:.0f} | {row['syncs_per_step']:g} | "
                         f"{row['warmup_seconds']:.1f} |")
        if best:
            lines += ["", f"rsl_rl best (same work: episode statistics kept): `{best}`."]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="point-mass")
    parser.add_argument("--num_envs", type=int, nargs="+", default=[64, 4096])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=2, help="timed iterations per repeat (at least)")
    parser.add_argument("--min_seconds", type=float, default=1.0,
                        help="each measurement runs at least this long, judged from syncfree optimized's speed")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first (compilation happens here)")
    parser.add_argument("--rsl_variants", nargs="*", default=list(RSL_VARIANTS), choices=list(RSL_VARIANTS))
    parser.add_argument("--syncfree_variants", nargs="+", default=list(SYNCFREE_VARIANTS),
                        choices=list(SYNCFREE_VARIANTS))
    parser.add_argument("--rnd", action="store_true", help="random network distillation on every trainer (`RND`)")
    parser.add_argument("--symmetry", action="store_true",
                        help="symmetry augmentation and mirror loss on every trainer (`SYMMETRY`)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import importlib.metadata

    device = str(resolve_device(args.device))
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        sizes = [run_size(n, args, Path(tmp)) for n in args.num_envs]
    cfg = train_config(BenchConfig(task=args.task), args.num_envs[0], PerfConfig())
    result = {"task": args.task, "machine": machine_info(device), "rsl_rl_version": importlib.metadata.version("rsl-rl-lib"),
              "ppo": vars(cfg.ppo), "rnd": dataclasses.asdict(RND) if args.rnd else None,
              "symmetry": dataclasses.asdict(SYMMETRY) if args.symmetry else None, "repeats": args.repeats, "iterations": args.iterations, "sizes": sizes,
              "wall_seconds": time.time() - started}
    out = Path(args.out or f"benchmarks/results/side_by_side_rsl_rl-{device.replace(':', '')}")
    save_results(out, result, markdown(result), show=True)


if __name__ == "__main__":
    main()
