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


def _heading(size: dict[str, Any], envs: dict[str, str]) -> str:
    """A size in the task's words: its envs, and their rows where an env has several."""
    if size["num_rows"] == size["num_envs"]:
        return f"{size['num_envs']} {envs['envs']}"
    return (f"{size['num_envs']} {envs['envs']} x {size['num_rows'] // size['num_envs']} {envs['rows']} = "
            f"{size['num_rows']:,} {envs['rows']}")


def _env_only(size: dict[str, Any], row: str) -> str:
    """The env's own stepping speed in each loop its task measures, beside the training figure (compared with the
    first loop's, the env alone)."""
    e = size["env_only"]
    loops = [f"{name} {_fmt(s['median'])} ({_fmt(s['min'])}–{_fmt(s['max'])})" for name, s in e["steps_per_s"].items()]
    alone, alone_sps = next(iter(e["steps_per_s"].items()))
    trained = size["configs"]["optimized"]["steps_per_s"]["median"]
    return (f"Env only ({row} steps/s; random actions drawn beforehand, no policy, the optimized configuration's "
            f"switches; median of {e['runs']} alternated runs, min–max): {', '.join(loops)}; training (optimized) "
            f"{_fmt(trained)} = {trained / alone_sps['median']:.1%} of {alone}.")


def _hardware(row: dict[str, Any]) -> str:
    hardware = row.get("hardware_fraction")
    if not hardware:
        return "–"
    return f"{hardware['fraction']:.2%} of {'bf16' if hardware['dtype'] == 'bfloat16' else 'fp32'}"


