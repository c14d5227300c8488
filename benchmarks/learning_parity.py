"""Learning parity: syncfree against rsl_rl 5.5.1 and against CleanRL's published PPO, at equal env steps, over seeds.

    python benchmarks/learning_parity.py --tasks pendulum point-mass --seeds 0 1 2 3 4
    python benchmarks/learning_parity.py --tasks gym:Hopper-v5 gym:HalfCheetah-v5 --seeds 0 1 2 3 4

Learners, each on the task's preset (`syncfree train --task T`: env count, rollout, networks, PPO settings):

- `syncfree`: the preset as a user gets it (optimized switches, the preset's compile setting);
- `syncfree-baseline`: the same with every perf switch at its baseline (`PerfConfig.preset("baseline")`: eager,
  the conventional code paths);
- `syncfree-eager`: the optimized preset with `perf.compile=off` (which of the optimized switches that change
  arithmetic moves learning: compile, or the rest);
- `syncfree-bf16`: the optimized preset with `perf.autocast=bf16`;
- `rsl_rl`: rsl_rl's `OnPolicyRunner` on the same syncfree task through `SyncfreeToRslRl`, with the preset's
  network sizes and PPO hyperparameters (`side_by_side_rsl_rl.rsl_rl_config`; rsl_rl clips the actor's and the
  critic's gradients separately, adapts its learning rate after every minibatch, has no reward normalization and
  no compile: where a preset sets `grad_clip`, `kl_adapt_every` or `normalize_rewards` otherwise, rsl_rl runs
  without them; a linear schedule it runs at a fixed rate);
- `rsl_rl-reward-norm`: the same, its env's rewards passed through syncfree's `RewardScale` (Gym's
  `NormalizeReward` and a ±10 clip: the wrappers CleanRL puts on its MuJoCo envs), for presets that normalize
  rewards. Evaluation plays the unwrapped env, in its own units;
- `syncfree-recurrent`: the preset with `policy.kind=recurrent` (the recurrent MLP policy: an LSTM of 256 before
  each network's MLP, rsl_rl's `RNNModel` default, trained on one BPTT segment per env's rollout);
- `rsl_rl-rnn`: rsl_rl's runner with `RNNModel` actor and critic of the same sizes (continuous actions only:
  rsl_rl's distributions are Gaussian);
- `syncfree-sac`, `syncfree-td3`: the task's SAC or TD3 preset (`--algorithm sac`) at the study's env count with
  the study's `OffPolicyRun` settings, for as many iterations as it says (chosen so that a run takes about PPO's
  training time on the machine the study names) or `--iterations`: the wall-clock comparison, where the report adds
  each learner's return at `syncfree`'s mean training time (its last evaluation by then: give the learners at least
  PPO's time).

Every `--eval_every` iterations (and after the last) training pauses and the deterministic policy (the action
distribution's mean) plays one episode on each of `eval_envs` fresh envs seeded 1000 + seed; the figure is the mean
of those returns, and a run's final return the mean of its figures over the last 10 % of its env steps. Evaluation
time is not counted in the wall clock. For the Gymnasium tasks the run also records
syncfree's training return (the mean of the last 100 finished episodes of the stochastic policy), the figure CleanRL
publishes.

Each (task, learner, seed) runs in its own process on one thread and writes `runs/<task>/<learner>-seed<S>.json`
under `--out` (with `cpu_bf16`: whether the CPU has bfloat16 instructions, where the optimized preset's
`autocast=auto` turns bfloat16 on); a finished run is read back, so a stopped study resumes. Writes `README.md`,
`result.json` and one PNG per task (mean and 95 % t-interval band over seeds, against env steps and against
training seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEARNERS = ("syncfree", "syncfree-baseline", "syncfree-eager", "syncfree-bf16", "rsl_rl", "rsl_rl-reward-norm",
            "syncfree-recurrent", "rsl_rl-rnn", "syncfree-sac", "syncfree-td3")
OFF_POLICY = {"syncfree-sac": "sac", "syncfree-td3": "td3"}
EVAL_SEED = 1000
DEFAULT_OUT = "benchmarks/results/learning-parity-cpu"


@dataclass(frozen=True)
class Reference:
    """A published figure: mean and spread of the final training return."""

    source: str
    mean: float
    spread: float


@dataclass(frozen=True)
class OffPolicyRun:
    """How the off-policy learners run a study: their own iteration count and evaluation interval, and `settings`
    (dotted keys, `{"sac.batch_size": 256}`; `ALGO.` is SAC's or TD3's section) on the task's preset for them."""

    iterations: int
    eval_every: int
    settings: tuple[tuple[str, Any], ...] = ()

    def values(self, algorithm: str) -> dict[str, Any]:
        return in_section(self.settings, algorithm)


