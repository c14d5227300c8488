"""Plot learning curves from a run's metrics.jsonl (one panel per metric, x = env steps).

    python benchmarks/plot_training.py runs/g1-track-demo --metrics mean_length metrics/error_body_pos \
        --out benchmarks/results/g1-track-learning-cpu/curve.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"plot_training: {path} not found")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot(records: list[dict], metrics: list[str], title: str, out: Path) -> None:
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    for ax, name in zip(axes[0], metrics, strict=True):
        points = [(r["env_steps"] / 1e6, r[name]) for r in records if name in r]
        if not points:
            raise SystemExit(f"plot_training: no metric {name!r} in the run (have {', '.join(sorted(records[-1]))})")
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, lw=1.5)
        ax.set_xlabel("env steps (millions)")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--metrics", nargs="+", default=["mean_return", "mean_length"])
    parser.add_argument("--title", default="")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    plot(read_metrics(args.run_dir), args.metrics, args.title or args.run_dir.name, args.out)


if __name__ == "__main__":
    main()
