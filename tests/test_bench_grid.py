"""`syncfree bench --task grid-arena`: the recurrent trainer's rows, counts, floor and MettaGrid's own speed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import syncfree.tasks

pytest.importorskip("mettagrid")

from syncfree.bench import config as bench_config
from syncfree.bench.config import BenchConfig, train_config
from syncfree.bench.matrix import SEEDS_BEFORE, bench_configurations
from syncfree.cli import main
from syncfree.config import PerfConfig
from syncfree.tasks import preset

SWITCHES_READ = ["deferred_episode_stats", "deferred_nonfinite_check", "grad_finite_from_norm", "fused_adamw",
                 "zero_grad_set_to_none", "deterministic", "compile", "gate_full_log_probs",
                 "preallocated_last_actions", "cpu_time_index", "cached_minibatch_indices", "token_embedding_tables",
                 "sparse_token_max", "cache_game_config", "host_env_worker"]
"""The ablated ones: those the recurrent algorithm reads on grid-arena's preset (its fixed learning-rate schedule
leaves `device_adaptive_lr` inert, and `autocast=auto` keeps its token encoder in float32: only the `bf16` variant
has a row), but the process-wide `retain_host_memory`, which one process cannot compare. `host_env_worker` acts
with 2 simulations or more only."""


def test_grid_arena_rows_cover_the_switches_the_recurrent_trainer_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(syncfree.tasks, "usable_cores", lambda: 2)  # `host_env_worker` acts with a second core
    cfg = BenchConfig(task="grid-arena", profile="full").resolved()
    assert (cfg.num_envs, cfg.scaling, cfg.ablations, cfg.compile) == ([16, 256], [4, 16, 64, 256], True, True)
    assert BenchConfig(task="grid-arena").resolved().num_envs == [16, 64]
    assert BenchConfig(task="point-mass").resolved().num_envs == [64, 1024]  # the feed-forward defaults
    configs = dict(bench_configurations(cfg))
    assert list(configs)[:2] == ["baseline", "optimized"]
    assert set(configs) == {"baseline", "optimized", SEEDS_BEFORE, "optimized, compile=hot",
                            "optimized, autocast=bf16"} | {
        f"optimized - {s}" for s in SWITCHES_READ} | {f"baseline + {s}" for s in SWITCHES_READ}
    assert configs["optimized"] == PerfConfig(compile="step")
    assert configs["optimized - compile"] == PerfConfig(compile="off")
    assert configs["optimized - cpu_time_index"] == PerfConfig(compile="step", cpu_time_index=False)
    assert configs["baseline + fused_adamw"] == dataclasses.replace(PerfConfig.preset("baseline"), fused_adamw=True)


def test_grid_arena_minibatches_divide_the_segments(monkeypatch) -> None:
    def small_preset(task: str, algorithm: str | None = None):
        cfg = preset(task)
        cfg.ppo.num_minibatches = 16  # divides num_envs * steps_per_env (32) but not the 8 segments of 1 simulation
        return cfg

    monkeypatch.setattr(bench_config, "preset", small_preset)
    cfg = train_config(BenchConfig(task="grid-arena"), 1, PerfConfig(compile="off"))
    segments = 1 * cfg.env.agents_per_env * cfg.ppo.steps_per_env // cfg.ppo.bptt_horizon
    assert segments == 8 and cfg.ppo.num_minibatches == 8




@pytest.mark.slow
def test_grid_arena_bench_end_to_end(tmp_path: Path, one_thread) -> None:
    code = main(["bench", "--task", "grid-arena", "--profile", "full", "--num_envs", "[1]", "--scaling", "[1]",
                 "--add_one_in", "false", "--repeats", "1", "--iterations", "1", "--min_seconds", "0",
                 "--threads", "1", "--compile", "false", "--out", str(tmp_path),  # compile rows: test_compile.py
                 "--settings", json.dumps({"ppo.num_epochs": 1, "ppo.num_minibatches": 2})])  # not 4 x 4 minibatches
    assert code == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["bench"]["compile"] is False and "optimized - device_adaptive_lr" in result["skipped_rows"]
    assert result["envs"] == {"envs": "simulations", "row": "agent", "rows": "agents",
                              "summary": "mines map, 8 x 8, 4 agents each, 64-step episodes"}
    size = result["sizes"][0]
    assert size["num_envs"] == 1 and size["num_rows"] == 4
    assert size["steps_per_iteration"] == 4 * result["train"]["ppo"]["steps_per_env"]  # agent steps
    assert set(size["configs"]) == {"baseline", "optimized", SEEDS_BEFORE, "optimized, autocast=bf16"} | {
        f"optimized - {s}" for s in SWITCHES_READ if s not in ("compile", "host_env_worker")}
    assert "one env" in result["skipped_rows"]["optimized - host_env_worker"]
    base, opt = size["configs"]["baseline"], size["configs"]["optimized"]
    assert opt["counts"]["syncs_per_step"] == 0 and opt["counts"]["syncs_per_minibatch"] == 0
    assert base["counts"]["syncs_per_step"] > 0 and base["counts"]["syncs_per_minibatch"] > 0
    assert size["configs"]["optimized - cpu_time_index"]["counts"]["syncs_per_step"] > 0
    # the seeds' before: the baseline, and the previous-action buffer's size read at every rollout step
    assert size["configs"][SEEDS_BEFORE]["counts"]["syncs_per_step"] == base["counts"]["syncs_per_step"] + 1
    assert opt["efficiency"] > 0 and size["floor_steps_per_s"] > 0
    assert all(size["floor_seconds"][k] > 0 for k in ("env", "policy_forward", "update", "total"))
    assert opt["memory"]["bytes_per_env"] == 4 * opt["memory"]["bytes_per_row"] > 0
    assert set(opt["phase_seconds"]) >= {"act", "store", "env", "update.forward", "update.backward"}
    env_only = size["env_only"]["steps_per_s"]
    assert list(env_only) == ["MettaGrid raw", "through the adapter"]
    assert env_only["MettaGrid raw"]["median"] > 0 and env_only["through the adapter"]["median"] > 0
    point = result["scaling"][0]
    assert point["num_envs"] == 1 and point["num_rows"] == 4
    assert point["env_only"]["steps_per_s"]["MettaGrid raw"]["median"] > 0 and point["optimized"]["steps_per_s"] > 0
    report = (tmp_path / "results.md").read_text()
    assert "# syncfree bench: grid-arena" in report and "| optimized - cpu_time_index |" in report
    assert "## 1 simulations x 4 agents = 4 agents" in report and "| bytes/agent |" in report
    assert ("Sizes count simulations (mines map, 8 x 8, 4 agents each, 64-step episodes); steps/s are agent steps/s. "
            "All configurations run eagerly (`--compile false`).") in report
    assert "of MettaGrid raw." in report and "the optimized trainer does" in report
    assert ("| simulations | agents | baseline | optimized | floor | optimized efficiency | env only: MettaGrid raw | "
            "env only: through the adapter |") in report
    assert {p.name for p in tmp_path.iterdir()} >= {"results.json", "results.md", "steps_per_s.png", "phases.png",
                                                    "scaling.png"}
