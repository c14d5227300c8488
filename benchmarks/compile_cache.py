"""torch's portable compile caches for `gpu_check.sh`: a device lease is short, and each part's graphs compile in
tens of seconds with cold caches (`benchmarks/results/compile-warmup-cpu/`).

    python benchmarks/compile_cache.py load FOLDER                       # every FOLDER/*.bin into the caches
    python benchmarks/compile_cache.py run FILE.bin -m syncfree bench ...  # a module or script, its artifacts saved

`load` puts the artifacts of an earlier run (`torch.compiler.load_cache_artifacts`) into the on-disk caches of
`TORCHINDUCTOR_CACHE_DIR`, where every later process of the run finds them. `run` runs a module (`-m NAME`) or a
script in this process and, when it exits normally, writes what it compiled or loaded from the caches
(`torch.compiler.save_cache_artifacts`) to FILE.bin; a process stopped by a signal writes nothing."""

from __future__ import annotations

import atexit
import runpy
import sys
import time
from pathlib import Path

import torch


def load(folder: Path) -> None:
    files = sorted(folder.glob("*.bin")) if folder.is_dir() else []
    start = time.perf_counter()
    for file in files:
        torch.compiler.load_cache_artifacts(file.read_bytes())
    print(f"compile cache: {len(files)} artifact files loaded from {folder} in {time.perf_counter() - start:.1f} s")


def save(file: Path) -> None:
    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts is not None and artifacts[0]:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(artifacts[0])


def run(file: Path, argv: list[str]) -> None:
    atexit.register(save, file)  # `syncfree` runs the exit handlers before it ends its process
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, str(Path(argv[0]).resolve().parent))
        runpy.run_path(argv[0], run_name="__main__")


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "load":
        load(Path(argv[1]))
    elif len(argv) >= 3 and argv[0] == "run":
        run(Path(argv[1]), argv[2:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
