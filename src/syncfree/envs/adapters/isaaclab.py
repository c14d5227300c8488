"""Apply syncfree's env-side settings to an Isaac Lab env config before the env is created.

Isaac Lab owns its physics: of syncfree's switches only the simulator settings can be carried into it, and only
through its config (`ManagerBasedRLEnvCfg.sim.physx`). Call this on the config, then create the env.
"""

from __future__ import annotations

from typing import Any

from syncfree.core.switches import PerfConfig
from syncfree.errors import UserError


def apply_perf_settings(env_cfg: Any, perf: PerfConfig) -> Any:
    """Set `sim.physx.gpu_max_num_partitions` from `perf.physics_partitions`; returns `env_cfg`."""
    physx = getattr(getattr(env_cfg, "sim", None), "physx", None)
    if physx is None or not hasattr(physx, "gpu_max_num_partitions"):
        raise UserError(f"Isaac Lab config {type(env_cfg).__name__}: no sim.physx.gpu_max_num_partitions to set "
                        "(expected an Isaac Lab env config with a PhysX simulation config)")
    physx.gpu_max_num_partitions = perf.physics_partitions
    return env_cfg
