"""What the defaults do to your own env over a long run: four small envs of the kind a user writes first (this
file's: `Catch` and `Grid`, discrete; `Reach` and `Balance`, continuous), 500 iterations each under syncfree's
defaults for an env of your own, under rsl_rl's and under the settings compared with them, over seeds.

    python benchmarks/own_env_defaults.py [--iterations 500] [--seeds 0 1 2] [--jobs 2]

Every run is `syncfree train --task own_env_defaults:make_<env>` (the env's factory: 64 envs), in its own process,
one thread, `perf.compile=off` (the settings compared are the learner's; a compiled run learns as the eager one,
`tests/test_compile.py`). A run's curve is its logged `mean_return` per iteration (the mean over the episodes that
ended in the last iterations). Of each run: `best` (the curve's maximum), `final` (the mean of its last 10 values)
and `lost`, the share of what it learned that it lost by the end: (best - final) / (best - first), where first is
the lowest of the curve's first 10 values (the first records hold only the episodes that ended first: on `Grid`,
the untrained walker's quick arrivals). 0: it kept everything; the defaults are held to at most 0.05 (a final
return within 5 % of the best, read on what was learned, so that it means the same for negative returns).
Resumable (a finished run is read back from its folder under `--runs`). Writes
benchmarks/results/own-env-defaults-cpu/results.json and results.md."""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from tqdm import tqdm

from syncfree.envs.api import ActionSpec, TorchVecEnv

HERE = Path(__file__).resolve().parent


