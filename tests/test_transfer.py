"""The named host transfer: parts packed by name, moved in one copy, read back exactly; env logs stay on the device."""

from __future__ import annotations

import numpy as np
import torch

from syncfree.core.counters import count_syncs
from syncfree.core.transfer import HostTransfer
from syncfree.envs.managers.log import EnvLog


def test_parts_come_back_by_name_with_their_shapes_and_exact_values() -> None:
    stats = torch.tensor([0.1, 3.0e-7, -2.5], dtype=torch.float32)
    transfer = HostTransfer()
    transfer.register("algo", lambda: {"loss": stats[0], "tiny": stats[1], "steps": torch.tensor(2**40 + 1)})
    transfer.register("episodes", lambda: torch.arange(6, dtype=torch.float32).view(2, 3))
    transfer.register("nothing", lambda: None)
    host = transfer.read()
    assert set(host) == {"algo/loss", "algo/tiny", "algo/steps", "episodes"}
    assert host["algo/loss"].shape == () and host["episodes"].shape == (2, 3)
    assert float(host["algo/loss"]) == float(stats[0]) and float(host["algo/tiny"]) == float(stats[1])
    assert int(host["algo/steps"]) == 2**40 + 1
    np.testing.assert_array_equal(host["episodes"], np.arange(6).reshape(2, 3))


def test_one_host_read_and_a_reused_buffer() -> None:
    values = torch.zeros(4)
    transfer = HostTransfer()
    transfer.register("a", lambda: {"x": values.sum(), "y": values})
    first = transfer.read()
    buffer = transfer._buffer
    values.fill_(2.0)
    with count_syncs() as counts:
        second = transfer.read()
    assert counts.syncs == 1 and counts.allocations == 1  # the copy itself, and `values.sum()`
    assert transfer._buffer is buffer
    assert float(first["a/x"]) == 0.0 and float(second["a/x"]) == 8.0  # what was handed out is not overwritten


def test_env_log_means_are_device_tensors_read_without_a_host_sync() -> None:
    log = EnvLog(torch.device("cpu"))
    names = ("reward/a", "reward/b")
    log.add_device(names, torch.tensor([1.0, 3.0]), torch.tensor(True))
    log.add_device(names, torch.tensor([3.0, 5.0]), torch.tensor(True))
    log.add_device(names, torch.tensor([100.0, 100.0]), torch.tensor(False))  # not counted
    log.add_device(("never",), torch.tensor([1.0]), torch.tensor(False))
    log.add_host({"reward/a": 5.0, "host/only": 0.5})
    with count_syncs() as counts:
        means = log.pop()
    assert counts.syncs == 0
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in means.values())
    assert float(means["reward/a"]) == 3.0 and float(means["reward/b"]) == 4.0 and float(means["host/only"]) == 0.5
    assert torch.isnan(means["never"])  # no sample: the runner leaves it out of the record
    assert torch.isnan(log.pop()["reward/a"])  # popped: the sums start again
