"""Atomic checkpoints holding everything needed to continue a run exactly, and nothing that could run code.

A checkpoint file is an envelope `{"format", "sha256", "payload"}`: the payload is the run's state serialized by
`torch.save` (tensors, plain containers, numbers and strings only: RNG states included), kept as a uint8 tensor,
and `sha256` its digest. Loading reads both levels with `weights_only=True`, so a crafted file cannot execute
anything, and checks the digest, the keys a run needs and that the policy and optimizer state are finite. Every
failure is one line naming the file.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import pickle
import random
import re
import warnings
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from syncfree.config import TrainConfig
from syncfree.core.imports import note_file
from syncfree.errors import UserError
from syncfree.tasks import config_from_dict, validated

FORMAT_VERSION = 2
"""2: the envelope above. 1 (earlier versions): the state itself, its NumPy RNG state a NumPy array; still read,
with NumPy's array-rebuilding functions allowed (they build arrays and run nothing else), without a digest."""

REQUIRED_KEYS = ("config", "task", "obs_dims", "action_spec", "num_envs", "iteration", "env_steps", "policy",
                 "algorithm", "obs", "episodes", "rng")
"""What every run's checkpoint holds (`Runner.state_dict`)."""

EARLIER_ALGORITHM_KEY = "ppo"
"""Where a checkpoint of an earlier version kept the algorithm's state (now `algorithm`)."""

_NUMPY_CORE: Any = getattr(np, "_core", None) or getattr(np, "core")  # noqa: B009 - renamed in NumPy 2
_NUMPY_ARRAY_GLOBALS: list[Any] = [np.ndarray, np.dtype, type(np.dtype(np.uint32)), _NUMPY_CORE.multiarray._reconstruct]
"""What a format-1 checkpoint's NumPy RNG state needs to be rebuilt under `weights_only=True`."""


def serialize(state: dict[str, Any]) -> dict[str, Any]:
    """The envelope of `state`: its `torch.save` bytes as a uint8 tensor, with their SHA-256."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    return {"format": FORMAT_VERSION, "sha256": hashlib.sha256(data).hexdigest(),
            "payload": torch.frombuffer(bytearray(data), dtype=torch.uint8)}


def save_atomic(state: dict[str, Any], path: str | Path) -> Path:
    """Write the envelope of `state` to a temporary file in the same folder, then rename: a crash never leaves a
    half-written file, and a failed write (disk full, no permission: `OSError`) removes its temporary file and
    leaves the previous file at `path` as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(serialize(state), buffer)
    _write_replace(buffer.getbuffer(), path)
    return path


def save_plain(obj: Any, path: str | Path) -> Path:
    """`torch.save(obj)` at `path`, written atomically, in no syncfree envelope (another program's checkpoint
    format, such as rsl_rl's)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    _write_replace(buffer.getbuffer(), path)
    return path


def load_plain(path: str | Path) -> Any:
    """What `torch.save` wrote at `path`, read as data (no code from the file runs); one line naming the file
    when it is missing or unreadable."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path}: no such file")
    return _load_data(path.read_bytes(), path)


def save_run(state: dict[str, Any], run_dir: Path, iteration: int) -> Path:
    """`run_dir/checkpoint_<iteration>.pt`, and a copy as `run_dir/latest.pt` (both written atomically)."""
    path = save_atomic(state, run_dir / f"checkpoint_{iteration:06d}.pt")
    _write_replace(path.read_bytes(), run_dir / "latest.pt")
    return path


