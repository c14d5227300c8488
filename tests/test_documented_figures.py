"""The quick learning figures of the docs, rerun: a preset's documented result must come out again.

CartPole's figure is `tests/test_learning.py::test_cartpole_is_solved_within_500k_steps` (3 seeds, each ≥ 475 of
the documented 500). Pendulum's (docs/tasks.md, from `benchmarks/preset_seeds.py`) is rerun here with the very
command that produced it: `syncfree train --task pendulum --seed 0` (with the default `perf.compile`, as a user
runs it), then
`syncfree eval` of its checkpoint over 20 episodes."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "preset-seeds-cpu" / "results.json"


def documented(task: str) -> list[float]:
    """The per-seed evaluation returns the docs' table of presets is drawn from."""
    return [r["eval_return"] for r in json.loads(RESULTS.read_text()) if r["task"] == task]


def test_the_documented_pendulum_figure_is_the_one_in_the_results() -> None:
    values = documented("pendulum")
    row = f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}".replace("-", "−")
    assert len(values) >= 3 and row in (ROOT / "docs" / "tasks.md").read_text(), row



def test_the_documented_grid_arena_figures_are_the_ones_in_the_results() -> None:
    """docs/gridworld.md's five-seed table (each window's mean ± std over the seeds) and final evaluations, greedy
    and sampled (the latter from a rerun that reproduced the first), are `benchmarks/learning_seeds.py`'s output,
    digit for digit."""
    result = json.loads((ROOT / "benchmarks/results/grid-arena-learning-seeds-cpu/preset.json").read_text())
    windows = [result["windows"][w] for w in ("1-5", "6-10", "11-20", "21-30", "31-50", "51-75", "76-100")]
    row = " | ".join(f"{w['mean']:.3f} ± {w['sd']:.3f}" for w in windows)
    evals = [run["eval_return"] for run in result["runs"]]
    final = f"{statistics.mean(evals):.1f} ± {statistics.stdev(evals):.1f}"
    doc = " ".join((ROOT / "docs" / "gridworld.md").read_text().split())  # line breaks as spaces
    assert len(result["seeds"]) >= 3 and f"| reward / agent / step | {row} |" in doc, row
    assert f"mean episode return {final} over the seeds" in doc, final
    rerun = json.loads((ROOT / "benchmarks/results/grid-arena-learning-seeds-cpu/preset-sampled-eval.json").read_text())
    assert [(r["seed"], r["figure"], r["eval_return"]) for r in rerun["runs"]] == [
        (r["seed"], r["figure"], r["eval_return"]) for r in result["runs"]]  # "reproduced ... bit for bit"
    sampled = [run["eval_return_sampled"] for run in rerun["runs"]]
    assert all(s > g for s, g in zip(sampled, evals, strict=True))  # "each seed's policy earns more"
    figure = f"{statistics.mean(sampled):.1f} ± {statistics.stdev(sampled):.1f} over the seeds"
    assert f"{figure} ({', '.join(f'{v:.1f}' for v in sampled)})" in doc, figure

