"""`syncfree bench` runs every configuration, counts each, and writes JSON, markdown and plots."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from conftest import small_config
from syncfree.bench.config import BenchConfig
from syncfree.bench.hardware import compute_dtype, hardware_fraction
from syncfree.bench.matrix import SEEDS_BEFORE, bench_configurations, configurations, skipped_rows
from syncfree.bench.report import markdown
from syncfree.bench.run import env_words
from syncfree.cli import main
from syncfree.config import EnvConfig, EnvNouns, PerfConfig
from syncfree.policy.actor_critic import AUTO_MIN_WORK, set_autocast
from syncfree.tasks import preset
from syncfree.train.runner import Runner


def test_configurations_cover_every_switch_both_ways() -> None:
    names = [name for name, _ in configurations(ablations=True)]
    assert names[:2] == ["baseline", "optimized"]
    for f in PerfConfig.switches():
        if f.metadata["process_wide"] or f.metadata["check"]:  # benchmarks/host_memory.py compares the former
            assert not any(f.name in n for n in names)
            continue
        assert any(n.startswith(f"optimized - {f.name}") for n in names) and f"baseline + {f.name}" in names
    configs = dict(configurations(ablations=True))
    assert configs["baseline + compile"].compile == "step" and not configs["baseline + compile"].validate_distributions
    assert configs["optimized, compile=hot"] == PerfConfig(compile="hot")  # a variant: the update as in `hot`
    assert configs["optimized - fused_adamw"] == PerfConfig(compile="step", fused_adamw=False)
    assert configs["baseline + fused_adamw"].fused_adamw and not configs["baseline + fused_adamw"].deferred_episode_stats
    assert configs[SEEDS_BEFORE] == PerfConfig.preset("seed_before") != PerfConfig.preset("baseline")
    assert [name for name, _ in configurations(ablations=False)] == ["baseline", "optimized"]


def test_rows_of_inert_switches_are_left_out_with_the_reason() -> None:
    bench = BenchConfig(task="point-mass", profile="full").resolved()
    names = [name for name, _ in bench_configurations(bench)]
    skipped = skipped_rows(bench)
    # compile=step makes the update one graph with its own AdamW: the fused kernel and set_to_none change nothing
    # beside the optimized switches, but act beside the baseline ones (eager)
    assert "optimized - fused_adamw" in skipped and "baseline + fused_adamw" in names
    assert "compile=step" in skipped["optimized - zero_grad_set_to_none"]
    assert "optimized - fast_history" in skipped and "baseline + cpu_time_index" in skipped
    assert "optimized - critic_chunk_size" in names  # 4,096 envs: the baseline's 1,024-row chunks split them
    assert not set(names) & set(skipped)
    small = BenchConfig(task="point-mass", profile="full", num_envs=[64]).resolved()
    assert "optimized - critic_chunk_size" in skipped_rows(small)  # 64 envs x 24 steps / 4: no chunk at either
    eager = BenchConfig(task="point-mass", profile="full", compile=False).resolved()
    assert "optimized - fused_adamw" in [name for name, _ in bench_configurations(eager)]


def test_policy_flops_per_step_are_counted_from_the_layer_shapes() -> None:
    """Pendulum's 3 -> 32 -> 32 -> 1 actor and critic: 2 x (3x32 + 32x32 + 32x1) x 2 FLOPs per rollout forward; per
    update row the forward, the weight gradients and the input gradients but the first layers' (the observations
    need none), over 2 epochs."""
    runner = Runner(small_config("pendulum", autocast="off"))  # `auto` would pick bfloat16 on CPUs that have it
    runner.learn()
    forward = 2 * (3 * 32 + 32 * 32 + 32 * 1) * 2
    assert runner.algorithm.flops_per_env_step(runner.obs) == {"rollout": forward,
                                                               "update": 2 * (3 * forward - 2 * 2 * 3 * 32)}
    assert compute_dtype(runner) == "float32"
    fraction = hardware_fraction(1000.0, forward, {"float32": 1.0, "bfloat16": 2.0}, "bfloat16")
    assert fraction == {"dtype": "bfloat16", "fraction": pytest.approx(1000.0 * forward / 2e9)}
    set_autocast(runner.policy, "bf16")
    assert compute_dtype(runner) == "bfloat16"
    for module in runner.policy.modules():  # `auto` on a CPU with bfloat16: 128-row minibatches x 32 stay float32
        if hasattr(module, "autocast_min_work"):
            module.autocast_min_work = AUTO_MIN_WORK
    assert compute_dtype(runner) == "float32"


@dataclass
class SwarmEnvConfig(EnvConfig):
    """A multi-agent task's envs that no report has heard of: swarms of 3 drones."""

    NOUNS: ClassVar[EnvNouns] = EnvNouns("swarms", "drone", "drones")

    def rows(self) -> int:
        return 3 * self.num_envs

    def summary(self) -> str:
        return "3 drones each, wind on"


