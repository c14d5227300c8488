"""`perf.retain_host_memory`: freed host memory stays in the process (no page faults on reuse), results unchanged;
the bench leaves process-wide switches out of its in-process ablation rows and runs only the rows asked for."""

from __future__ import annotations

import platform
import resource

import pytest
import torch

from conftest import assert_same_state, small_config
from syncfree.config import PerfConfig
from syncfree.errors import UserError
from syncfree.perf.bench import BenchConfig, bench_configurations, configurations
from syncfree.perf.memory import RETAIN_BYTES, retain_freed_memory
from syncfree.train.trainer import Trainer


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_retained_memory_is_reused_without_page_faults() -> None:
    assert retain_freed_memory()
    size = 64 << 20  # above glibc's largest default mmap threshold (32 MiB), below RETAIN_BYTES
    assert size < RETAIN_BYTES
    torch.zeros(size // 4)  # first touch: faults once
    before = minor_faults()
    for _ in range(10):
        torch.zeros(size // 4)  # freed at once; the next one reuses the same heap pages
    pages = 10 * size // resource.getpagesize()
    assert minor_faults() - before < pages // 20  # not mapped afresh (that would fault on every page)


def test_retain_host_memory_changes_no_result() -> None:
    runs = []
    for retain in (False, True):
        trainer = Trainer(small_config("pendulum", retain_host_memory=retain))
        trainer.cfg.iterations = 2
        trainer.learn()
        runs.append({"policy": trainer.policy.state_dict(), "storage": trainer.storage.state_tensors()})
    assert_same_state(runs[0], runs[1])


def test_process_wide_switches_have_no_in_process_ablation_rows() -> None:
    names = [name for name, _ in configurations(True)]
    assert PerfConfig.switches_by_name()["retain_host_memory"].metadata["process_wide"]
    assert not any("retain_host_memory" in name for name in names)
    assert "optimized - autocast" in names and "baseline + autocast" in names


def test_bench_runs_only_the_rows_asked_for() -> None:
    bench = BenchConfig(task="point-mass", rows=["optimized - autocast"]).resolved()
    assert [name for name, _ in bench_configurations(bench)] == ["baseline", "optimized", "optimized - autocast"]
    with pytest.raises(UserError, match="unknown"):
        bench_configurations(BenchConfig(task="point-mass", rows=["optimized - nothing"]).resolved())
