"""A study's results: the table of its best trials, `best.yaml` (the best trial's config, runnable as `syncfree train
--config best.yaml`), and its plots as PNG files (optimization history, parameter importances)."""

from __future__ import annotations

import importlib.util
import logging
import warnings
from pathlib import Path
from typing import Any

from syncfree.config import to_dict
from syncfree.errors import UserError
from syncfree.tuning.trial import StudySettings, trial_config

log = logging.getLogger("syncfree")


def ranked(study: Any, objectives: tuple[str, ...]) -> list[Any]:
    """The finished trials, best first: by return; with several objectives the Pareto front only, by return."""
    from optuna.trial import TrialState

    if len(objectives) > 1:
        trials = list(study.best_trials)
    else:
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return sorted(trials, key=lambda t: -t.values[0])


def table(study: Any, objectives: tuple[str, ...], top: int = 5) -> str:
    """The best `top` trials (with several objectives, the Pareto front) as a text table."""
    trials = ranked(study, objectives)
    if not trials:
        return "no trial finished"
    if len(objectives) == 1:
        trials = trials[:top]
    keys = sorted({key for t in trials for key in t.params})
    header = ["trial", *objectives, *keys]
    rows = [[str(t.number), *(f"{v:.4g}" for v in t.values),
             *(_shown(t.params[k]) if k in t.params else "" for k in keys)] for t in trials]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in [header, *rows]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_best(study: Any, settings: StudySettings) -> Path | None:
    """The best trial's config as `best.yaml` in the study folder (the base config with its settings, its
    iterations, this machine's threads and log settings): `syncfree train --config best.yaml` trains it anew. None
    while no trial finished."""
    import yaml

    trials = ranked(study, settings.objectives)
    if not trials:
        return None
    best = trials[0]
    try:
        cfg = trial_config(settings, dict(best.params), threads=settings.base.threads)
    except UserError as e:  # a trial of another space or task, from an earlier run of the study
        log.warning("tune: best.yaml not written: trial %d's settings do not fit this config (%s)", best.number, e)
        return None
    cfg.iterations = int(best.user_attrs.get("iterations", cfg.iterations))
    cfg.save_every = settings.base.save_every
    cfg.log = settings.base.log
    scores = ", ".join(f"{name} {value:.4g}" for name, value in zip(settings.objectives, best.values, strict=True))
    header = (f"# study {settings.name}, trial {best.number} ({scores}); its run: {best.user_attrs.get('run_dir')}\n"
              "# train it anew: syncfree train --config best.yaml\n")
    path = settings.folder / "best.yaml"
    path.write_text(header + yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return path


def write_plots(study: Any, folder: Path, objectives: tuple[str, ...]) -> list[Path]:
    """`history.png` (each trial's return and the best so far) and `importances.png` (how much each setting
    explains the return), where matplotlib is installed and the study has the trials a plot needs; a plot that
    cannot be drawn is one warning."""
    if importlib.util.find_spec("matplotlib") is None or not ranked(study, objectives):
        return []  # nothing to draw before a trial finishes
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna import importance
    from optuna.visualization import matplotlib as plots

    several = len(objectives) > 1
    target = (lambda t: t.values[0]) if several else None
    lower_better = (lambda t: -t.values[0]) if several else None  # PED-ANOVA ranks a target low-is-best
    evaluator = (importance.FanovaImportanceEvaluator() if importlib.util.find_spec("sklearn") is not None
                 else importance.PedAnovaImportanceEvaluator())
    drawn = []
    for name, draw in (("history", lambda: plots.plot_optimization_history(study, target=target, target_name="return")),
                       ("importances", lambda: plots.plot_param_importances(study, evaluator=evaluator, target=lower_better,
                                                                            target_name="return"))):
        try:
            with warnings.catch_warnings():  # Optuna's notes on the target's direction, matplotlib's on legends
                warnings.simplefilter("ignore", UserWarning)
                axes = draw()
        except Exception as e:  # too few finished trials, or a space of one value
            log.warning("tune: %s.png not drawn (%s)", name, " ".join(str(e).split())[:160] or type(e).__name__)
            continue
        figure: Any = axes.get_figure()
        figure.set_size_inches(8, 5)
        figure.tight_layout()
        path = folder / f"{name}.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        drawn.append(path)
    return drawn
