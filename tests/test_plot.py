"""`syncfree plot` of hostile files: a record that is no JSON object or holds no number where the plot needs one,
and a config that is no YAML mapping, are one line naming the file (and the line); a metric that some records
lack is drawn from the records that hold it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncfree.cli import main

GOOD = [{"iteration": i, "env_steps": 8 * i, "mean_return": float(i), "value_loss": 1.0 / i} for i in (1, 2, 3)]


def write_run(folder: Path, lines: list[str], config: str = "seed: 0\n") -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    (folder / "config.yaml").write_text(config)
    return folder


def plot_fails(run: Path, capsys: pytest.CaptureFixture, *args: str) -> str:
    """The one stderr line of a plot that must fail with exit code 2 and write nothing."""
    out = run / "refused.png"
    capsys.readouterr()
    assert main(["plot", str(run), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and not out.exists(), err
    return err.strip()


@pytest.mark.parametrize(("record", "says"), [
    ('{"iteration": 2, "env_steps": 16, "mean_return": "abc"}', 'line 2: mean_return is "abc", not a number'),
    ('{"iteration": 2, "env_steps": 16, "mean_return": [1, 2]}', "line 2: mean_return is [1, 2], not a number"),
    ('{"iteration": 2, "env_steps": 16, "mean_return": null}', "line 2: mean_return is null, not a number"),
    ('{"iteration": 2, "env_steps": 16, "mean_return": true}', "line 2: mean_return is true, not a number"),
    ('{"iteration": 2, "env_steps": "16", "mean_return": 2.0}', 'line 2: env_steps is "16", not a number'),
    ('{"iteration": 2, "mean_return": 2.0}', "line 2: the record has no env_steps"),
    ("[2, 16, 2.0]", "line 2: not a JSON record (a list, not an object)"),
    ('"iteration 2"', "line 2: not a JSON record (a str, not an object)"),
])
def test_a_record_the_plot_cannot_use_is_one_line_naming_its_line(record: str, says: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    run = write_run(tmp_path / "run", [json.dumps(GOOD[0]), record, json.dumps(GOOD[2])])
    assert plot_fails(run, capsys) == f"syncfree: error: plot: {run / 'metrics.jsonl'}, {says}"


def test_a_metric_that_is_not_plotted_may_hold_anything(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Only the plotted metrics and env steps must be numbers: a field the plot does not draw is not read."""
    run = write_run(tmp_path / "run", [json.dumps({**r, "note": ["anything"]}) for r in GOOD])
    assert main(["plot", str(run), "--out", str(run / "curves.png"), "--metrics", "mean_return"]) == 0
    assert (run / "curves.png").is_file()
    assert 'note is ["anything"], not a number' in plot_fails(run, capsys, "--metrics", "note")


@pytest.mark.parametrize(("config", "says"), [
    ("- 1\n", "{path}: not a run's config (a YAML list, not a mapping)"),
    ("seed: [\n", "cannot read {path} (while parsing a flow node"),
])
def test_a_config_that_is_no_mapping_is_one_line(config: str, says: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    run = write_run(tmp_path / "run", [json.dumps(r) for r in GOOD], config)
    assert plot_fails(run, capsys).startswith(f"syncfree: error: plot: {says.format(path=run / 'config.yaml')}")


def test_a_metric_missing_from_some_records_is_drawn_from_the_others(tmp_path: Path) -> None:
    """Records before the first finished episode have no `mean_return`; a record cut short by a kill ends the file."""
    lines = [json.dumps({k: v for k, v in GOOD[0].items() if k != "mean_return"}), *map(json.dumps, GOOD[1:]),
             '{"iteration": 4, "env_st']
    run = write_run(tmp_path / "run", lines)
    assert main(["plot", str(run), "--out", str(run / "curves.png")]) == 0
    assert (run / "curves.png").is_file()


def test_records_that_are_not_text_or_cannot_be_drawn_are_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """A metrics file that is not UTF-8, and values matplotlib cannot lay out (axes from -1e308 to 1e308)."""
    run = write_run(tmp_path / "bytes", [json.dumps(r) for r in GOOD])
    (run / "metrics.jsonl").write_bytes(b'\xff\xfe{"iteration": 1}\n')
    assert plot_fails(run, capsys) == f"syncfree: error: plot: cannot read {run / 'metrics.jsonl'} (not UTF-8 text: " \
                                      "byte 0)"
    huge = [{**GOOD[0], "mean_return": 1e308}, {**GOOD[1], "mean_return": -1e308}]
    run = write_run(tmp_path / "huge", [json.dumps(r) for r in huge])
    assert plot_fails(run, capsys, "--metrics", "mean_return").startswith("syncfree: error: plot: cannot draw "
                                                                         "mean_return of these runs (")