def in_section(settings: Sequence[tuple[str, Any]], algorithm: str) -> dict[str, Any]:
    """(key, value) pairs as dotted keys of `algorithm`'s config, `ALGO.` naming its own section."""
    return {key.replace("ALGO.", f"{algorithm}."): value for key, value in settings}


@dataclass(frozen=True)
class Study:
    iterations: int
    eval_every: int
    eval_envs: int
    reference: Reference | None = None
    num_envs: int | None = None
    """Training envs, when not the preset's (a CPU-sized configuration)."""
    off_policy: OffPolicyRun | None = None
    """How `syncfree-sac` and `syncfree-td3` run it (None: they do not)."""


CLEANRL = ("CleanRL `ppo_continuous_action.py`, {env}-v4, 1M steps, 3 seeds: mean ± std of the average episodic "
           "training return, openrlbenchmark tag pr-424, table in CleanRL's docs/benchmark/ppo_continuous_action.md")
STUDIES = {
    "pendulum": Study(iterations=300, eval_every=10, eval_envs=64),
    "cartpole-continuous": Study(iterations=150, eval_every=10, eval_envs=64),
    "point-mass": Study(iterations=50, eval_every=5, eval_envs=256),
    # 100 iterations x 256 envs x 24 steps = 614,400 env steps (the preset's 4,096 envs are a GPU's size); SAC and TD3
    # at the same 256 envs, PPO's networks, 1 gradient step of 256 per iteration of 256 env steps (a replay ratio of
    # 1, as Stable-Baselines3's), 1,024 env steps at random first, 3,500 iterations (about PPO's 350 s on a 2-core
    # AMD EPYC, one thread, compiling included)
    "g1-track": Study(iterations=100, eval_every=10, eval_envs=64, num_envs=256, off_policy=OffPolicyRun(
        3500, 350, (("ALGO.batch_size", 256), ("ALGO.updates_per_iteration", 1), ("ALGO.buffer_size", 262_144),
                    ("ALGO.learning_starts", 1024), ("policy.critic_hidden", [512, 256, 128]),
                    ("ALGO.pre_tanh_penalty", 0.0)))),
    # mjlab's G1 velocity task (MuJoCo Warp on one CPU thread: about 400 env steps/s at 128 envs, the env most of a
    # PPO iteration): PPO's preset at 128 envs, 60 iterations x 128 envs x 24 steps = 184,320 env steps; SAC and TD3
    # at the same 128 envs, PPO's networks, 1 step of every env and 4 gradient steps of 512 per iteration (FastSAC's
    # 4 steps per iteration, a replay ratio of 16), 1,280 env steps at random first, 1,440 iterations (about PPO's
    # time on a 2-core AMD EPYC, one thread; run in mjlab's virtual environment). Both studies keep the actor's loss
    # without the pre-tanh penalty the presets now carry, as they ran (`--set ALGO.pre_tanh_penalty=0.01` adds it)
    "mjlab:Mjlab-Velocity-Flat-Unitree-G1": Study(iterations=60, eval_every=20, eval_envs=16, num_envs=128,
                                                  off_policy=OffPolicyRun(1440, 480, (
        ("ALGO.batch_size", 512), ("ALGO.updates_per_iteration", 4), ("ALGO.buffer_size", 131_072),
        ("ALGO.learning_starts", 1280), ("policy.critic_hidden", [512, 256, 128]),
        ("ALGO.pre_tanh_penalty", 0.0)))),
    # 488 iterations x 16 envs x 128 steps = 999,424 env steps (CleanRL: 488 x 2,048)
    "gym:Hopper-v5": Study(488, 24, 8, Reference(CLEANRL.format(env="Hopper"), 2382.86, 271.74)),
    "gym:HalfCheetah-v5": Study(488, 24, 8, Reference(CLEANRL.format(env="HalfCheetah"), 1442.64, 46.03)),
}
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
"""Student's t 97.5 % quantiles by degrees of freedom (1.96 beyond)."""


