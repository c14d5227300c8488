"""`benchmarks/gpu_check.sh` on the CPU (`SMOKE=1`, toy sizes): the script a short device lease runs in one call."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def gpu_check(out: Path, *parts: str, **env: str) -> str:
    """The script's output; `python3` is this interpreter, the package this checkout's."""
    bin_dir = out / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    python3 = bin_dir / "python3"
    python3.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # a link would lose a virtual environment
    python3.chmod(0o755)
    run_env = {**os.environ, "SMOKE": "1", "OUT": str(out / "out"), "OMP_NUM_THREADS": "1",
               "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src"),
               "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor"), **env}
    run = subprocess.run(["bash", "benchmarks/gpu_check.sh", *parts], cwd=ROOT, env=run_env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def test_parts_past_the_budget_are_not_started_and_each_is_reported() -> None:
    """With no budget left every part is reported as not run, and the results come back packed."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        gpu_check(out, "side", "offpolicy", BUDGET="0")
        lines = (out / "out" / "parts.txt").read_text().splitlines()
        assert [line.split()[:2] for line in lines] == [["side-by-side-point-mass", "rc=not-run"],
                                                       ["sac-g1-track-4096", "rc=not-run"],
                                                       ["td3-g1-track-4096", "rc=not-run"]]
        with tarfile.open(out / "out" / "results.tgz") as packed:
            assert "./parts.txt" in packed.getnames()


@pytest.mark.slow
def test_a_part_ends_with_its_figures_and_compile_artifacts_that_a_second_call_loads(tmp_path: Path) -> None:
    """The off-policy part at toy sizes: its result files and the packed compile caches come back; carried as the
    cache folder, a second call unpacks and loads them before its first part."""
    gpu_check(tmp_path / "first", "offpolicy", OFFPOLICY="td3")  # one of its two learners: half the time
    out = tmp_path / "first" / "out"
    lines = (out / "parts.txt").read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [["td3-g1-track-4096", "rc=0"]]
    with tarfile.open(out / "results.tgz") as packed:
        names = packed.getnames()
    assert any(name.startswith("./td3-g1-track-4096/") for name in names), names
    assert (out / "compile-cache" / "inductor-cache.tgz").is_file()
    second = gpu_check(tmp_path / "second", "offpolicy", BUDGET="0", COMPILE_CACHE=str(out / "compile-cache"))
    assert "inductor-cache.tgz unpacked" in second and "artifact files loaded" in second
