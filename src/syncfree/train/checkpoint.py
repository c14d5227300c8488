"""Atomic checkpoints holding everything needed to continue a run exactly."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from syncfree.errors import UserError

FORMAT_VERSION = 1


def save_atomic(state: dict[str, Any], path: str | Path) -> Path:
    """Write to a temporary file in the same folder, then rename: a crash never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def save_run(state: dict[str, Any], run_dir: Path, iteration: int) -> Path:
    """`run_dir/checkpoint_<iteration>.pt`, and a copy as `run_dir/latest.pt` (both written atomically)."""
    path = save_atomic(state, run_dir / f"checkpoint_{iteration:06d}.pt")
    tmp = run_dir / ".latest.pt.tmp"
    shutil.copyfile(path, tmp)
    os.replace(tmp, run_dir / "latest.pt")
    return path


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path}: no such file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        raise UserError(f"checkpoint {path}: not a readable checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        raise UserError(f"checkpoint {path}: not a syncfree checkpoint (format {FORMAT_VERSION})")
    return state


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