def spread(x: float) -> dict[str, float]:
    return {"median": x, "min": x, "max": x}


def measured(steps_per_s: float) -> dict[str, Any]:
    """One configuration's figures in a bench result."""
    counts = ("syncs_per_step", "ops_per_step", "allocations_per_step", "syncs_per_minibatch", "ops_per_minibatch",
              "allocations_per_minibatch", "syncs_per_iteration")
    return {"steps_per_s": spread(steps_per_s), "ratio_to_baseline": spread(1.0), "efficiency": 0.5,
            "counts": dict.fromkeys(counts, 0), "memory": {"bytes_per_env": 300.0, "bytes_per_row": 100.0},
            "phase_seconds": {"env": 0.1}, "seconds_per_iteration": [0.1]}


def test_the_report_names_envs_rows_and_env_only_loops_as_the_task_declares() -> None:
    """A new multi-agent task's report speaks of its own envs, rows and settings (its env section's `NOUNS` and
    `summary`) and of its env-only loops by the names its spec's `env_only` gives, and of no other task's."""
    env_only = {"steps_per_s": {"simulator alone": spread(9000.0), "through the adapter": spread(8000.0)}, "runs": 1}
    result = {
        "machine": {"device": "cpu", "processor": "a CPU", "cpu_count": 2, "torch": "2", "torch_threads": 1,
                    "python": "3"},
        "bench": {"task": "swarm", "profile": "quick", "repeats": 1, "iterations": 1, "warmup": 1, "compile": False},
        "algorithm": "ppo", "iteration": "8 steps per drone", "envs": env_words(SwarmEnvConfig(num_envs=2)),
        "wall_seconds": 1.0,
        "sizes": [{"num_envs": 2, "num_rows": 6, "floor_seconds": {"env": 0.01, "policy_forward": 0.01, "update": 0.01},
                   "floor_steps_per_s": 1000.0, "env_only": env_only,
                   "configs": {"baseline": measured(400.0), "optimized": measured(500.0)}}],
        "scaling": [{"num_envs": 2, "num_rows": 6, "baseline": {"steps_per_s": 400.0, "efficiency": 0.4},
                     "optimized": {"steps_per_s": 500.0, "efficiency": 0.5}, "floor_steps_per_s": 1000.0,
                     "env_only": env_only}]}
    report = markdown(result)
    assert "## 2 swarms x 3 drones = 6 drones (1 iterations per measurement)" in report
    assert "Sizes count swarms (3 drones each, wind on); steps/s are drone steps/s." in report
    assert ("simulator alone 9,000 (9,000–9,000), through the adapter 8,000 (8,000–8,000); training (optimized) 500 = "
            "5.6% of simulator alone.") in report
    assert "| configuration | drone steps/s median (min–max) |" in report and "| bytes/drone | warm-up s |" in report
    assert "the optimized trainer does 1,800,000 drone steps" in report
    assert ("| swarms | drones | baseline | optimized | floor | optimized efficiency | env only: simulator alone | "
            "env only: through the adapter |\n|---|---|---|---|---|---|---|---|\n| 2 | 6 | 400 | 500 | 1,000 | 0.50 | "
            "9,000 | 8,000 |") in report
    assert not {"agent", "agents", "simulation", "simulations", "MettaGrid"} & set(re.findall(r"\w+", report))