@pytest.mark.slow
def test_pendulum_preset_rerun_lands_inside_its_documented_range(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The range: the documented mean ± 2 standard deviations over its seeds (−344.3 to −87.3 for −215.8 ± 64.2).
    An untrained policy scores about −1,200 and the collapses the old adaptive preset had about −730."""
    monkeypatch.delenv("TORCH_COMPILE_DISABLE", raising=False)  # the documented command, compiling where auto does
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    sys.modules.pop("preset_seeds", None)
    from preset_seeds import run

    values = documented("pendulum")
    mean, sd = statistics.mean(values), statistics.stdev(values)
    rerun = run("pendulum", 0, tmp_path)
    assert rerun["env_steps"] == 2_457_600
    assert mean - 2 * sd <= rerun["eval_return"] <= mean + 2 * sd, (rerun, values)


PARITY_TABLES = [("learning-parity-cpu", task) for task in
                 ("pendulum", "point-mass", "g1-track", "gym:Hopper-v5", "gym:HalfCheetah-v5")] + [
    ("learning-parity-bf16-cpu", "g1-track"), ("learning-parity-fp32-cpu", "g1-track"),
    ("learning-parity-halfcheetah-cpu", "gym:HalfCheetah-v5"), ("learning-parity-hopper-bf16-cpu", "gym:Hopper-v5"),
    ("offpolicy-g1-track-unit-cpu", "g1-track"), ("offpolicy-g1-track-unit-fastsac-start-cpu", "g1-track"),
    ("offpolicy-g1-track-symmetric-cpu", "g1-track"), ("offpolicy-g1-track-unit-rerun-cpu", "g1-track"),
    ("offpolicy-g1-track-fastsac-networks-cpu", "g1-track"), ("offpolicy-g1-track-equal-time-cpu", "g1-track"),
    ("offpolicy-g1-track-td3-mixed-noise-cpu", "g1-track"), ("offpolicy-g1-track-pre-tanh-penalty-cpu", "g1-track"),
    ("offpolicy-mjlab-g1-velocity-cpu", "mjlab:Mjlab-Velocity-Flat-Unitree-G1"),
    ("offpolicy-mjlab-g1-velocity-compiled-cpu", "mjlab:Mjlab-Velocity-Flat-Unitree-G1"),
    ("offpolicy-mjlab-g1-velocity-pre-tanh-penalty-cpu", "mjlab:Mjlab-Velocity-Flat-Unitree-G1")]


def test_the_documented_joint_limit_bounds_figures_are_the_ones_in_the_results() -> None:
    """docs/learning.md's SAC and TD3 with joint-limit bounds on g1-track: each learner's final mean ± half-width."""
    summary = json.loads((ROOT / "benchmarks/results/offpolicy-g1-track-cpu/result.json").read_text())["g1-track"]
    doc = (ROOT / "docs" / "learning.md").read_text().replace("−", "-")
    for name, label in (("syncfree-sac", "SAC"), ("syncfree-td3", "TD3")):
        row = summary[name]
        assert f"{label} {row['final_mean']:.2f} ± {row['ci_half']:.2f}" in doc, name


@pytest.mark.parametrize(("folder", "task"), PARITY_TABLES)
def test_the_documented_parity_figures_are_the_ones_in_the_results(folder: str, task: str) -> None:
    """Every learner's final return (mean ± 95 % half-width) and per-seed returns in docs/learning.md are
    `benchmarks/learning_parity.py`'s summary of the runs in the folder, digit for digit (formatted as its report)."""
    summary = json.loads((ROOT / "benchmarks" / "results" / folder / "result.json").read_text())[task]
    learners = {name: row for name, row in summary.items() if "final_mean" in row}
    small = max(abs(v) for row in learners.values() for v in row["per_seed"]) < 100
    digits, seed_digits = (2, 2) if small else (1, 0)
    doc = (ROOT / "docs" / "learning.md").read_text().replace("−", "-")
    assert f"results/{folder}/" in doc
    for name, row in learners.items():
        cell = (f"| {row['final_mean']:.{digits}f} ± {row['ci_half']:.{digits}f} | "
                f"{', '.join(f'{v:.{seed_digits}f}' for v in row['per_seed'])} |")
        assert cell in doc, (name, cell)


def test_the_documented_optimizer_figures_are_the_ones_in_the_results() -> None:
    """docs/learning.md's table of optimizers on pendulum is `benchmarks/learning_seeds.py`'s output (each final
    deterministic return, their mean and standard deviation over the seeds)."""
    page = (ROOT / "docs" / "learning.md").read_text()
    for name in ("adam", "muon", "schedule_free_adamw"):
        result = json.loads((ROOT / f"benchmarks/results/optimizers-pendulum-cpu/{name}.json").read_text())
        assert result["settings"] == {"ppo.optimizer": name}
        values = [run["eval_return"] for run in result["runs"]]
        figures = f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f} | " + ", ".join(
            f"{v:.1f}" for v in values)
        assert f"| {name} | {figures.replace('-', '−')} |" in page, name


def test_the_documented_hopper_optimizer_figures_are_the_ones_in_the_results() -> None:
    """docs/learning.md's Hopper-v5 table of optimizers (one run per file and seed) is `benchmarks/learning_seeds.py`'s
    output, and each optimizer has its 3 seeds."""
    page = (ROOT / "docs" / "learning.md").read_text()
    folder = ROOT / "benchmarks/results/optimizers-hopper-cpu"
    for name in ("adam", "muon", "schedule_free_adamw"):
        results = [json.loads((folder / f"{name}-{seed}.json").read_text()) for seed in range(3)]
        assert all(r["settings"] == {"ppo.optimizer": name} and r["task"] == "gym:Hopper-v5" for r in results)
        values = [r["runs"][0]["eval_return"] for r in results]
        assert [r["runs"][0]["seed"] for r in results] == [0, 1, 2]
        figures = f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f} | " + ", ".join(
            f"{v:.1f}" for v in values)
        assert f"| {name} | {figures} |" in page, name