def markdown(result: dict[str, Any]) -> str:
    m, b, envs = result["machine"], result["bench"], result["envs"]
    row, unit = envs["row"], f"{envs['row']} steps"
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
    lines += ["", f"Sizes count {envs['envs']}{' (' + envs['summary'] + ')' if envs['summary'] else ''}; steps/s are "
              f"{unit}/s. "
              + ("Configurations with `compile` on (`optimized` and the rows that keep its `compile`) run the "
                 "algorithm's hot functions compiled; the others run eagerly." if b["compile"]
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
        lines += ["", f"## {_heading(size, envs)} ({size.get('iterations_per_measurement', b['iterations'])} "
                  "iterations per measurement)", "",
                  f"Floor: env {floor['env'] * 1e3:.1f} ms + policy forward {floor['policy_forward'] * 1e3:.1f} ms + "
                  f"update {floor['update'] * 1e3:.1f} ms per iteration = {_fmt(size['floor_steps_per_s'])} {unit}/s."
                  + _live_bytes(size)]
        if "flops_per_step" in size:
            f = size["flops_per_step"]
            lines += ["", f"Policy FLOPs per {row} step: rollout forward {_fmt(f['rollout'])}, update "
                      f"{_fmt(f['update'])} (all epochs), {_fmt(f['rollout'] + f['update'])} in all."]
        if "env_only" in size:
            lines += ["", _env_only(size, row)]
        lines += ["",
                  f"| configuration | {unit}/s median (min–max) | × baseline (min–max) | floor efficiency | "
                  "hardware | syncs/step | ops/step | allocs/step | syncs/minibatch | ops/minibatch | "
                  f"allocs/minibatch | syncs/iteration | bytes/{row} | warm-up s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, config in size["configs"].items():
            s, r, c = config["steps_per_s"], config["ratio_to_baseline"], config["counts"]
            lines.append(
                f"| {name} | {_fmt(s['median'])} ({_fmt(s['min'])}–{_fmt(s['max'])}) | {r['median']:.3f} "
                f"({r['min']:.3f}–{r['max']:.3f}) | {config['efficiency']:.2f} | {_hardware(config)} | "
                f"{c['syncs_per_step']:g} | "
                f"{c['ops_per_step']:g} | {c['allocations_per_step']:g} | {c['syncs_per_minibatch']:g} | "
                f"{c['ops_per_minibatch']:g} | {c['allocations_per_minibatch']:g} | {c['syncs_per_iteration']} | "
                f"{config['memory']['bytes_per_row']:,.0f} | {config.get('warmup_seconds', float('nan')):.1f} |")
        lines += ["", "Phase breakdown (ms per iteration):", "",
                  "| configuration | " + " | ".join(ALL_PHASES) + " |", "|---|" + "---|" * len(ALL_PHASES)]
        for name in ("baseline", "optimized"):
            ph = size["configs"][name]["phase_seconds"]
            lines.append(f"| {name} | " + " | ".join(f"{ph.get(p, 0.0) * 1e3:.1f}" for p in ALL_PHASES) + " |")
        base, opt = size["configs"]["baseline"], size["configs"]["optimized"]
        b_sps, o_sps = base["steps_per_s"]["median"], opt["steps_per_s"]["median"]
        b_it, o_it = statistics.median(base["seconds_per_iteration"]), statistics.median(opt["seconds_per_iteration"])
        if "gradient_steps_per_s" in opt:
            lines += ["", "Gradient steps/s (median; one per minibatch of each epoch, distilled chunk or off-policy "
                      f"update): optimized {_fmt(opt['gradient_steps_per_s'])}, baseline "
                      f"{_fmt(base['gradient_steps_per_s'])}."]
        lines += ["", f"Seeds' view: in {HOURS:g} h the optimized trainer does {o_sps * 3600 * HOURS:,.0f} "
                  f"{unit}, the baseline {b_sps * 3600 * HOURS:,.0f} ({o_sps / b_sps:.3f}x); {ITERATIONS:,} iterations take "
                  f"{_duration(o_it * ITERATIONS)} optimized vs {_duration(b_it * ITERATIONS)} baseline."]
    if result["scaling"]:
        lines += ["", "## Scaling", "", f"Medians, in {unit}/s.", "", *_scaling_table(result["scaling"], envs)]
    return "\n".join(lines) + "\n"


def _scaling_table(points: list[dict[str, Any]], envs: dict[str, str]) -> list[str]:
    """Steps/s against the size: a column of rows where an env has several, and of each env-only loop."""
    several = any(p["num_rows"] != p["num_envs"] for p in points)
    loops = list(points[0].get("env_only", {"steps_per_s": {}})["steps_per_s"])
    header = [envs["envs"], *([envs["rows"]] if several else []), "baseline", "optimized", "floor",
              "optimized efficiency", *(f"env only: {name}" for name in loops)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for p in points:
        cells = [str(p["num_envs"]), *([f"{p['num_rows']:,}"] if several else []),
                 *(_fmt(p[name]["steps_per_s"]) for name in ("baseline", "optimized")), _fmt(p["floor_steps_per_s"]),
                 f"{p['optimized']['efficiency']:.2f}",
                 *(_fmt(p["env_only"]["steps_per_s"][name]["median"]) for name in loops)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    envs = result["envs"]
    unit = f"{envs['row']} steps / s"
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
        what = f"{size['num_envs']} {envs['envs']}" + (f" ({size['num_rows']:,} {envs['rows']})"
                                                        if size["num_rows"] != size["num_envs"] else "")
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
            labels.append(f"{name}\n{s['num_envs']} {envs['envs']}")
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
        counts = [p["num_envs"] for p in result["scaling"]]
        for key, style in (("baseline", "o-"), ("optimized", "s-")):
            ax.plot(counts, [p[key]["steps_per_s"] for p in result["scaling"]], style, label=key)
        ax.plot(counts, [p["floor_steps_per_s"] for p in result["scaling"]], "k--", label="compute floor")
        if "env_only" in result["scaling"][0]:  # the env alone, far above the trainers
            alone = next(iter(result["scaling"][0]["env_only"]["steps_per_s"]))
            ax.plot(counts, [p["env_only"]["steps_per_s"][alone]["median"] for p in result["scaling"]], "k:",
                    label=f"env only: {alone}")
            ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"parallel {envs['envs']}")
        ax.set_ylabel(unit)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        paths.append(out_dir / "scaling.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
