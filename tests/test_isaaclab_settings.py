"""The physics-partition switch reaches an Isaac Lab env config (a stand-in with the same attribute path)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from syncfree.config import PerfConfig
from syncfree.envs.adapters.isaaclab import apply_perf_settings
from syncfree.errors import UserError


def isaaclab_like_cfg(partitions: int = 8) -> SimpleNamespace:
    return SimpleNamespace(sim=SimpleNamespace(dt=0.005, physx=SimpleNamespace(gpu_max_num_partitions=partitions)))


@pytest.mark.parametrize("perf,expected", [(PerfConfig.preset("optimized"), 1), (PerfConfig.preset("baseline"), 8),
                                           (PerfConfig(physics_partitions=2), 2)])
def test_partitions_follow_the_switch(perf: PerfConfig, expected: int) -> None:
    """The value set, whichever it is, lands in the config the caller holds (Isaac Lab builds the env from that
    object): not in a copy, and nothing else in it changes."""
    cfg = isaaclab_like_cfg(partitions=4)
    returned = apply_perf_settings(cfg, perf)
    assert returned is cfg and cfg.sim.physx.gpu_max_num_partitions == expected
    assert cfg == isaaclab_like_cfg(partitions=expected)


def test_a_config_without_physx_settings_is_named() -> None:
    with pytest.raises(UserError, match=r"SimpleNamespace.*gpu_max_num_partitions"):
        apply_perf_settings(SimpleNamespace(sim=SimpleNamespace()), PerfConfig())
