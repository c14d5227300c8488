"""Bench results as JSON, a markdown report and PNG plots."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from syncfree.bench.hardware import PEAK_SIZE
from syncfree.bench.matrix import SEEDS_BEFORE
from syncfree.core.phases import ALL_PHASES
from syncfree.core.switches import PerfConfig

HOURS = 1.0
"""Wall-clock budget for the seeds' view (env steps done in that time)."""
ITERATIONS = 100_000
"""Iteration count for the seeds' view (projected time to reach it)."""


def save_results(out_dir: Path, result: Any, report: str, show: bool = False) -> list[Path]:
    """`result` as `out_dir/results.json` and the markdown `report` as `out_dir/results.md` (the folder made if
    needed), and the report printed when `show`: how the bench and the scripts in `benchmarks/` leave a run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "results.md"]
    paths[0].write_text(json.dumps(result, indent=1))
    paths[1].write_text(report.rstrip("\n") + "\n")
    if show:
        print(report)
    return paths


def write(result: dict[str, Any], out_dir: Path) -> list[Path]:
    return save_results(out_dir, result, markdown(result)) + plot(result, out_dir)


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _duration(seconds: float) -> str:
    return f"{seconds / 86400:.2f} d" if seconds >= 86400 else f"{seconds / 3600:.2f} h"


def _live_bytes(size: dict[str, Any]) -> str:
    live = size.get("live_bytes")
    if live is None:
        return ""
    return (f" Live tensor bytes of all trainers: {live['after_warmup']:,} after warm-up, {live['after_timing']:,} "
            f"after {live['timed_iterations_per_config']} timed iterations each.")


def _heading(size: dict[str, Any], agents_per_env: int | None) -> str:
    if agents_per_env is None:
        return f"{size['num_envs']} envs"
    return f"{size['num_envs']} simulations x {agents_per_env} agents = {size['num_agents']:,} agents"


def _env_only(size: dict[str, Any]) -> str:
    """MettaGrid's own env-only speed and the adapter's, beside the training figure."""
    e = size["env_only"]
    raw, adapter = e["mettagrid_raw_steps_per_s"], e["adapter_steps_per_s"]
    trained = size["configs"]["optimized"]["steps_per_s"]["median"]
    return (f"Env only (random actions drawn beforehand, no policy; median of {e['runs']} alternated runs, "
            f"min–max): MettaGrid raw {_fmt(raw['median'])} ({_fmt(raw['min'])}–{_fmt(raw['max'])}) "
            f"agent steps/s, through the adapter (optimized switches) {_fmt(adapter['median'])} ({_fmt(adapter['min'])}–"
            f"{_fmt(adapter['max'])}); training (optimized) {_fmt(trained)} agent steps/s = "
            f"{trained / raw['median']:.1%} of MettaGrid raw.")


def _hardware(row: dict[str, Any]) -> str:
    hardware = row.get("hardware_fraction")
    if not hardware:
        return "–"
    return f"{hardware['fraction']:.2%} of {'bf16' if hardware['dtype'] == 'bfloat16' else 'fp32'}"


def markdown(result: dict[str, Any]) -> str:
    m, b = result["machine"], result["bench"]
    recurrent = result.get("recurrent")
    agents = recurrent["agents_per_env"] if recurrent else None
    unit = "agent steps" if recurrent else "steps"
    iteration, algorithm = result["iteration"], result["algorithm"]
    lines = [
        f"# syncfree bench: {b['task']}{' on ' + b['backend'] + ' physics' if b.get('backend') else ''} "
        f"({b['profile']} profile), {algorithm}",
        "",
        f"Machine: {m['device']}{' (' + m['gpu'] + ')' if 'gpu' in m else ''}, {m['processor']}, "
        f"{m['cpu_count']} cores, torch {m['torch']} ({m['torch_threads']} threads), Python {m['python']}. "
        f"Per iteration: {iteration}. {b['repeats']} interleaved repeats, each measurement at least {b['iterations']} iterations "
        f"and {b.get('min_seconds', 0):g} s, after {b['warmup']} warm-up; bench wall time "
        f"{result['wall_seconds']:.0f} s.",
        "",
        f"Peak resident set of the bench process: {result.get('peak_rss_bytes', 0) / 2**20:,.0f} MiB.",
        "",
        "Counts (host syncs, aten ops, new storages) come from one untimed iteration; they see eager code only (a "
        "compiled configuration is counted with its hot functions run eagerly). Warm-up: the untimed first "
        "iterations, compile time included (a graph compiled for an earlier configuration is reused).",
        "Floor efficiency = compute floor time / measured time, the floor being the trainer's own pieces run alone "
        "(env-only + policy-forward-only + update-only loops at the same sizes with the optimized kernels, measured "
        "in every repeat alongside the configurations; median).",
    ]
    peaks = result.get("matmul_peak_gflops")
    if peaks:
        lines += ["", "Hardware = steps/s x the policy's matrix-product FLOPs per step (rollout forward, and "
                  "forward and backward of every minibatch, from the layers' shapes) / the GFLOP/s of a "
                  f"{PEAK_SIZE} x {PEAK_SIZE} matrix product in the dtype the configuration computes in (bf16 where "
                  "autocast runs), measured on this device in this run: "
                  f"{peaks['float32']:.1f} GFLOP/s float32, {peaks['bfloat16']:.1f} bfloat16."]
    if recurrent:
        g = recurrent["grid"]
        lines += ["", f"Recurrent trainer (grid-arena): sizes count MettaGrid simulations ({g['map']} map, "
                  f"{g['width']} x {g['height']}, {agents} agents each, {g['max_steps']}-step episodes); steps/s are "
                  "agent steps/s. "
                  + ("Configurations with `compile` on (`optimized` and the rows that keep its `compile`) compile the "
                     "policy's rollout step and each minibatch's losses; the others run eagerly." if b.get("compile", True)
                     else "All configurations run eagerly (`--compile false`).")]
    if any(SEEDS_BEFORE in size["configs"] for size in result["sizes"]):
        names = ", ".join(f"`{f.name}`" for f in PerfConfig.switches()
                          if f.metadata["seed_before"] != f.metadata["baseline"])
        lines += ["", f"`{SEEDS_BEFORE}`: the baseline with the seeds' own code before their changes where it did "
                  f"more than the conventional code (`seed_before` for {names}; docs/switches.md says what each "
                  "does). Its ratio against `optimized` is the gain the seeds' own runs would see."]
    skipped = result.get("skipped_rows") or {}
    if skipped:
        by_reason: dict[str, list[str]] = {}
        for name, why in skipped.items():
            by_reason.setdefault(why, []).append(name)
        lines += ["", "Ablation rows left out because their switch changes nothing here (`syncfree switches --task "
                  f"{b['task']}`):", ""] + [f"- {why}: {', '.join(names)}" for why, names in by_reason.items()]
    for size in result["sizes"]:
        floor = size["floor_seconds"]
        lines += ["", f"## {_heading(size, agents)} ({size.get('iterations_per_measurement', b['iterations'])} "
                  "iterations per measurement)", "",
                  f"Floor: env {floor['env'] * 1e3:.1f} ms + policy forward {floor['policy_forward'] * 1e3:.1f} ms + "
                  f"update {floor['update'] * 1e3:.1f} ms per iteration = {_fmt(size['floor_steps_per_s'])} {unit}/s."
                  + _live_bytes(size)]
        if "flops_per_step" in size:
            f = size["flops_per_step"]
            lines += ["", f"Policy FLOPs per {unit[:-1]}: rollout forward {_fmt(f['rollout'])}, update "
                      f"{_fmt(f['update'])} (all epochs), {_fmt(f['rollout'] + f['update'])} in all."]
        if "env_only" in size:
            lines += ["", _env_only(size)]
        per_unit = "agent" if recurrent else "env"
        lines += ["",
                  f"| configuration | {unit}/s median (min–max) | × baseline (min–max) | floor efficiency | "
                  "hardware | syncs/step | ops/step | allocs/step | syncs/minibatch | ops/minibatch | "
                  f"allocs/minibatch | syncs/iteration | bytes/{per_unit} | warm-up s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, row in size["configs"].items():
            s, r, c = row["steps_per_s"], row["ratio_to_baseline"], row["counts"]
            lines.append(
                f"| {name} | {_fmt(s['median'])} ({_fmt(s['min'])}–{_fmt(s['max'])}) | {r['median']:.3f} "
                f"({r['min']:.3f}–{r['max']:.3f}) | {row['efficiency']:.2f} | {_hardware(row)} | "
                f"{c['syncs_per_step']:g} | "
                f"{c['ops_per_step']:g} | {c['allocations_per_step']:g} | {c['syncs_per_minibatch']:g} | "
                f"{c['ops_per_minibatch']:g} | {c['allocations_per_minibatch']:g} | {c['syncs_per_iteration']} | "
                f"{row['memory'].get(f'bytes_per_{per_unit}', row['memory']['bytes_per_env']):,.0f} | "
                f"{row.get('warmup_seconds', float('nan')):.1f} |")
        lines += ["", "Phase breakdown (ms per iteration):", "",
                  "| configuration | " + " | ".join(ALL_PHASES) + " |", "|---|" + "---|" * len(ALL_PHASES)]
        for name in ("baseline", "optimized"):
            ph = size["configs"][name]["phase_seconds"]
            lines.append(f"| {name} | " + " | ".join(f"{ph.get(p, 0.0) * 1e3:.1f}" for p in ALL_PHASES) + " |")
        base, opt = size["configs"]["baseline"], size["configs"]["optimized"]
        b_sps, o_sps = base["steps_per_s"]["median"], opt["steps_per_s"]["median"]
        b_it, o_it = statistics.median(base["seconds_per_iteration"]), statistics.median(opt["seconds_per_iteration"])
        lines += ["", f"Seeds' view: in {HOURS:g} h the optimized trainer does {o_sps * 3600 * HOURS:,.0f} "
                  f"{'agent' if recurrent else 'env'} steps, the baseline {b_sps * 3600 * HOURS:,.0f} ({o_sps / b_sps:.3f}x); {ITERATIONS:,} iterations take "
                  f"{_duration(o_it * ITERATIONS)} optimized vs {_duration(b_it * ITERATIONS)} baseline."]
    if result["scaling"] and recurrent:
        lines += ["", "## Scaling", "", "Agent steps/s; env only: MettaGrid raw and through the adapter (medians).",
                  "", "| simulations | agents | baseline | optimized | floor | optimized efficiency | env only: "
                  "MettaGrid raw | env only: adapter |", "|---|---|---|---|---|---|---|---|"]
        for p in result["scaling"]:
            e = p["env_only"]
            lines.append(f"| {p['num_envs']} | {p['num_agents']:,} | {_fmt(p['baseline']['steps_per_s'])} | "
                         f"{_fmt(p['optimized']['steps_per_s'])} | {_fmt(p['floor_steps_per_s'])} | "
                         f"{p['optimized']['efficiency']:.2f} | {_fmt(e['mettagrid_raw_steps_per_s']['median'])} | "
                         f"{_fmt(e['adapter_steps_per_s']['median'])} |")
    elif result["scaling"]:
        lines += ["", "## Scaling", "", "| envs | baseline steps/s | optimized steps/s | floor steps/s | "
                  "optimized efficiency |", "|---|---|---|---|---|"]
        for p in result["scaling"]:
            lines.append(f"| {p['num_envs']} | {_fmt(p['baseline']['steps_per_s'])} | {_fmt(p['optimized']['steps_per_s'])}"
                         f" | {_fmt(p['floor_steps_per_s'])} | {p['optimized']['efficiency']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    recurrent = result.get("recurrent")
    unit = "agent steps / s" if recurrent else "env steps / s"
    sizes = result["sizes"]
    names = list(sizes[0]["configs"])
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes) + 3, 0.35 * len(names) + 1.5), sharey=True,
                             squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        rows = [size["configs"][n]["steps_per_s"] for n in names]
        med = [r["median"] for r in rows]
        err = [[m - r["min"] for m, r in zip(med, rows, strict=True)], [r["max"] - m for m, r in zip(med, rows, strict=True)]]
        ax.barh(names, med, xerr=err, color=["#888" if n == "baseline" else "#2a7" for n in names])
        ax.axvline(size["floor_steps_per_s"], color="k", ls="--", lw=1, label="compute floor")
        ax.set_xlabel(f"{unit} (median, min–max)")
        what = f"{size['num_envs']} sims ({size['num_agents']} agents)" if recurrent else f"{size['num_envs']} envs"
        ax.set_title(f"{result['bench']['task']}, {what}, {result['machine']['device']}")
        ax.legend(loc="lower right")
    axes[0][0].invert_yaxis()
    fig.tight_layout()
    paths.append(out_dir / "steps_per_s.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = []
    bars: dict[str, list[float]] = {p: [] for p in ALL_PHASES}
    for s in result["sizes"]:
        baseline_total = sum(s["configs"]["baseline"]["phase_seconds"].values()) or 1.0
        for name in ("baseline", "optimized"):
            labels.append(f"{name}\n{s['num_envs']} {'sims' if recurrent else 'envs'}")
            for p in ALL_PHASES:
                bars[p].append(s["configs"][name]["phase_seconds"].get(p, 0.0) / baseline_total)
    bottoms = [0.0] * len(labels)
    for p in ALL_PHASES:
        ax.bar(labels, bars[p], bottom=bottoms, label=p)
        bottoms = [b + v for b, v in zip(bottoms, bars[p], strict=True)]
    ax.set_ylabel("iteration time / baseline's at the same size")
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    paths.append(out_dir / "phases.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    if result["scaling"]:
        fig, ax = plt.subplots(figsize=(6, 4))
        envs = [p["num_envs"] for p in result["scaling"]]
        for key, style in (("baseline", "o-"), ("optimized", "s-")):
            ax.plot(envs, [p[key]["steps_per_s"] for p in result["scaling"]], style, label=key)
        ax.plot(envs, [p["floor_steps_per_s"] for p in result["scaling"]], "k--", label="compute floor")
        if recurrent:
            ax.plot(envs, [p["env_only"]["mettagrid_raw_steps_per_s"]["median"] for p in result["scaling"]], "k:",
                    label="env only: MettaGrid raw")
            ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("MettaGrid simulations" if recurrent else "parallel envs")
        ax.set_ylabel(unit)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        paths.append(out_dir / "scaling.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