@pytest.mark.slow
def test_bench_cli_writes_a_report(tmp_path: Path, capsys) -> None:
    code = main(["bench", "--task", "point-mass", "--profile", "full", "--num_envs", "[16]", "--scaling", "[8, 16]",
                 "--repeats", "2", "--iterations", "1", "--min_seconds", "0", "--compile", "false", "--threads", "1",
                 "--out", str(tmp_path), "--settings", json.dumps({"ppo.num_epochs": 1})])
    assert code == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert {p.name for p in tmp_path.iterdir()} >= {"results.json", "results.md", "steps_per_s.png", "phases.png",
                                                    "scaling.png"}
    assert result["envs"] == {"envs": "envs", "row": "env", "rows": "envs", "summary": ""}
    size = result["sizes"][0]
    assert size["num_rows"] == size["num_envs"] == 16
    minibatches = 1 * preset("point-mass").ppo.num_minibatches  # one epoch of the preset's minibatches
    for config in size["configs"].values():
        assert config["gradient_steps_per_s"] == pytest.approx(
            minibatches / statistics.median(config["seconds_per_iteration"]))
    live = {name.split()[-1] for name in size["configs"] if name.startswith(("optimized - ", "baseline + "))}
    # eager, 16 envs; autocast=auto lowers no call this small, even on a CPU with bfloat16 instructions (its rows x
    # width stay below AUTO_MIN_WORK): float32, as off is, and the row is left out
    assert live == {"deferred_episode_stats", "deferred_nonfinite_check", "grad_finite_from_norm", "fused_adamw",
                    "device_loss_stats", "zero_grad_set_to_none", "deterministic"}
    assert "optimized - autocast" in result["skipped_rows"]
    assert "ppo.schedule=fixed" in result["skipped_rows"]["optimized - device_adaptive_lr"]  # the preset's fixed rate
    assert len(size["configs"]) == 2 + 2 * len(live) + 2  # the variant `optimized, autocast=bf16`, the seeds' before
    # the seeds' before: the baseline, with every gradient's finiteness read per minibatch (13 parameter tensors:
    # the actor's and the critic's 3 layers, the action std)
    before_counts = size["configs"][SEEDS_BEFORE]["counts"]
    assert before_counts["syncs_per_minibatch"] == size["configs"]["baseline"]["counts"]["syncs_per_minibatch"] + 13
    assert size["configs"]["optimized, autocast=bf16"]["hardware_fraction"]["dtype"] == "bfloat16"
    assert set(result["skipped_rows"]) >= {"optimized - critic_chunk_size", "baseline + gate_full_log_probs"}
    base, opt = size["configs"]["baseline"], size["configs"]["optimized"]
    assert opt["counts"]["syncs_per_step"] == 0 and opt["counts"]["syncs_per_minibatch"] == 0
    assert base["counts"]["syncs_per_step"] > 0 and base["counts"]["syncs_per_minibatch"] > 0
    assert len(opt["seconds_per_iteration"]) == 2 and opt["steps_per_s"]["min"] <= opt["steps_per_s"]["median"]
    assert base["ratio_to_baseline"]["median"] == 1.0
    assert opt["efficiency"] > 0 and size["floor_seconds"]["total"] > 0
    assert result["matmul_peak_gflops"]["float32"] > 0 and result["matmul_peak_gflops"]["bfloat16"] > 0
    assert size["flops_per_step"]["rollout"] > 0 and size["flops_per_step"]["update"] > 0
    assert opt["hardware_fraction"]["dtype"] == "float32" and 0 < opt["hardware_fraction"]["fraction"] < 1
    assert set(opt["phase_seconds"]) >= {"act", "env", "store", "update.backward", "update.optimizer"}
    assert [p["num_envs"] for p in result["scaling"]] == [8, 16]
    report = (tmp_path / "results.md").read_text()
    assert "## 16 envs (" in report and "| env steps/s median (min–max) |" in report and "| bytes/env |" in report
    assert "Sizes count envs; steps/s are env steps/s." in report
    assert "| envs | baseline | optimized | floor | optimized efficiency |" in report
    assert "| optimized - fused_adamw |" in report and "Seeds' view" in report
    assert f"| {SEEDS_BEFORE} |" in report and "seed_before" in report
    assert "changes nothing here" in report and "critic_chunk_size" in report
    assert "of fp32 |" in report and "GFLOP/s float32" in report
    assert "# syncfree bench: point-mass" in capsys.readouterr().out


@pytest.mark.slow
def test_bench_runs_a_gymnasium_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """`gym:<id>` tasks, which `syncfree train` takes, are benched too: sizes default to a few host-stepped envs, the
    default folder's name has no colon, and the counts hold the optimized trainer's budget there: no host sync in
    the update nor per env step (the adapter's numpy views of its buffers are made once, not per step)."""
    pytest.importorskip("gymnasium")
    assert BenchConfig(task="gym:Hopper-v5").resolved().num_envs == [16, 64]
    assert BenchConfig(task="gym:Hopper-v5", profile="full").resolved().scaling == [4, 16, 64, 256]
    monkeypatch.chdir(tmp_path)
    small = json.dumps({"ppo.steps_per_env": 16, "ppo.num_epochs": 2, "ppo.num_minibatches": 2})  # not 10 x 32
    code = main(["bench", "--task", "gym:Pendulum-v1", "--num_envs", "[2]", "--repeats", "1", "--iterations", "1",
                 "--min_seconds", "0", "--compile", "false", "--threads", "1", "--device", "cpu", "--settings", small])
    assert code == 0
    result = json.loads((tmp_path / "benchmarks/results/gym_Pendulum-v1-quick-cpu/results.json").read_text())
    base, opt = (result["sizes"][0]["configs"][name]["counts"] for name in ("baseline", "optimized"))
    assert opt["syncs_per_minibatch"] == 0 < base["syncs_per_minibatch"]
    assert opt["syncs_per_step"] == 0 < base["syncs_per_step"]
    assert "# syncfree bench: gym:Pendulum-v1" in capsys.readouterr().out
    assert main(["bench", "--task", "gym:"]) == 2
    assert "gym:<id>" in capsys.readouterr().err


def test_bench_rejects_bad_sizes(capsys) -> None:
    assert main(["bench", "--num_envs", "[0]"]) == 2
    assert "num_envs" in capsys.readouterr().err