@pytest.mark.parametrize(("algorithm", "env", "cell"), [
    ("sac", "HalfCheetah", "HalfCheetah-v5 {mean} ± {half} (95 %, below), in float32"),
    ("td3", "HalfCheetah", "HalfCheetah-v5 **{mean} ± {half}** (95 %, below), in float32"),
    ("sac", "Hopper", "Hopper-v5 {mean} ± {half} (95 %; below); HalfCheetah"),
    ("td3", "Hopper", "Hopper-v5 {mean} ± {half} (95 %; below) |"),
])
def test_the_documented_gymnasium_preset_figures_are_the_ones_in_the_results(algorithm: str, env: str,
                                                                              cell: str) -> None:
    """docs/off-policy.md's SAC and TD3 on HalfCheetah-v5 and Hopper-v5 (each seed's mean evaluation over the last
    10 % of the run, their mean and 95 % t-interval half-width, and the final policies' returns) are
    `benchmarks/learning_seeds.py --eval_every 94`'s output, 3 seeds of 300,032 env steps of the `gym:` preset as it
    was when they ran (SAC's with 1-step returns then)."""
    name = f"benchmarks/results/off-policy-presets-cpu/{algorithm}-{env.lower()}.json"
    result = json.loads((ROOT / name).read_text())
    assert result["task"] == f"gym:{env}-v5" and result["algorithm"] == algorithm and result["settings"] == {}
    assert [run["seed"] for run in result["runs"]] == [0, 1, 2]
    assert all(run["last_record"]["env_steps"] == 300_032 for run in result["runs"])
    late = [run["eval_return_late"] for run in result["runs"]]
    assert all(len([e for e in run["evaluations"] if e["iteration"] >= 0.9 * 4688]) == 5 for run in result["runs"])
    half = 4.303 * statistics.stdev(late) / len(late) ** 0.5  # Student's t, 2 degrees of freedom
    page = re.sub(r"(\d),(\d{3})", r"\1\2", " ".join((ROOT / "docs" / "off-policy.md").read_text().split()))
    assert cell.format(mean=f"{statistics.mean(late):.1f}", half=f"{half:.1f}") in page
    assert "averaged " + ", ".join(f"{v:.1f}" for v in late[:2]) + f" and {late[2]:.1f}" in page
    final = [run["eval_return"] for run in result["runs"]]
    assert "the final policies alone: " + ", ".join(f"{v:.1f}" for v in final[:2]) + f" and {final[2]:.1f}" in page


@pytest.mark.parametrize(("file", "settings"), [
    ("sac-hopper-n-step-3.json", {"sac.n_step": 3}),
    ("sac-halfcheetah-n-step-3.json", {"sac.n_step": 3}),
    ("sac-hopper-layer-norm.json", {"policy.layer_norm": True}),
    ("td3-halfcheetah-autocast-auto.json", {"perf.autocast": "auto"}),
])
def test_the_documented_gymnasium_variant_figures_are_the_ones_in_the_results(file: str,
                                                                              settings: dict[str, object]) -> None:
    """docs/off-policy.md's runs of a `gym:` preset with other settings (3-step returns, the SAC preset's now;
    `LayerNorm` networks; bfloat16 gradient steps): each seed's mean evaluation over the last 10 %, their mean and 95 % t-interval
    half-width, and the final policies' returns are the merged `learning_seeds.py --eval_every 94` output."""
    result = json.loads((ROOT / "benchmarks/results/off-policy-presets-cpu" / file).read_text())
    assert result["settings"] == settings and [run["seed"] for run in result["runs"]] == [0, 1, 2]
    assert all(run["last_record"]["env_steps"] == 300_032 for run in result["runs"])
    assert all(len([e for e in run["evaluations"] if e["iteration"] >= 0.9 * 4688]) == 5 for run in result["runs"])
    late = [run["eval_return_late"] for run in result["runs"]]
    half = 4.303 * statistics.stdev(late) / len(late) ** 0.5
    page = re.sub(r"(\d),(\d{3})", r"\1\2", " ".join((ROOT / "docs" / "off-policy.md").read_text().split()))
    mean = f"{statistics.mean(late):.1f} ± {half:.1f}"
    assert f"mean {mean} (95 % t-interval)" in page or f"mean **{mean}** (95 % t-interval)" in page
    assert "averaged " + ", ".join(f"{v:.1f}" for v in late[:2]) + f" and {late[2]:.1f}" in page
    final = [run["eval_return"] for run in result["runs"]]
    assert "final policies " + ", ".join(f"{v:.1f}" for v in final[:2]) + f" and {final[2]:.1f}" in page


