"""`syncfree plot RUN_DIR...`: learning curves of runs (their `metrics.jsonl`) against env steps, as a PNG.

Runs whose `config.yaml` differ only in their seed (and run name) form one curve: the mean over seeds with a band
of one standard deviation, at the env steps where every one of them has a value. Other runs are overlaid.
"""

from __future__ import annotations

import json
import statistics
import warnings
from pathlib import Path
from typing import Any

import yaml

from syncfree.errors import UserError
from syncfree.outputs import check_output_file

DEFAULT_METRICS = ("mean_return", "reward_per_agent_step", "mean_length", "value_loss", "steps_per_s")
"""Plotted when present in the runs (`mean_return` for single-agent tasks, `reward_per_agent_step` for grid-arena)."""


def read_run(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The run's records, and its config when it wrote one. One line naming the file when it cannot be read, and
    the line of a record that is no JSON object; record i is line i + 1 (only a cut last line is skipped)."""
    path = run_dir / "metrics.jsonl"
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise UserError(f"plot: cannot read {path} ({e.strerror or type(e).__name__})") from None
    except UnicodeDecodeError as e:
        raise UserError(f"plot: cannot read {path} (not UTF-8 text: byte {e.start})") from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number < len(lines):  # only the last line may be cut short (a run killed while writing it)
                raise UserError(f"plot: {path}, line {number}: not a JSON record") from None
            continue
        if not isinstance(record, dict):
            raise UserError(f"plot: {path}, line {number}: not a JSON record (a {type(record).__name__}, not an "
                            "object)")
        records.append(record)
    if not records:
        raise UserError(f"plot: {path} holds no record yet")
    return records, read_config(run_dir / "config.yaml")


def read_config(path: Path) -> dict[str, Any] | None:
    """The run's config (which runs are seeds of one config), None when the run wrote none; one line naming the
    file when it is no YAML mapping."""
    if not path.is_file():
        return None
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserError(f"plot: cannot read {path} ({' '.join(str(e).split())[:120]})") from None
    if not isinstance(config, dict):
        raise UserError(f"plot: {path}: not a run's config (a YAML {type(config).__name__}, not a mapping)")
    return config


def points(run_dir: Path, records: list[dict[str, Any]], name: str) -> list[tuple[float, float]]:
    """(env steps in millions, value) of the records that hold metric `name` (a metric missing from some records is
    normal); a value or an env step count that is no number is one line naming the file and line."""
    return [(number(run_dir, line, record, "env_steps") / 1e6, number(run_dir, line, record, name))
            for line, record in enumerate(records, 1) if name in record]


def number(run_dir: Path, line: int, record: dict[str, Any], key: str) -> float:
    """`record[key]`, which must be a number (JSON's true and false are not)."""
    value = record.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    found = f"{key} is {json.dumps(value)[:40]}, not a number" if key in record else f"the record has no {key}"
    raise UserError(f"plot: {run_dir / 'metrics.jsonl'}, line {line}: {found}")


def group_runs(runs: dict[Path, tuple[list[dict], dict | None]]) -> dict[str, list[Path]]:
    """Runs that differ only in seed (and name) share a group, labelled by the first run's name. Runs of one config
    and one seed are one experiment more than once (a resume in a folder of its own continues its run): each is a
    curve of its own, not averaged with the others as if it were another seed."""
    groups: dict[str, list[Path]] = {}
    keys: dict[str, str] = {}
    seeds: dict[str, set] = {}
    for run_dir, (_, config) in runs.items():
        if config is None:
            key = str(run_dir)
        else:
            seed = config.get("seed")
            config = {**config, "seed": None, "resume": None, "resume_in_place": None,
                      "log": {**config.get("log", {}), "run_name": None}}
            key = json.dumps(config, sort_keys=True)
            if seed in seeds.setdefault(key, set()):
                key = str(run_dir)
            seeds[key] = seeds.get(key, set()) | {seed}
        label = keys.setdefault(key, run_dir.name)
        groups.setdefault(label, []).append(run_dir)
    return groups


def mean_band(curves: list[list[tuple[float, float]]]) -> tuple[list[float], list[float], list[float]]:
    """x, mean and std over the curves, at the env steps every curve has a value for."""
    points = [dict(c) for c in curves]
    xs = sorted(set.intersection(*(set(p) for p in points)))
    columns = [[p[x] for p in points] for x in xs]
    means = [statistics.fmean(col) for col in columns]
    stds = [statistics.pstdev(col) if len(col) > 1 else 0.0 for col in columns]
    return xs, means, stds


def plot(run_dirs: list[Path], out: Path, metrics: list[str] | None = None, title: str = "") -> Path:
    check_output_file(out, "plot: --out")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {Path(d): read_run(Path(d)) for d in run_dirs}
    present = {name for records, _ in runs.values() for r in records for name in r}
    if metrics:
        missing = [m for m in metrics if m not in present]
        if missing:
            raise UserError(f"plot: no metric {missing[0]!r} in these runs; they have: {', '.join(sorted(present))}")
    else:
        metrics = [m for m in DEFAULT_METRICS if m in present]
    groups = group_runs(runs)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    for ax, name in zip(axes[0], metrics, strict=True):
        for label, members in groups.items():
            curves = [points(d, runs[d][0], name) for d in members]
            curves = [c for c in curves if c]
            if not curves:
                continue
            xs, means, stds = mean_band(curves)
            line = ax.plot(xs, means, lw=1.5, label=label + (f" ({len(curves)} seeds)" if len(curves) > 1 else ""))
            if len(curves) > 1:
                ax.fill_between(xs, [m - s for m, s in zip(means, stds, strict=True)],
                                [m + s for m, s in zip(means, stds, strict=True)], color=line[0].get_color(),
                                alpha=0.2, lw=0)
        ax.set_xlabel("env steps (millions)")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    try:
        with warnings.catch_warnings():  # the overflow warnings of such axes: the error below says it once
            warnings.simplefilter("ignore", RuntimeWarning)
            fig.tight_layout()
            out.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(out, dpi=110)
    except (ValueError, OverflowError) as e:  # values matplotlib cannot lay out (axes spanning +-1e308)
        raise UserError(f"plot: cannot draw {', '.join(metrics)} of these runs ({' '.join(str(e).split())[:100]})"
                        ) from None
    finally:
        plt.close(fig)
    return out
