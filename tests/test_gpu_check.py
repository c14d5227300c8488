"""`benchmarks/gpu_check.sh` on the CPU (`SMOKE=1`, toy sizes): the script a short device lease runs in one call."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def gpu_check(out: Path, *parts: str, root: Path = ROOT, **env: str) -> str:
    """The script's output; `python3` is this interpreter, the package this checkout's (the script `root`'s)."""
    bin_dir = out / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    python3 = bin_dir / "python3"
    python3.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # a link would lose a virtual environment
    python3.chmod(0o755)
    run_env = {**os.environ, "SMOKE": "1", "OUT": str(out / "out"), "OMP_NUM_THREADS": "1",
               "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src"),
               "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor"), **env}
    run = subprocess.run(["bash", "benchmarks/gpu_check.sh", *parts], cwd=root, env=run_env, capture_output=True,
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


def fake_wheel(folder: Path, name: str) -> Path:
    """A pure-Python wheel pip installs: one module, its metadata and record."""
    import zipfile

    path = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 1\n", f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as wheel:
        for arcname, text in files.items():
            wheel.writestr(arcname, text)
    return path


def test_the_mjlab_part_stashes_its_pieces_call_by_call_then_installs_them_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mjlab part as on the device (`MJLAB_PIECES=1`), its wheels cut in two pieces carried one per call: the
    first call stashes its piece and reports `rc=pieces-3`; the second joins, installs and marks the install; a
    third installs nothing again. (`BUDGET=0`: no learner runs; a copy of the scripts is the checkout.)"""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import wheel_pieces

    checkout = tmp_path / "checkout"
    (checkout / "benchmarks").mkdir(parents=True)
    for script in ("gpu_check.sh", "wheel_pieces.py", "compile_cache.py"):
        shutil.copy(ROOT / "benchmarks" / script, checkout / "benchmarks" / script)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("fakemjlab", "fakewarp"):
        fake_wheel(wheels, name)
    pieces = wheel_pieces.split(wheels, tmp_path / "pieces", mib=6000 / 2**20)  # a tar of 10,240 bytes
    assert len(pieces) == 2
    env = {"MJLAB_PIECES": "1", "MJLAB_TMP": str(tmp_path / "device"), "BUDGET": "0"}
    site = tmp_path / "device" / "site-mjlab"
    lines = []
    for call, piece in enumerate([*pieces, pieces[1]]):
        carried = checkout / ".whl-mjlab" / "pieces"
        shutil.rmtree(carried, ignore_errors=True)
        shutil.copytree(piece, carried / piece.name)
        gpu_check(tmp_path / f"call{call}", "mjlab", root=checkout, **env)
        lines.append((tmp_path / f"call{call}" / "out" / "parts.txt").read_text().splitlines())
        if call == 1:
            installed = (site / ".installed").stat().st_mtime_ns
    assert [line.split()[:2] for line in lines[0]] == [["mjlab", "rc=pieces-3"]]
    with tarfile.open(tmp_path / "call0" / "out" / "results.tgz") as packed:
        assert "piece 2 still to carry" in packed.extractfile("./gpu.txt").read().decode()
    assert [line.split()[:2] for line in lines[1]] == [["sac-mjlab-g1-velocity-4096", "rc=not-run"],
                                                      ["rsl_rl-mjlab-g1-velocity-4096", "rc=not-run"]]
    assert (site / "fakemjlab" / "__init__.py").is_file() and (site / "fakewarp" / "__init__.py").is_file()
    assert (site / ".installed").stat().st_mtime_ns == installed  # the third call found the install and kept it
    assert [line.split()[:2] for line in lines[2]] == [line.split()[:2] for line in lines[1]]
