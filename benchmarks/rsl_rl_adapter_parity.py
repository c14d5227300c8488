"""Does rsl_rl learn as well through `SyncfreeToRslRl` as on an env written for it? Pendulum, equal env steps.

    python benchmarks/rsl_rl_adapter_parity.py --seeds 5 --iterations 30

Three learners, each for every seed, at syncfree's pendulum preset (256 envs x 32 steps, 5 epochs x 4 minibatches,
[64, 64] ELU networks, adaptive learning rate from 1e-3, gamma 0.95):

- `rsl_rl, native env`: rsl_rl's `OnPolicyRunner` on `NativePendulum` below, an rsl_rl `VecEnv` that returns new
  tensors every step (as Isaac Lab's envs do), with Pendulum-v1's dynamics (the same function syncfree's task uses);
- `rsl_rl, syncfree env`: the same runner on syncfree's `pendulum` task through the adapter;
- `syncfree`: syncfree's own trainer on the same task (compile off).

Each trained policy then acts deterministically on 64 fresh envs (seed 100 + seed) for one episode of 200 steps;
the figure is that return's mean over the 64 envs. Writes `result.json` and `README.md` to
`benchmarks/results/rsl-rl-adapter-parity-<device>/`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from rsl_rl.env import VecEnv as RslRlVecEnv
from side_by_side_rsl_rl import rsl_rl_config
from tensordict import TensorDict
from tqdm import tqdm

from syncfree.algo import FeedForwardPPO
from syncfree.envs.adapters.rsl_rl import SyncfreeToRslRl
from syncfree.envs.builtin.classic import Pendulum, pendulum_dynamics
from syncfree.tasks import make_env, preset
from syncfree.train.runner import Runner

LEARNERS = ("rsl_rl, native env", "rsl_rl, syncfree env", "syncfree")
EVAL_ENVS = 64


class NativePendulum(RslRlVecEnv):
    """Pendulum-v1 written for rsl_rl: new observation, reward and done tensors every step; time-outs in
    `extras["time_outs"]`; envs whose episode ended start a new one at once (the observation returned is the new
    episode's first)."""

    def __init__(self, num_envs: int, seed: int, device: str = "cpu") -> None:
        self.num_envs, self.num_actions, self.device, self.cfg = num_envs, 1, torch.device(device), {}
        self.max_episode_length = Pendulum.default_max_episode_length
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.state = self._initial(num_envs)

    def _initial(self, n: int) -> torch.Tensor:
        high = torch.tensor([torch.pi, 1.0], device=self.device)
        return (torch.rand(n, 2, generator=self.generator, device=self.device) * 2 - 1) * high

    def _obs(self) -> TensorDict:
        th, thdot = self.state.unbind(-1)
        obs = torch.stack((torch.cos(th), torch.sin(th), thdot), dim=-1)
        return TensorDict({"policy": obs, "critic": obs}, batch_size=[self.num_envs], device=self.device)

    def get_observations(self) -> TensorDict:
        return self._obs()

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        self.state, reward = pendulum_dynamics(self.state, Pendulum.max_torque * actions[:, 0].clamp(-1.0, 1.0))
        self.episode_length_buf += 1
        time_outs = self.episode_length_buf >= self.max_episode_length
        self.state = torch.where(time_outs.unsqueeze(-1), self._initial(self.num_envs), self.state)
        self.episode_length_buf = torch.where(time_outs, 0, self.episode_length_buf)
        return self._obs(), reward, time_outs, {"time_outs": time_outs}


def deterministic_return(act, seed: int) -> float:
    """Mean first-episode return of `act` (TensorDict -> actions) on `EVAL_ENVS` fresh syncfree pendulums."""
    env = SyncfreeToRslRl(make_env("pendulum", EVAL_ENVS, seed=100 + seed))
    obs, total = env.get_observations(), torch.zeros(EVAL_ENVS)
    ended = torch.zeros(EVAL_ENVS, dtype=torch.bool)
    with torch.inference_mode():
        for _ in range(env.max_episode_length):
            obs, rewards, dones, _ = env.step(act(obs))
            total += torch.where(ended, 0.0, rewards)
            ended |= dones
    return total.mean().item()


def train_rsl_rl(env: RslRlVecEnv, iterations: int, seed: int) -> float:
    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(seed)
    with contextlib.redirect_stdout(io.StringIO()):
        runner = OnPolicyRunner(env, rsl_rl_config(preset("pendulum"), check_for_nan=False, compile_mode=None),
                                log_dir=None, device="cpu")
    with contextlib.redirect_stdout(io.StringIO()):  # rsl_rl prints its models and every iteration
        runner.learn(num_learning_iterations=iterations)
    return deterministic_return(runner.get_inference_policy(), seed)


def train_syncfree(iterations: int, seed: int, grad_clip: str = "per_network") -> float:
    cfg = preset("pendulum")
    cfg.seed, cfg.iterations, cfg.device, cfg.log.progress, cfg.perf.compile = seed, iterations, "cpu", False, "off"
    cfg.ppo.grad_clip = grad_clip
    runner = Runner(cfg)
    runner.learn()
    returns = FeedForwardPPO.evaluate(runner.policy, make_env("pendulum", EVAL_ENVS, seed=100 + seed))
    return float(returns.mean())


def run(learner: str, iterations: int, seed: int, grad_clip: str) -> float:
    num_envs = preset("pendulum").env.num_envs
    if learner == "rsl_rl, native env":
        return train_rsl_rl(NativePendulum(num_envs, seed), iterations, seed)
    if learner == "rsl_rl, syncfree env":
        return train_rsl_rl(SyncfreeToRslRl(make_env("pendulum", num_envs, seed=seed)), iterations, seed)
    return train_syncfree(iterations, seed, grad_clip)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--grad_clip", default="per_network", choices=["per_network", "global"],
                        help="syncfree's ppo.grad_clip (rsl_rl clips per network)")
    parser.add_argument("--out", default="benchmarks/results/rsl-rl-adapter-parity-cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "result.json"
    result = json.loads(path.read_text()) if path.exists() else {}  # resumable: finished runs are kept
    result.update(iterations=args.iterations, env_steps=args.iterations * 256 * 32, torch=torch.__version__,
                  grad_clip=args.grad_clip)
    runs = result.setdefault("runs", {})
    todo = [(learner, seed) for seed in range(args.seeds) for learner in LEARNERS if f"{learner}/{seed}" not in runs]
    for learner, seed in tqdm(todo, desc="runs", unit="run"):
        start = time.perf_counter()
        value = run(learner, args.iterations, seed, args.grad_clip)
        runs[f"{learner}/{seed}"] = {"return": value, "seconds": time.perf_counter() - start}
        path.write_text(json.dumps(result, indent=1))
    (out / "README.md").write_text(report(result, args.seeds))
    print(report(result, args.seeds))


def bootstrap_ci(a: list[float], b: list[float], resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of mean(a) - mean(b), each resampled with replacement over its seeds."""
    rng = np.random.default_rng(seed)
    x, y = np.asarray(a), np.asarray(b)
    diffs = (rng.choice(x, (resamples, len(x))).mean(1) - rng.choice(y, (resamples, len(y))).mean(1))
    low, high = np.percentile(diffs, [2.5, 97.5])
    return float(low), float(high)


def report(result: dict, seeds: int) -> str:
    rows, means, per_seed = [], {}, {}
    for learner in LEARNERS:
        values = [result["runs"][f"{learner}/{s}"]["return"] for s in range(seeds)]
        per_seed[learner] = values
        means[learner] = statistics.mean(values)
        rows.append(f"| {learner} | {means[learner]:.1f} ± {statistics.stdev(values):.1f} | "
                    f"{min(values):.1f} .. {max(values):.1f} | {', '.join(f'{v:.0f}' for v in values)} |")
    native, adapter = means["rsl_rl, native env"], means["rsl_rl, syncfree env"]
    differences = []
    for rsl_rl in LEARNERS[:2]:
        low, high = bootstrap_ci(per_seed["syncfree"], per_seed[rsl_rl])
        differences.append(f"syncfree minus {rsl_rl}: {means['syncfree'] - means[rsl_rl]:+.1f}, 95 % bootstrap "
                           f"interval [{low:+.1f}, {high:+.1f}].")
    return "\n".join([
        "# rsl_rl through the adapter vs on a native env (pendulum)", "",
        f"{result['iterations']} iterations = {result['env_steps']:,} env steps, {seeds} seeds, torch "
        f"{result['torch']}, 1 thread. Figure: deterministic first-episode return on {EVAL_ENVS} fresh envs "
        "(higher is better; a random policy gets about -1,200 to -1,500). Rerun: `python "
        "benchmarks/rsl_rl_adapter_parity.py`.", "",
        "| learner | mean ± std over seeds | range | per seed |", "|---|---|---|---|", *rows, "",
        f"Adapter minus native: {adapter - native:+.1f} ({100 * (adapter - native) / abs(native):+.1f} % of the "
        "native return's size; positive: rsl_rl did better through the adapter).", "", *differences, ""])


if __name__ == "__main__":
    sys.exit(main())