def _write_replace(data: bytes | memoryview, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_config(config: dict[str, Any], run_dir: Path, resolved: str = "") -> Path:
    """`run_dir/config.yaml`, written atomically: `syncfree train --config` reads it back (give it another
    `--log.run_name`) and trains the same config anew. It never names a checkpoint to resume (that of a resumed
    run would make the rerun continue, and change, this run). `resolved`: what the `auto` settings resolved to on
    this machine (device, threads, compile mode, precision), a comment at the top."""
    import yaml

    path = run_dir / "config.yaml"
    header = f"# ran on {resolved}\n" if resolved else ""
    text = yaml.safe_dump({**config, "resume": "", "resume_in_place": False}, sort_keys=False)
    _write_replace((header + text).encode(), path)
    return path


RUN_FILES = ("latest.pt", "metrics.jsonl")
"""A folder holding either (or a numbered checkpoint) holds a run."""


def run_folder_of(path: str | Path) -> Path | None:
    """The run folder that holds the checkpoint at `path` (one with a config, metrics or `latest.pt`), or None for
    a checkpoint kept elsewhere."""
    folder = Path(path).parent
    return folder if any((folder / name).is_file() for name in ("config.yaml", *RUN_FILES)) else None


def check_run_dir_unused(run_dir: Path) -> None:
    """A new run never writes into another run's folder (it would overwrite its checkpoints and mix its metrics). A
    folder of a run that stopped before its first record (an empty `metrics.jsonl`, no checkpoint) holds nothing to
    lose: a run of the same name takes it again."""
    if not run_dir.is_dir():
        return
    saved = [p.name for p in (run_dir / "latest.pt", *sorted(run_dir.glob("checkpoint_*.pt"))) if p.exists()]
    if saved:
        resume = run_dir / saved[0]
        raise UserError(f"run folder {run_dir} already holds a run ({saved[0]}); choose another log.run_name, or "
                        f"continue that run with --resume {resume} --resume_in_place true")
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists() and (not metrics.is_file() or metrics.stat().st_size > 0):
        raise UserError(f"run folder {run_dir} already holds the records of a run that saved no checkpoint "
                        "(metrics.jsonl); choose another log.run_name, or move that folder away")


def first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (what creating `path` creates), or None."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def remove_unused(run_dir: Path, created: Path) -> None:
    """Remove `run_dir` and its parents up to `created` where they are empty (a run that never started)."""
    for folder in (run_dir, *run_dir.parents):
        try:
            folder.rmdir()  # only an empty folder
        except OSError:
            return
        if folder == created:
            return


def make_run_dir(run_dir: Path) -> None:
    """Create `run_dir` and prove a new file can be written there: one line naming the path and the OS's reason when
    the folder is unusable."""
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"run folder {run_dir}: exists and is not a folder")
    probe = run_dir / f".write-test-{os.getpid()}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"syncfree")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink(missing_ok=True)  # the folder's lock holder, cleaning, may have removed it already
    except OSError as e:
        culprit = e.filename or run_dir
        raise UserError(f"run folder {run_dir}: cannot write there ({culprit}: {e.strerror or e})") from None


STALE_PATTERNS = (".*.pt.tmp", ".*.yaml.tmp", ".*.jsonl.tmp", ".write-test-*")
"""The temporary files syncfree writes in a run folder (`.<name>.tmp` before the rename, the write probe)."""