def sb3_runs_against_the_preset(theirs: dict[str, Any], ours: dict[str, Any],
                                monkeypatch: pytest.MonkeyPatch) -> tuple[str, float, float, float]:
    """Checks `benchmarks/sac_vs_sb3.py --preset --libraries sb3`'s runs (`theirs`: seeds 0-2 of 300,032 env steps,
    evaluated every 94 iterations) and their per-seed means over the last 10 % and mean ± 95 % t half-width on
    docs/off-policy.md; returns the page (thousands' commas dropped, minus signs as hyphens) and the bootstrap
    difference of the preset's runs (`ours`, `learning_seeds.py`) minus them, with its interval."""
    assert theirs["preset"] and theirs["steps"] == 300_032 and theirs["eval_every"] == 94
    assert [run["seed"] for run in theirs["runs"]] == [0, 1, 2] and {r["library"] for r in theirs["runs"]} == {"sb3"}
    assert all(len([i for i, _ in run["evaluations"] if i >= 0.9 * 4688]) == 5 for run in theirs["runs"])
    late = [run["return_late"] for run in theirs["runs"]]
    half = 4.303 * statistics.stdev(late) / len(late) ** 0.5  # Student's t, 2 degrees of freedom
    page = re.sub(r"(\d),(\d{3})", r"\1\2", " ".join((ROOT / "docs" / "off-policy.md").read_text().split()))
    page = page.replace("−", "-")
    assert "averaged " + ", ".join(f"{v:.1f}" for v in late[:2]) + f" and {late[2]:.1f}" in page
    assert f"mean {statistics.mean(late):.1f} ± {half:.1f} (95 % t-interval)" in page
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from rsl_rl_adapter_parity import bootstrap_ci

    mine = [run["eval_return_late"] for run in ours["runs"]]
    low, high = bootstrap_ci(mine, late)
    return page, statistics.mean(mine) - statistics.mean(late), low, high