# ---------------------------------------------------------------------------------------------------------------
# One run (its own process)


def study_of(task: str, learner: str = "syncfree", iterations: int | None = None) -> Study:
    """The task's study as `learner` runs it (an off-policy learner: its own iterations, or `iterations` where given
    (`--iterations`), and its own evaluation interval); `SYNCFREE_PARITY_ITERATIONS=N` shortens it to N iterations,
    evaluated every 2 (a smoke run of the script itself)."""
    study, short = STUDIES[task], int(os.environ.get("SYNCFREE_PARITY_ITERATIONS", "0"))
    if learner in OFF_POLICY:
        if study.off_policy is None:
            raise SystemExit(f"learning_parity: the {task} study has no off-policy runs (Study.off_policy)")
        study = dataclasses.replace(study, iterations=iterations or study.off_policy.iterations,
                                    eval_every=study.off_policy.eval_every)
    return dataclasses.replace(study, iterations=short, eval_every=2, eval_envs=min(study.eval_envs, 8)) if short \
        else study


def eval_points(study: Study) -> list[int]:
    """The iterations after which the policy is evaluated."""
    points = list(range(study.eval_every, study.iterations + 1, study.eval_every))
    return points if points and points[-1] == study.iterations else [*points, study.iterations]


class ScaledRewards:
    """An rsl_rl `VecEnv` whose rewards pass through `RewardScale` (the `rsl_rl-reward-norm` learner)."""

    def __init__(self, env, gamma: float) -> None:
        from syncfree.policy.normalizer import RewardScale

        self.env, self.scale = env, RewardScale(env.num_envs, gamma).to(env.device)

    def step(self, actions):
        obs, rewards, dones, extras = self.env.step(actions)
        return obs, self.scale(rewards, dones.bool()), dones, extras

    def __getattr__(self, name: str):
        return getattr(self.env, name)


class RslRlActor:
    """An rsl_rl inference policy seen as syncfree's `evaluate` expects a policy."""

    def __init__(self, policy) -> None:
        self.policy = policy

    def actor_input(self, obs):
        from tensordict import TensorDict

        return TensorDict(dict(obs), batch_size=[next(iter(obs.values())).shape[0]])

    def act_deterministic(self, obs):
        return self.policy(obs)

    def reset(self) -> None:
        """A recurrent policy starts from the zero state (after training it holds its rollout's)."""
        self.policy.reset()


def learner_config(task: str, learner: str, seed: int, extra: Sequence[str] = (), iterations: int | None = None):
    """The config a syncfree learner trains the task's study with: its preset, the study's settings and `extra`
    (`--set`, the off-policy learners'; `iterations`, theirs by `--iterations`), validated (a misspelt key or a bad
    value is `UserError`'s one line)."""
    from syncfree.config import with_values
    from syncfree.tasks import preset, with_algorithm

    study, cfg = study_of(task, learner, iterations), preset(task, algorithm=OFF_POLICY.get(learner))
    if learner in OFF_POLICY and study.off_policy is not None:
        cfg = with_values(cfg, study.off_policy.values(OFF_POLICY[learner]))
        if extra:
            cfg = with_values(cfg, in_section(parse_set(extra), OFF_POLICY[learner]))
    if learner == "syncfree-recurrent":
        cfg = with_algorithm(cfg, "recurrent-ppo")
    cfg.seed, cfg.device, cfg.iterations, cfg.log.progress = seed, "cpu", study.iterations, False
    cfg.env.num_envs = study.num_envs or cfg.env.num_envs
    cfg.validate()
    return cfg