def remove_stale_files(run_dir: Path) -> list[Path]:
    """Remove the temporary files a killed save (or start-up) left in `run_dir`, syncfree's own only; returns them.
    Only the holder of the folder's lock calls it: another process's files in flight are never touched."""
    stale = [p for pattern in STALE_PATTERNS for p in run_dir.glob(pattern) if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def load(path: str | Path) -> dict[str, Any]:
    """A run's state from the checkpoint at `path`, read without running any code from the file; one line naming
    the file and what is wrong when it is missing, unreadable, damaged, incomplete or holds non-finite weights."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path}: no such file")
    outer = _load_data(path.read_bytes(), path)
    if isinstance(outer, dict) and outer.get("format") == FORMAT_VERSION and isinstance(outer.get("payload"),
                                                                                       torch.Tensor):
        data = outer["payload"].numpy().tobytes()
        if hashlib.sha256(data).hexdigest() != outer.get("sha256"):
            raise UserError(f"checkpoint {path}: its content does not match its SHA-256 digest (the file is damaged)")
        state = _load_data(data, path)
    elif isinstance(outer, dict) and outer.get("format") == 1:
        state = outer
    else:
        raise UserError(f"checkpoint {path}: not a syncfree checkpoint (format {FORMAT_VERSION})")
    if not isinstance(state, dict):
        raise UserError(f"checkpoint {path}: not a syncfree checkpoint (format {FORMAT_VERSION})")
    if EARLIER_ALGORITHM_KEY in state and "algorithm" not in state:  # written before a config named its algorithm
        state["algorithm"] = state.pop(EARLIER_ALGORITHM_KEY)
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise UserError(f"checkpoint {path}: lacks {', '.join(missing)}")
    _check_finite(state, path)
    return state


def read(path: str | Path) -> tuple[TrainConfig, dict[str, Any]]:
    """The checkpoint at `path` (`load`) and its config as its task's config type; one line naming the file when
    the config does not parse."""
    state = load(path)
    if not isinstance(state["config"], dict):
        raise UserError(f"checkpoint {path}: its config is not a mapping")
    note_file(state["config"], f"checkpoint {path}")  # its references stay data unless the user names them
    try:
        return validated(config_from_dict(state["config"])), state
    except (UserError, TypeError) as e:
        raise UserError(f"checkpoint {path}: {e}") from None


def _load_data(data: bytes, path: Path) -> Any:
    try:
        with torch.serialization.safe_globals(_NUMPY_ARRAY_GLOBALS), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)  # the error below says it
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        refused = re.search(r"GLOBAL ([\w.]+)", str(e))
        if refused is None:  # no object refused: bytes that are no pickle at all
            raise UserError(f"checkpoint {path}: not a readable checkpoint (UnpicklingError)") from None
        raise UserError(f"checkpoint {path}: holds a reference to {refused.group(1)}, which a checkpoint of weights "
                        "never does; not loaded (loading it could run code)") from None
    except Exception as e:
        raise UserError(f"checkpoint {path}: not a readable checkpoint ({type(e).__name__})") from None


def _check_finite(state: dict[str, Any], path: Path) -> None:
    """Refuse weights, optimizer moments or a learning rate that are NaN or infinite (a diverged run's)."""
    tensors = {f"policy.{name}": t for name, t in _tensors(state["policy"])}
    tensors.update({f"algorithm.{name}": t for name, t in _tensors(state["algorithm"])})
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise UserError(f"checkpoint {path}: {name} holds non-finite values (the run had diverged); not loaded")
    lr = state["algorithm"].get("lr") if isinstance(state["algorithm"], dict) else None  # a tensor: checked above
    if isinstance(lr, int | float) and not math.isfinite(lr):  # anything else: the schema names what it is
        raise UserError(f"checkpoint {path}: algorithm.lr is {lr}; not loaded")


def _tensors(tree: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    if isinstance(tree, torch.Tensor):
        return [(prefix, tree)]
    if isinstance(tree, dict):
        return [item for key, value in tree.items() for item in _tensors(value, f"{prefix}.{key}" if prefix else str(key))]
    if isinstance(tree, (list, tuple)):
        return [item for i, value in enumerate(tree) for item in _tensors(value, f"{prefix}[{i}]")]
    return []


def rng_state() -> dict[str, Any]:
    """Every random stream's state as tensors and plain numbers (NumPy's Mersenne Twister keys as an int64 tensor)."""
    name, keys, position, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": {"bit_generator": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(position),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # unannotated
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    numpy_state = state["numpy"]
    if isinstance(numpy_state, dict):
        numpy_state = (numpy_state["bit_generator"], numpy_state["keys"].numpy().astype(np.uint32), numpy_state["pos"],
                       numpy_state["has_gauss"], numpy_state["cached_gaussian"])
    np.random.set_state(numpy_state)
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