class Catch(TorchVecEnv):
    """A ball falls down one of 5 columns over 8 rows; the paddle below moves left, stays or moves right (3 discrete
    actions). +1 for a catch, -1 for a miss, when the ball reaches the bottom (the episode's end)."""

    state_names = ("state",)
    action_spec = ActionSpec("discrete", 3)

    def __init__(self, num_envs: int = 64, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(num_envs, device, seed, max_episode_length=16)
        self.obs_shapes = {"policy": (3,), "critic": (3,)}
        self.state = torch.zeros(num_envs, 3, device=self.device)  # ball column, ball row, paddle column

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.state[:, 2] = (self.state[:, 2] + actions.to(self.state.dtype) - 1).clamp(0, 4)
        self.state[:, 1] += 1
        landed = self.state[:, 1] >= 7
        caught = self.state[:, 0] == self.state[:, 2]
        reward = torch.where(landed, torch.where(caught, 1.0, -1.0), 0.0)
        return reward, landed

    def _initial_state(self) -> dict[str, torch.Tensor]:
        columns = self._uniform(0.0, 5.0, 2).floor().clamp(max=4)
        return {"state": torch.stack([columns[:, 0], torch.zeros_like(columns[:, 0]), columns[:, 1]], 1)}

    def _observe(self) -> dict[str, torch.Tensor]:
        obs = self.state / torch.tensor([4.0, 7.0, 4.0], device=self.device)
        return {"policy": obs, "critic": obs.clone()}


class Reach(TorchVecEnv):
    """A point in the plane moved by a velocity command in [-1, 1]^2 towards a target drawn per episode; the reward
    is minus the distance, for 100 steps."""

    state_names = ("state",)
    action_spec = ActionSpec("continuous", 2)

    def __init__(self, num_envs: int = 64, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(num_envs, device, seed, max_episode_length=100)
        self.obs_shapes = {"policy": (4,), "critic": (4,)}
        self.state = torch.zeros(num_envs, 4, device=self.device)  # position, target

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.state[:, :2] += 0.05 * actions.clamp(-1.0, 1.0)
        distance = (self.state[:, 2:] - self.state[:, :2]).norm(dim=1)
        return -distance, torch.zeros_like(distance, dtype=torch.bool)

    def _initial_state(self) -> dict[str, torch.Tensor]:
        return {"state": torch.cat([torch.zeros(self.num_envs, 2, device=self.device), self._uniform(-1, 1, 2)], 1)}

    def _observe(self) -> dict[str, torch.Tensor]:
        obs = torch.cat([self.state[:, :2], self.state[:, 2:] - self.state[:, :2]], 1)
        return {"policy": obs, "critic": obs.clone()}


class Balance(TorchVecEnv):
    """A mass on a line pushed by a force in [-1, 1], starting with a random velocity: +1 - x^2/4 per step while
    it stays within 2 of the origin (the episode ends when it leaves), for up to 200 steps."""

    state_names = ("state",)
    action_spec = ActionSpec("continuous", 1)

    def __init__(self, num_envs: int = 64, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(num_envs, device, seed, max_episode_length=200)
        self.obs_shapes = {"policy": (2,), "critic": (2,)}
        self.state = torch.zeros(num_envs, 2, device=self.device)  # position, velocity

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.state[:, 1] += 0.05 * actions[:, 0].clamp(-1.0, 1.0) + 0.01 * self.state[:, 0]
        self.state[:, 0] += 0.05 * self.state[:, 1]
        return 1 - self.state[:, 0].pow(2) / 4, self.state[:, 0].abs() > 2

    def _initial_state(self) -> dict[str, torch.Tensor]:
        return {"state": self._uniform(-1.0, 1.0, 2)}

    def _observe(self) -> dict[str, torch.Tensor]:
        return {"policy": self.state.clone(), "critic": self.state.clone()}


class Grid(TorchVecEnv):
    """A walker on a 7 x 7 grid sent to a goal cell drawn per episode (4 discrete actions; one step in 5 goes a random
    way): +1 on reaching it, -0.02 per step, at most 30 steps."""

    state_names = ("state",)
    action_spec = ActionSpec("discrete", 4)
    moves = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])

    def __init__(self, num_envs: int = 64, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(num_envs, device, seed, max_episode_length=30)
        self.obs_shapes = {"policy": (4,), "critic": (4,)}
        self.state = torch.zeros(num_envs, 4, device=self.device)  # walker cell, goal cell
        self.moves = self.moves.to(self.device)

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        slip = self._uniform(0.0, 1.0, 1)[:, 0] < 0.2
        drawn = self._uniform(0.0, 4.0, 1)[:, 0].long().clamp(max=3)
        move = self.moves[torch.where(slip, drawn, actions)]
        self.state[:, :2] = (self.state[:, :2] + move).clamp(0, 6)
        arrived = (self.state[:, :2] == self.state[:, 2:]).all(1)
        return arrived.float() - 0.02, arrived

    def _initial_state(self) -> dict[str, torch.Tensor]:
        return {"state": self._uniform(0.0, 7.0, 4).floor().clamp(max=6)}

    def _observe(self) -> dict[str, torch.Tensor]:
        obs = torch.cat([self.state[:, :2] / 6, (self.state[:, 2:] - self.state[:, :2]) / 6], 1)
        return {"policy": obs, "critic": obs.clone()}


def make_grid(num_envs: int = 64, device: str = "cpu", seed: int = 0) -> Grid:
    return Grid(num_envs, device, seed)


def make_catch(num_envs: int = 64, device: str = "cpu", seed: int = 0) -> Catch:
    return Catch(num_envs, device, seed)


def make_reach(num_envs: int = 64, device: str = "cpu", seed: int = 0) -> Reach:
    return Reach(num_envs, device, seed)


def make_balance(num_envs: int = 64, device: str = "cpu", seed: int = 0) -> Balance:
    return Balance(num_envs, device, seed)


ENVS = ("catch", "grid", "reach", "balance")
SETTINGS = {
    "syncfree's own-env defaults": [],
    "rsl_rl's defaults": ["--ppo.steps_per_env", "24", "--ppo.num_epochs", "5", "--ppo.num_minibatches", "4",
                          "--ppo.learning_rate", "1e-3", "--ppo.schedule", "adaptive", "--ppo.entropy_coef", "0.01"],
    "adaptive, per update": ["--ppo.schedule", "adaptive", "--ppo.kl_adapt_every", "update"],
    "fixed 1e-3": ["--ppo.schedule", "fixed", "--ppo.learning_rate", "1e-3"],
}
"""The settings compared, as options over the defaults an own env gets (an adaptive rate, per minibatch)."""


def curve(folder: Path) -> list[float]:
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [r["mean_return"] for r in records if isinstance(r.get("mean_return"), float)
            and math.isfinite(r["mean_return"])]


def summary(values: list[float]) -> dict[str, float]:
    first, best, final = min(values[:10]), max(values), statistics.mean(values[-10:])
    return {"first": first, "best": best, "final": final,
            "lost": (best - final) / (best - first) if best > first else 0.0}


def run(env: str, setting: str, seed: int, iterations: int, runs: Path) -> dict:
    name = f"{env}-{setting.replace(' ', '_').replace(',', '').replace(chr(39), '')}-seed{seed}"
    folder = runs / name
    done = folder / "done"
    if done.is_file():
        return {"env": env, "setting": setting, "seed": seed, **summary(curve(folder))}
    command = [sys.executable, "-m", "syncfree", "train", "--task", f"own_env_defaults:make_{env}", "--seed",
               str(seed), "--iterations", str(iterations), "--perf.compile", "off", "--log.dir", str(runs.resolve()),
               "--log.run_name", name, "--log.progress", "false", *SETTINGS[setting]]
    if folder.exists():  # an interrupted run: start it again
        for path in sorted(folder.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        folder.rmdir()
    subprocess.run(command, check=True, cwd=HERE, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                   text=True)
    done.touch()
    return {"env": env, "setting": setting, "seed": seed, **summary(curve(folder))}


def spread(values: list[float], digits: int = 2) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {sd:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=ENVS)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one thread each)")
    parser.add_argument("--out", default="benchmarks/results/own-env-defaults-cpu")
    parser.add_argument("--runs", default="runs/own-env-defaults")
    args = parser.parse_args()
    out, runs = Path(args.out), Path(args.runs)
    out.mkdir(parents=True, exist_ok=True)
    runs.mkdir(parents=True, exist_ok=True)
    jobs = [(e, s, seed) for e in args.envs for s in args.settings for seed in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run, e, s, seed, args.iterations, runs) for e, s, seed in jobs]
        results = [f.result() for f in tqdm(futures, desc="own-env runs", unit="run")]
    lines = [f"# Own-env defaults over {args.iterations} iterations, seeds {', '.join(map(str, args.seeds))}", "",
             "`python benchmarks/own_env_defaults.py`. Mean ± standard deviation over the seeds; `lost`: the share of "
             "what a run learned (best - first) that it lost by its last 10 iterations; `worst lost`: the largest "
             "over the seeds.", "",
             "| env | settings | first | best | final | lost | worst lost |", "|---|---|---|---|---|---|---|"]
    for env in args.envs:
        for setting in args.settings:
            rows = [r for r in results if r["env"] == env and r["setting"] == setting]
            lines.append(f"| {env} | {setting} | {spread([r['first'] for r in rows])} | "
                         f"{spread([r['best'] for r in rows])} | {spread([r['final'] for r in rows])} | "
                         f"{spread([r['lost'] for r in rows], 3)} | {max(r['lost'] for r in rows):.3f} |")
    out.joinpath("results.json").write_text(json.dumps(results, indent=1))
    out.joinpath("results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
