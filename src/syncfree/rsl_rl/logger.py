"""What rsl_rl's runner and its subclasses reach through `runner.logger`, over syncfree's run logger: rsl_rl 5.5's
TensorBoard and W&B tags in `log_dir` against rsl_rl's iteration, its console block, and the git state rsl_rl records
for the repositories a script adds."""

from __future__ import annotations

import contextlib
import datetime
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from syncfree.train.logger import RunLogger
from syncfree.train.run import Run

LOSSES = {"value_loss": "value", "surrogate_loss": "surrogate", "entropy": "entropy", "rnd_loss": "rnd",
          "symmetry_loss": "symmetry", "behavior_loss": "behavior"}
"""syncfree's statistics that are rsl_rl's losses (`Loss/<name>`, `Mean <name> loss:`), in rsl_rl's order."""

AS_RSL_RL = {*LOSSES, "learning_rate", "action_std", "mean_return", "mean_length"}
"""Record entries plotted under rsl_rl's tags; the others go under `syncfree/<name>` beside them."""


class Logger:
    """What rsl_rl's runner and its subclasses reach through `runner.logger`: `log_dir`, `writer` (set while
    training writes, None without a `log_dir`), `logger_type`, `git_status_repos`, `save_model`, and rsl_rl's
    running totals `tot_timesteps` and `tot_time`. `env_terms`: the names of the env's logged terms (the adapter's
    `log_names`), which a record holds beside syncfree's own entries."""

    def __init__(self, log_dir: str | None, run: Run, logger_type: str, cfg: Mapping[str, Any],
                 env_terms: Mapping[str, None]) -> None:
        self.log_dir = log_dir
        self.logger_type = logger_type
        self.cfg = cfg
        self.git_status_repos: list[str] = []
        self.tot_timesteps = 0
        self.tot_time = 0.0
        self._run = run
        self._env_terms = env_terms

    @property
    def writer(self) -> RunLogger | None:
        """The run's logger while training writes; its `add_scalar(tag, value, step)` plots as rsl_rl's writer."""
        return self._run.logger

    def init_logging_writer(self) -> None:
        if self.log_dir is None:
            return
        self._run.open_logger(tensorboard_dir=Path(self.log_dir), plot=False)
        for repo in self.git_status_repos:
            write_git_state(repo, Path(self.log_dir) / "git")

    def stop_logging_writer(self) -> None:
        self._run.close_logger()

    def save_model(self, path: str, iteration: int) -> None:
        """Upload the checkpoint to W&B when it is the logger (as rsl_rl's W&B writer does)."""
        if self.logger_type == "wandb":
            import wandb

            if wandb.run is not None:
                wandb.save(path, base_path=os.path.dirname(path))

    def log(self, record: dict[str, Any], it: int, start_it: int, total_it: int) -> None:
        """rsl_rl 5.5's `Logger.log` for the iteration `it` of `start_it` to `total_it` (rsl_rl's numbering) from
        syncfree's record: its tags against `it` (syncfree's other entries as `syncfree/<name>`), and its console
        block (unless `log.progress` is off). Nothing without a `log_dir`, as rsl_rl."""
        writer = self.writer
        if writer is None:
            return
        runner = self._run.runner
        collection_size = runner.steps_per_iteration
        collect_time = runner.collection_seconds
        iteration_time = float(record["iteration_seconds"])
        learn_time = iteration_time - collect_time
        self.tot_timesteps += collection_size
        self.tot_time += iteration_time
        pad, width = 40, 80

        extras = ""
        for key in (k for k in self._env_terms if k in record):
            value = float(record[key])
            if "/" in key:
                writer.add_scalar(key, value, it)
                extras += f"{f'{key}:':>{pad}} {value:.4f}\n"
            else:
                writer.add_scalar(f"Episode/{key}", value, it)
                extras += f"{f'Mean episode {key}:':>{pad}} {value:.4f}\n"
        losses = {name: float(record[key]) for key, name in LOSSES.items() if key in record}
        for name, value in losses.items():
            writer.add_scalar(f"Loss/{name}", value, it)
        writer.add_scalar("Loss/learning_rate", record["learning_rate"], it)
        action_std = float(record["action_std"])
        writer.add_scalar("Policy/mean_std", action_std, it)
        fps = int(collection_size / iteration_time)
        writer.add_scalar("Perf/total_fps", fps, it)
        writer.add_scalar("Perf/collection_time", collect_time, it)
        writer.add_scalar("Perf/learning_time", learn_time, it)
        episodes = "mean_return" in record
        if episodes:
            writer.add_scalar("Train/mean_reward", record["mean_return"], it)
            writer.add_scalar("Train/mean_episode_length", record["mean_length"], it)
            writer.add_scalar("Train/mean_reward/time", record["mean_return"], int(self.tot_time), wandb=False)
            writer.add_scalar("Train/mean_episode_length/time", record["mean_length"], int(self.tot_time),
                              wandb=False)
        for key, value in record.items():
            if key not in AS_RSL_RL and key not in self._env_terms and isinstance(value, int | float):
                writer.add_scalar(f"syncfree/{key}", value, it)
        if not self._run.cfg.log.progress:
            return

        text = f"{'#' * width}\n"
        text += f"\033[1m{f' Learning iteration {it}/{total_it} '.center(width)}\033[0m \n\n"
        run_name = self.cfg.get("run_name")
        text += f"{'Run name:':>{pad}} {run_name}\n" if run_name else ""
        text += (f"{'Total steps:':>{pad}} {self.tot_timesteps} \n"
                 f"{'Steps per second:':>{pad}} {fps:.0f} \n"
                 f"{'Collection time:':>{pad}} {collect_time:.3f}s \n"
                 f"{'Learning time:':>{pad}} {learn_time:.3f}s \n")
        for name, value in losses.items():
            text += f"{f'Mean {name} loss:':>{pad}} {value:.4f}\n"
        if episodes:
            text += f"{'Mean reward:':>{pad}} {record['mean_return']:.2f}\n"
            text += f"{'Mean episode length:':>{pad}} {record['mean_length']:.2f}\n"
        text += f"{'Mean action std:':>{pad}} {action_std:.2f}\n"
        text += extras
        done_it = it + 1 - start_it
        eta = self.tot_time / done_it * (total_it - start_it - done_it)
        text += (f"{'-' * width}\n"
                 f"{'Iteration time:':>{pad}} {iteration_time:.2f}s\n"
                 f"{'Time elapsed:':>{pad}} {datetime.timedelta(seconds=int(self.tot_time))}\n"
                 f"{'ETA:':>{pad}} {datetime.timedelta(seconds=int(eta))}\n")
        with contextlib.suppress(OSError):  # a console that went away (a closed pipe) ends the block, not the run
            print(text)


def write_git_state(repo_file_path: str, out_dir: Path) -> None:
    """`<out_dir>/<repository>.diff`: the commit, `git status` and `git diff` of the repository holding
    `repo_file_path` (nothing when it is in none, or git is missing)."""
    where = Path(repo_file_path)
    where = where if where.is_dir() else where.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=True).stdout

    try:
        top = Path(git("rev-parse", "--show-toplevel").strip())
        text = f"commit {git('rev-parse', 'HEAD').strip()}\n\n{git('status', '--short')}\n{git('diff')}"
    except (OSError, subprocess.CalledProcessError):
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{top.name}.diff").write_text(text)