def test_the_documented_sac_against_sb3_with_3_step_returns_figures_are_the_ones_in_the_results(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/off-policy.md's Hopper-v5 comparison of the `gym:` preset with Stable-Baselines3, both with 3-step
    returns: SB3's per-seed means over the last 10 %, their mean and 95 % t-interval, and the bootstrap interval of
    syncfree's preset minus SB3 are `benchmarks/sac_vs_sb3.py --preset`'s output and the preset's result file."""
    theirs = json.loads((ROOT / "benchmarks/results/sac-vs-sb3-hopper-cpu/sb3-300k-n-step-3.json").read_text())
    ours = json.loads((ROOT / "benchmarks/results/off-policy-presets-cpu/sac-hopper-n-step-3.json").read_text())
    assert theirs["env"] == "Hopper-v5" and theirs["layout"]["n_step"] == 3 == ours["settings"]["sac.n_step"]
    page, difference, low, high = sb3_runs_against_the_preset(theirs, ours, monkeypatch)
    assert (f"syncfree minus SB3 with 3-step returns is {difference:+.1f}, "
            f"bootstrap interval [{low:+.1f}, {high:+.1f}]") in page


def test_the_documented_halfcheetah_sac_against_sb3_with_3_step_returns_figures_are_the_ones_in_the_results(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/off-policy.md's HalfCheetah-v5 comparison of the `gym:` preset with Stable-Baselines3, both with 3-step
    returns: SB3's per-seed and mean figures, the bootstrap interval of the preset minus SB3, and of SB3's 3-step
    runs minus its 1-step ones (the claim that 3-step returns lowered its figure)."""
    folder = ROOT / "benchmarks/results/sac-vs-sb3-halfcheetah-cpu"
    theirs = json.loads((folder / "sb3-300k-n-step-3.json").read_text())
    ours = json.loads((ROOT / "benchmarks/results/off-policy-presets-cpu/sac-halfcheetah-n-step-3.json").read_text())
    assert theirs["env"] == "HalfCheetah-v5" and theirs["layout"]["n_step"] == 3 == ours["settings"]["sac.n_step"]
    page, difference, low, high = sb3_runs_against_the_preset(theirs, ours, monkeypatch)
    assert (f"syncfree minus SB3 with 3-step returns on HalfCheetah-v5 is {difference:+.1f}, "
            f"bootstrap interval [{low:+.1f}, {high:+.1f}]") in page and low > 0
    from rsl_rl_adapter_parity import bootstrap_ci

    three = [run["return_late"] for run in theirs["runs"]]
    one = [run["return_late"] for run in json.loads((folder / "sb3-300k.json").read_text())["runs"]]
    low, high = bootstrap_ci(three, one)
    assert high < 0 and (f"lowered SB3's figure there (minus its 1-step runs: "
                         f"{statistics.mean(three) - statistics.mean(one):+.1f}, [{low:+.1f}, {high:+.1f}])") in page


def test_the_documented_speed_against_sb3_with_3_step_returns_is_the_one_in_the_results() -> None:
    """docs/off-policy.md's compiled HalfCheetah-v5 speeds with the preset's 3-step returns in both libraries: each
    seed's steady env steps/s, their means ± SD and the per-seed ratio are `sac_vs_sb3.py`'s output."""
    run = json.loads((ROOT / "benchmarks/results/sac-vs-sb3-halfcheetah-bf16-cpu/auto-n-step-3.json").read_text())
    assert run["layout"]["n_step"] == 3 and run["compile"] == "step" and run["autocast"] == "auto"
    rates = {name: [r["steady_steps_per_s"] for r in run["runs"] if r["library"] == name] for name in ("syncfree", "sb3")}
    ratios = [a / b for a, b in zip(rates["syncfree"], rates["sb3"], strict=True)]
    page = " ".join((ROOT / "docs" / "off-policy.md").read_text().split())

    def listed(values: list[float]) -> str:
        return ", ".join(f"{v:.1f}" for v in values[:2]) + f" and {values[2]:.1f}"

    assert (f"syncfree {listed(rates['syncfree'])} env steps/s once compiled ({statistics.mean(rates['syncfree']):.1f}"
            f" ± {statistics.stdev(rates['syncfree']):.1f}), SB3 {listed(rates['sb3'])} "
            f"({statistics.mean(rates['sb3']):.1f} ± {statistics.stdev(rates['sb3']):.1f}): "
            f"{statistics.mean(ratios):.2f}x ± {statistics.stdev(ratios):.2f} per seed") in page


def test_the_documented_sac_against_sb3_figures_are_the_ones_in_the_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/off-policy.md's HalfCheetah-v5 comparison with Stable-Baselines3: SB3's per-seed means over the last
    10 %, their mean and 95 % t-interval, the bootstrap interval of syncfree's preset minus SB3, and the speeds of
    `speed.json` are `benchmarks/sac_vs_sb3.py`'s output."""
    folder = ROOT / "benchmarks/results/sac-vs-sb3-halfcheetah-cpu"
    theirs = json.loads((folder / "sb3-300k.json").read_text())
    ours = json.loads((ROOT / "benchmarks/results/off-policy-presets-cpu/sac-halfcheetah.json").read_text())
    assert theirs["env"] == "HalfCheetah-v5" and theirs["layout"]["envs"] * theirs["layout"]["steps_per_env"] == 64
    page, difference, low, high = sb3_runs_against_the_preset(theirs, ours, monkeypatch)
    assert f"syncfree minus SB3 is {difference:.1f}, bootstrap interval [{low:.1f}, +{high:.1f}]" in page
    speed = json.loads((folder / "speed.json").read_text())
    rates = {name: [r["steps_per_s"] for r in speed["runs"] if r["library"] == name] for name in ("syncfree", "sb3")}
    ratios = [a / b for a, b in zip(rates["syncfree"], rates["sb3"], strict=True)]
    assert (f"syncfree {statistics.mean(rates['syncfree']):.0f} ± {statistics.stdev(rates['syncfree']):.0f} env "
            f"steps/s, SB3 {statistics.mean(rates['sb3']):.0f} ± {statistics.stdev(rates['sb3']):.0f}, "
            f"{statistics.mean(ratios):.2f}x ± {statistics.stdev(ratios):.2f}") in page