def train_one(task: str, learner: str, seed: int, extra: Sequence[str] = (), iterations: int | None = None) -> dict:
    import torch

    from syncfree.algo import FeedForwardPPO, algorithm_for
    from syncfree.core.switches import PerfConfig
    from syncfree.policy.actor_critic import native_bf16
    from syncfree.tasks import make_env

    torch.set_num_threads(1)
    study, cfg = study_of(task, learner, iterations), learner_config(task, learner, seed, extra, iterations)
    if learner == "syncfree-baseline":
        cfg.perf = PerfConfig.preset("baseline")
    elif learner == "syncfree-eager":
        cfg.perf.compile = "off"
    elif learner == "syncfree-bf16":
        cfg.perf.autocast = "bf16"

    def fresh_return(policy) -> float:
        if isinstance(policy, RslRlActor):
            policy.reset()
        algorithm = FeedForwardPPO if isinstance(policy, RslRlActor) else algorithm_for(cfg)
        returns = algorithm.evaluate(policy, make_env(task, study.eval_envs, seed=EVAL_SEED + seed))
        return float(returns.mean())

    points, seconds = [], 0.0
    if learner.startswith("rsl_rl"):
        import contextlib
        import io

        from rsl_rl.runners import OnPolicyRunner
        from side_by_side_rsl_rl import rsl_rl_config

        from syncfree.envs.adapters.rsl_rl import SyncfreeToRslRl

        torch.manual_seed(seed)
        env = SyncfreeToRslRl(make_env(task, cfg.env.num_envs, seed=seed))
        if learner == "rsl_rl-reward-norm":
            env = ScaledRewards(env, cfg.ppo.gamma)
        with contextlib.redirect_stdout(io.StringIO()):  # rsl_rl prints its models and every iteration
            runner = OnPolicyRunner(env, rsl_rl_config(cfg, check_for_nan=False, compile_mode=None,
                                                       rnn=learner == "rsl_rl-rnn"), log_dir=None, device="cpu")
        done = 0
        for it in eval_points(study):
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                runner.learn(num_learning_iterations=it - done)
            seconds += time.perf_counter() - start
            done = it
            steps = it * cfg.env.num_envs * cfg.ppo.steps_per_env
            points.append({"iteration": it, "env_steps": steps, "seconds": seconds,
                           "eval_return": fresh_return(RslRlActor(runner.get_inference_policy())),
                           "learning_rate": float(runner.alg.learning_rate)})
    else:
        from syncfree.train.runner import Runner

        runner = Runner(cfg)
        for it in eval_points(study):
            start = time.perf_counter()
            record = runner.learn(until=it)
            seconds += time.perf_counter() - start
            points.append({"iteration": it, "env_steps": runner.env_steps, "seconds": seconds,
                           "eval_return": fresh_return(runner.policy),
                           "train_return": record.get("mean_return", math.nan),
                           "learning_rate": record.get("learning_rate", math.nan)})
        runner.close()
    applied = list(extra) if learner in OFF_POLICY else []  # `--set` and `--iterations` are the off-policy learners'
    own_iterations = iterations if learner in OFF_POLICY else None
    return {"task": task, "learner": learner, "seed": seed, "threads": 1, "torch": torch.__version__, "set": applied,
            "iterations_set": own_iterations,
            "cpu_bf16": native_bf16(torch.device("cpu")), "points": points}


def run_path(out: Path, task: str, learner: str, seed: int) -> Path:
    return out / "runs" / task.replace(":", "_") / f"{learner}-seed{seed}.json"


def parse_set(items: Sequence[str]) -> list[tuple[str, Any]]:
    """`KEY=VALUE` items (VALUE read as YAML: `256`, `unit`, `[512, 256]`) as (key, value) pairs."""
    import yaml

    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"learning_parity: --set {item!r}: expected KEY=VALUE")
        pairs.append((key, yaml.safe_load(value)))
    return pairs


