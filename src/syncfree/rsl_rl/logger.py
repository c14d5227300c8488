"""What rsl_rl's runner and its subclasses reach through `runner.logger`, over syncfree's run logger, and the git
state rsl_rl records for the repositories a script adds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from syncfree.train.run import Run


class Logger:
    """What rsl_rl's runner and its subclasses reach through `runner.logger`: `log_dir`, `writer` (set while
    training writes, None without a `log_dir`), `logger_type`, `git_status_repos` and `save_model`."""

    def __init__(self, log_dir: str | None, run: Run, logger_type: str) -> None:
        self.log_dir = log_dir
        self.logger_type = logger_type
        self.git_status_repos: list[str] = []
        self._run = run

    @property
    def writer(self) -> Any:
        return self._run.logger

    def init_logging_writer(self) -> None:
        if self.log_dir is None:
            return
        self._run.open_logger()
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
