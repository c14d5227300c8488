"""`syncfree bench` runs every configuration, counts each, and writes JSON, markdown and plots."""

from __future__ import annotations

import json
from pathlib import Path

from syncfree.bench.matrix import configurations
from syncfree.cli import main
from syncfree.config import PerfConfig


def test_configurations_cover_every_switch_both_ways() -> None:
    names = [name for name, _ in configurations(ablations=True)]
    assert names[:2] == ["baseline", "optimized"]
    for f in PerfConfig.switches():
        if f.metadata["process_wide"]:  # cannot be compared in one process (benchmarks/host_memory.py does it)
            assert not any(f.name in n for n in names)
            continue
        assert any(n.startswith(f"optimized - {f.name}") for n in names) and f"baseline + {f.name}" in names
    configs = dict(configurations(ablations=True))
    # compile cannot run with distribution validation: the rows that would combine them turn the other off
    assert configs["optimized - validate_distributions (and compile)"] == PerfConfig(validate_distributions=True,
                                                                                     compile="off")
    assert configs["baseline + compile"].compile == "step" and not configs["baseline + compile"].validate_distributions
    assert configs["optimized, compile=hot"] == PerfConfig(compile="hot")  # a variant: the update as in `hot`
    assert configs["optimized - fused_adamw"] == PerfConfig(fused_adamw=False)
    assert configs["baseline + fused_adamw"].fused_adamw and not configs["baseline + fused_adamw"].deferred_episode_stats


def test_bench_cli_writes_a_report(tmp_path: Path, capsys) -> None:
    code = main(["bench", "--task", "pendulum", "--profile", "full", "--num_envs", "[16]", "--scaling", "[8, 16]",
                 "--repeats", "2", "--iterations", "1", "--min_seconds", "0", "--compile", "false", "--threads", "1",
                 "--out", str(tmp_path)])
    assert code == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert {p.name for p in tmp_path.iterdir()} >= {"results.json", "results.md", "steps_per_s.png", "phases.png",
                                                    "scaling.png"}
    size = result["sizes"][0]
    in_process = [f for f in PerfConfig.switches() if not f.metadata["process_wide"]]
    assert len(size["configs"]) == 2 + 2 * (len(in_process) - 1)  # no compile rows with --compile false
    base, opt = size["configs"]["baseline"], size["configs"]["optimized"]
    assert opt["counts"]["syncs_per_step"] == 0 and opt["counts"]["syncs_per_minibatch"] == 0
    assert base["counts"]["syncs_per_step"] > 0 and base["counts"]["syncs_per_minibatch"] > 0
    assert len(opt["seconds_per_iteration"]) == 2 and opt["steps_per_s"]["min"] <= opt["steps_per_s"]["median"]
    assert base["ratio_to_baseline"]["median"] == 1.0
    assert opt["efficiency"] > 0 and size["floor_seconds"]["total"] > 0
    assert set(opt["phase_seconds"]) >= {"act", "env", "store", "update.backward", "update.optimizer"}
    assert [p["num_envs"] for p in result["scaling"]] == [8, 16]
    report = (tmp_path / "results.md").read_text()
    assert "| optimized - fused_adamw |" in report and "Seeds' view" in report
    assert "# syncfree bench: pendulum" in capsys.readouterr().out


def test_bench_rejects_bad_sizes(capsys) -> None:
    assert main(["bench", "--num_envs", "[0]"]) == 2
    assert "num_envs" in capsys.readouterr().err