def launch(out: Path, task: str, learner: str, seed: int, extra: Sequence[str] = (),
           iterations: int | None = None) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    log = run_path(out, task, learner, seed).with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, __file__, "--one", task, learner, str(seed), "--out", str(out)]
    command += ["--iterations", str(iterations)] if iterations else []
    return subprocess.Popen(command + (["--set", *extra] if extra else []), env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


# ---------------------------------------------------------------------------------------------------------------
# The report


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % t-interval over seeds."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, T_975.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def curve(runs: list[dict], key: str) -> list[tuple[float, float, float, float]]:
    """(env steps, mean seconds, mean, CI half-width) over seeds at each evaluation."""
    rows = []
    for i, point in enumerate(runs[0]["points"]):
        values = [r["points"][i][key] for r in runs]
        mean, half = mean_ci(values)
        rows.append((point["env_steps"], statistics.fmean(r["points"][i]["seconds"] for r in runs), mean, half))
    return rows


def final(run: dict, key: str = "eval_return") -> float:
    """The run's final figure: the mean of its evaluations over the last 10 % of its env steps (one evaluation
    snapshot of a policy that still oscillates says little)."""
    last = run["points"][-1]["env_steps"]
    values = [p[key] for p in run["points"] if p["env_steps"] >= 0.9 * last]
    return statistics.fmean(values)


def at_seconds(run: dict, seconds: float) -> float:
    """The run's return at `seconds` of training: its last evaluation at or before them (NaN if none)."""
    before = [p["eval_return"] for p in run["points"] if p["seconds"] <= seconds]
    return before[-1] if before else math.nan


def reach(rows: list[tuple[float, float, float, float]], threshold: float) -> tuple[float, float] | None:
    """Env steps and seconds at the first evaluation whose seed mean is at least `threshold`."""
    return next(((steps, seconds) for steps, seconds, mean, _ in rows if mean >= threshold), None)


def plot_task(task: str, by_learner: dict[str, list[dict]], reference: Reference | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for learner, runs in by_learner.items():
        rows = curve(runs, "eval_return")
        steps, seconds, mean, half = (list(c) for c in zip(*rows, strict=True))
        for ax, x in zip(axes, (steps, seconds), strict=True):
            line = ax.plot(x, mean, label=f"{learner} ({len(runs)} seeds)")[0]
            ax.fill_between(x, [m - h for m, h in zip(mean, half, strict=True)],
                            [m + h for m, h in zip(mean, half, strict=True)], color=line.get_color(), alpha=0.2)
    if reference is not None:
        for ax in axes:
            ax.axhline(reference.mean, color="grey", linestyle="--", label="CleanRL PPO, published (training return)")
    axes[0].set_xlabel("env steps")
    axes[1].set_xlabel("training seconds (1 thread, evaluation excluded)")
    axes[0].set_ylabel("deterministic return")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{task}: mean and 95 % t-interval over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(out: Path) -> str:
    """Every task and learner with finished runs under `out`."""
    from rsl_rl_adapter_parity import bootstrap_ci

    lines = ["# Learning parity", "",
             "`python benchmarks/learning_parity.py --tasks TASK ... --learners LEARNER ... --seeds 0 1 2 3 4` "
             "(the commands of each table are below it). Each run: the task's preset, one thread, its own process. "
             "The figure is the deterministic policy's return on fresh envs (seeded 1000 + seed); a run's final "
             "return is the mean of its evaluations over the last 10 % of its env steps; tables give the mean over "
             "the seeds with the half-width of its 95 % t-interval; differences are bootstrap 95 % intervals of the "
             "difference of means (10,000 resamples). "
             "Wall clock: training seconds only, evaluation excluded.", ""]
    summary = {}
    out_flag = "" if out == Path(DEFAULT_OUT) else f" --out {out}"
    for task in STUDIES:
        study, by_learner = study_of(task), {}
        for learner in LEARNERS:
            paths = sorted(run_path(out, task, learner, 0).parent.glob(f"{learner}-seed*.json"),
                           key=lambda p: int(p.stem.rsplit("seed", 1)[1]))
            if paths:
                by_learner[learner] = [json.loads(p.read_text()) for p in paths]
        if not by_learner:
            continue
        finals = {learner: [final(r) for r in runs] for learner, runs in by_learner.items()}
        small = max(abs(v) for values in finals.values() for v in values) < 100  # g1-track's returns of tens
        digits, seed_digits = (2, 2) if small else (1, 0)
        totals = {learner: statistics.fmean(r["points"][-1]["seconds"] for r in runs)
                  for learner, runs in by_learner.items()}
        threshold, threshold_name = None, ""
        if "rsl_rl" in finals:
            threshold, threshold_name = statistics.fmean(finals["rsl_rl"]), "rsl_rl's final mean"
        seeds = sorted({r["seed"] for runs in by_learner.values() for r in runs})
        off_policy = [learner for learner in by_learner if learner in OFF_POLICY]
        set_flag = ""
        on_policy = [learner for learner in by_learner if learner not in OFF_POLICY]
        lines += [f"## {task}", ""]
        if on_policy:
            steps = by_learner[on_policy[0]][0]["points"][-1]["env_steps"]
            lines.append(f"{study.iterations} iterations = {steps:,} env steps; evaluation every {study.eval_every} "
                         f"iterations on {study.eval_envs} envs.")
        if off_policy:
            own = study_of(task, off_policy[0])
            last = by_learner[off_policy[0]][0]["points"][-1]
            steps, done = last["env_steps"], last["iteration"]
            extra = by_learner[off_policy[0]][0].get("set", [])
            set_flag = f" --set {' '.join(map(shlex.quote, extra))}" if extra else ""  # as a shell reads it
            chosen = by_learner[off_policy[0]][0].get("iterations_set")
            set_flag = (f" --iterations {chosen}" if chosen else "") + set_flag
            chosen_settings = dict(study.off_policy.settings if study.off_policy else ())
            chosen_settings.update(parse_set(extra))  # `--set` overrides the study's own
            settings = ", ".join(f"`{k}={v}`" for k, v in chosen_settings.items())
            lines.append(f"{', '.join(off_policy)}: the preset for the learner with {settings} (`ALGO` its section); "
                         f"{done} iterations = {steps:,} env steps; evaluation every "
                         f"{by_learner[off_policy[0]][0]['points'][0]['iteration']} iterations on {own.eval_envs} envs.")
        lines += [f"Rerun: `python benchmarks/learning_parity.py --tasks {task} --learners {' '.join(by_learner)} "
                  f"--seeds {' '.join(map(str, seeds))}{out_flag}{set_flag}`.", "", f"![{task}]({plot_name(task)})", ""]
        header = "| learner | seeds | final return | per seed | training s |"
        if threshold is not None:
            header += f" reaches {threshold_name} ({threshold:.{digits}f}): env steps, s, × rsl_rl's total s |"
        lines += [header, "|" + "---|" * (header.count("|") - 1)]
        task_summary = {}
        for learner, values in finals.items():
            mean, half = mean_ci(values)
            row = (f"| {learner} | {len(values)} | {mean:.{digits}f} ± {half:.{digits}f} | "
                   f"{', '.join(f'{v:.{seed_digits}f}' for v in values)}"
                   f" | {totals[learner]:.0f} |")
            got = None
            if threshold is not None:
                got = reach(curve(by_learner[learner], "eval_return"), threshold)
                row += (" not reached |" if got is None else
                        f" {got[0]:,.0f}, {got[1]:.0f}, {got[1] / totals['rsl_rl']:.2f} |")
            lines.append(row)
            task_summary[learner] = {"final_mean": mean, "ci_half": half, "per_seed": values,
                                     "training_seconds": totals[learner], "reach": got}
        lines.append("")
        for a, b in (("syncfree", "rsl_rl"), ("syncfree", "rsl_rl-reward-norm"), ("syncfree", "syncfree-baseline"),
                     ("syncfree-eager", "syncfree-baseline"), ("syncfree", "syncfree-eager"),
                     ("syncfree-bf16", "syncfree-baseline"), ("syncfree-bf16", "syncfree"),
                     ("syncfree-recurrent", "rsl_rl-rnn"), ("syncfree-recurrent", "syncfree")):
            if a in finals and b in finals and len(finals[a]) > 1 and len(finals[b]) > 1:
                low, high = bootstrap_ci(finals[a], finals[b])
                diff = statistics.fmean(finals[a]) - statistics.fmean(finals[b])
                verdict = "no difference detected" if low <= 0 <= high else ("higher" if low > 0 else "lower")
                lines.append(f"- {a} minus {b}: {diff:+.{digits}f}, interval [{low:+.{digits}f}, {high:+.{digits}f}]: "
                             f"{verdict}.")
                task_summary[f"{a} - {b}"] = {"difference": diff, "interval": [low, high]}
        if "syncfree" in finals and off_policy:
            budget = totals["syncfree"]
            for learner in off_policy:
                at = [at_seconds(run, budget) for run in by_learner[learner]]
                mean, half = mean_ci(at)
                line = (f"- {learner} at syncfree's mean training time ({budget:.0f} s): {mean:.{digits}f} ± "
                        f"{half:.{digits}f} (per seed {', '.join(f'{v:.{digits}f}' for v in at)})")
                if len(at) > 1 and len(finals["syncfree"]) > 1 and not any(math.isnan(v) for v in at):
                    low, high = bootstrap_ci(at, finals["syncfree"])
                    diff = statistics.fmean(at) - statistics.fmean(finals["syncfree"])
                    verdict = "no difference detected" if low <= 0 <= high else ("higher" if low > 0 else "lower")
                    line += (f"; minus syncfree's final: {diff:+.{digits}f}, interval [{low:+.{digits}f}, "
                             f"{high:+.{digits}f}]: {verdict}")
                    task_summary[f"{learner} at syncfree's time - syncfree"] = {"difference": diff,
                                                                                "interval": [low, high]}
                lines.append(line + ".")
                task_summary[learner]["at_syncfree_seconds"] = {"seconds": budget, "per_seed": at}
        if study.reference is not None and "syncfree" in by_learner:
            trained = [final(r, "train_return") for r in by_learner["syncfree"]]
            mean, half = mean_ci(trained)
            sd = statistics.stdev(trained) if len(trained) > 1 else math.nan
            ref = study.reference
            verdict = ("above the published mean" if mean >= ref.mean else
                       "within one published std below it" if mean >= ref.mean - ref.spread else
                       "below the published spread")
            lines.append(f"- syncfree's training return over the last 10 % of the steps (each point the mean of the "
                         f"last 100 episodes of the stochastic policy): mean ± std {mean:.1f} ± {sd:.1f} (95 % "
                         f"interval ± {half:.1f}; per seed {', '.join(f'{v:.0f}' for v in trained)}); published: "
                         f"{ref.mean:.1f} ± {ref.spread:.1f} ({ref.source}): {verdict}.")
            task_summary["training_return"] = {"mean": mean, "std": sd, "ci_half": half, "per_seed": trained,
                                               "published": [ref.mean, ref.spread], "verdict": verdict}
        lines.append("")
        plot_task(task, by_learner, study.reference, out / plot_name(task))
        summary[task] = task_summary
    (out / "result.json").write_text(json.dumps(summary, indent=1) + "\n")
    return "\n".join(lines)


def plot_name(task: str) -> str:
    return f"{task.replace(':', '_')}.png"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["pendulum", "point-mass"], choices=list(STUDIES))
    parser.add_argument("--learners", nargs="+", default=["syncfree", "syncfree-baseline", "rsl_rl"],
                        choices=LEARNERS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each on one thread)")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="settings of the off-policy learners beyond the study's (`ALGO.action_bounds=unit`)")
    parser.add_argument("--iterations", type=int, default=None,
                        help="iterations of the off-policy learners instead of the study's (a longer run for a "
                             "comparison at equal wall clock on a faster configuration)")
    parser.add_argument("--one", nargs=3, metavar=("TASK", "LEARNER", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    parse_set(args.set)  # a malformed item is one line before anything runs
    if args.iterations is not None and args.iterations < 1:
        parser.error(f"--iterations {args.iterations}: expected a count >= 1")
    for task in args.tasks:
        if STUDIES[task].off_policy is None and any(learner in OFF_POLICY for learner in args.learners):
            parser.error(f"the {task} study has no off-policy runs (Study.off_policy): drop "
                         f"{', '.join(learner for learner in args.learners if learner in OFF_POLICY)}")
        if args.set and not args.one:  # a misspelt key or a bad value is one line before anything runs
            from syncfree.errors import UserError

            for learner in (learner for learner in args.learners if learner in OFF_POLICY):
                try:
                    learner_config(task, learner, 0, args.set)
                except UserError as e:
                    parser.error(f"--set for {learner} on {task}: {e}")
    out = Path(args.out)
    if args.one:
        task, learner, seed = args.one
        path = run_path(out, task, learner, int(seed))
        result = train_one(task, learner, int(seed), args.set, args.iterations)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(path)
        return 0
    from tqdm import tqdm

    # seeds outermost, learners interleaved: a busy spell of the machine falls on every learner alike
    todo = [(t, learner, s) for t in args.tasks for s in args.seeds for learner in args.learners
            if not run_path(out, t, learner, s).is_file()]
    running: list[tuple[subprocess.Popen, tuple]] = []
    failed = []
    with tqdm(total=len(todo), desc="learning parity", unit="run") as bar:
        while todo or running:
            while todo and len(running) < args.jobs:
                job = todo.pop(0)
                running.append((launch(out, *job, args.set, args.iterations), job))
            time.sleep(1.0)
            for process, job in list(running):
                if process.poll() is not None:
                    running.remove((process, job))
                    if process.returncode != 0:
                        failed.append(job)
                        tqdm.write(f"failed: {job} (see {run_path(out, *job).with_suffix('.log')})")
                    bar.update(1)
    text = report(out)
    (out / "README.md").write_text(text + "\n")
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
