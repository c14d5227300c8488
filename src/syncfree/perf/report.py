"""Bench results as JSON, a markdown report and PNG plots."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from syncfree.perf.phases import ALL_PHASES

HOURS = 1.0
"""Wall-clock budget for the seeds' view (env steps done in that time)."""
ITERATIONS = 100_000
"""Iteration count for the seeds' view (projected time to reach it)."""


def write(result: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "results.md"]
    paths[0].write_text(json.dumps(result, indent=1))
    paths[1].write_text(markdown(result))
    paths += plot(result, out_dir)
    return paths


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


def markdown(result: dict[str, Any]) -> str:
    m, b, t = result["machine"], result["bench"], result["train"]
    lines = [
        f"# syncfree bench: {b['task']}{' on ' + b['backend'] + ' physics' if b.get('backend') else ''} "
        f"({b['profile']} profile)",
        "",
        f"Machine: {m['device']}{' (' + m['gpu'] + ')' if 'gpu' in m else ''}, {m['processor']}, "
        f"{m['cpu_count']} cores, torch {m['torch']} ({m['torch_threads']} threads), Python {m['python']}. "
        f"Per iteration: {t['steps_per_env']} steps per env, {t['num_epochs']} epochs x {t['num_minibatches']} "
        f"minibatches. {b['repeats']} interleaved repeats, each measurement at least {b['iterations']} iterations "
        f"and {b.get('min_seconds', 0):g} s, after {b['warmup']} warm-up; bench wall time "
        f"{result['wall_seconds']:.0f} s.",
        "",
        f"Peak resident set of the bench process: {result.get('peak_rss_bytes', 0) / 2**20:,.0f} MiB.",
        "",
        "Counts (host syncs, aten ops, new storages) come from one untimed iteration; they see eager code only (a "
        "compiled configuration is counted with its hot functions run eagerly). Warm-up: the untimed first "
        "iterations, compile time included (a graph compiled for an earlier configuration is reused).",
        "Efficiency = compute floor time / measured time, the floor being env-only + policy-forward-only + "
        "update-only loops at the same sizes with the optimized kernels, measured in every repeat alongside the "
        "configurations (median).",
    ]
    for size in result["sizes"]:
        floor = size["floor_seconds"]
        lines += ["", f"## {size['num_envs']} envs ({size.get('iterations_per_measurement', b['iterations'])} "
                  "iterations per measurement)", "",
                  f"Floor: env {floor['env'] * 1e3:.1f} ms + policy forward {floor['policy_forward'] * 1e3:.1f} ms + "
                  f"update {floor['update'] * 1e3:.1f} ms per iteration = {_fmt(size['floor_steps_per_s'])} steps/s."
                  + _live_bytes(size),
                  "",
                  "| configuration | steps/s median (min–max) | × baseline (min–max) | efficiency | syncs/step | "
                  "ops/step | allocs/step | syncs/minibatch | ops/minibatch | allocs/minibatch | syncs/iteration | "
                  "bytes/env | warm-up s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, row in size["configs"].items():
            s, r, c = row["steps_per_s"], row["ratio_to_baseline"], row["counts"]
            lines.append(
                f"| {name} | {_fmt(s['median'])} ({_fmt(s['min'])}–{_fmt(s['max'])}) | {r['median']:.3f} "
                f"({r['min']:.3f}–{r['max']:.3f}) | {row['efficiency']:.2f} | {c['syncs_per_step']:g} | "
                f"{c['ops_per_step']:g} | {c['allocations_per_step']:g} | {c['syncs_per_minibatch']:g} | "
                f"{c['ops_per_minibatch']:g} | {c['allocations_per_minibatch']:g} | {c['syncs_per_iteration']} | "
                f"{row['memory']['bytes_per_env']:,.0f} | {row.get('warmup_seconds', float('nan')):.1f} |")
        lines += ["", "Phase breakdown (ms per iteration):", "",
                  "| configuration | " + " | ".join(ALL_PHASES) + " |", "|---|" + "---|" * len(ALL_PHASES)]
        for name in ("baseline", "optimized"):
            ph = size["configs"][name]["phase_seconds"]
            lines.append(f"| {name} | " + " | ".join(f"{ph.get(p, 0.0) * 1e3:.1f}" for p in ALL_PHASES) + " |")
        base, opt = size["configs"]["baseline"], size["configs"]["optimized"]
        b_sps, o_sps = base["steps_per_s"]["median"], opt["steps_per_s"]["median"]
        b_it, o_it = statistics.median(base["seconds_per_iteration"]), statistics.median(opt["seconds_per_iteration"])
        lines += ["", f"Seeds' view: in {HOURS:g} h the optimized trainer does {o_sps * 3600 * HOURS:,.0f} env "
                  f"steps, the baseline {b_sps * 3600 * HOURS:,.0f} ({o_sps / b_sps:.3f}x); {ITERATIONS:,} iterations take "
                  f"{_duration(o_it * ITERATIONS)} optimized vs {_duration(b_it * ITERATIONS)} baseline."]
    if result["scaling"]:
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
        ax.set_xlabel("env steps / s (median, min–max)")
        ax.set_title(f"{result['bench']['task']}, {size['num_envs']} envs, {result['machine']['device']}")
        ax.legend(loc="lower right")
    axes[0][0].invert_yaxis()
    fig.tight_layout()
    paths.append(out_dir / "steps_per_s.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = []
    bars = {p: [] for p in ALL_PHASES}
    for s in result["sizes"]:
        baseline_total = sum(s["configs"]["baseline"]["phase_seconds"].values()) or 1.0
        for name in ("baseline", "optimized"):
            labels.append(f"{name}\n{s['num_envs']} envs")
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
        ax.set_xscale("log", base=2)
        ax.set_xlabel("parallel envs")
        ax.set_ylabel("env steps / s")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        paths.append(out_dir / "scaling.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
