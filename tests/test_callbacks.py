"""Between iterations: evaluation on fresh envs, the best checkpoint, early stopping and the API's functions; and
`syncfree.load` / `syncfree.evaluate`."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import syncfree
from conftest import recurrent_config, small_config
from syncfree.cli import main
from syncfree.config import CallbackConfig
from syncfree.errors import UserError
from syncfree.train.callbacks import Callbacks
from syncfree.train.run import Run

DROPPED = {"steps_per_s", "iteration_seconds", "eval_return", "eval_return_std"}


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("make", [small_config, recurrent_config], ids=["mlp", "recurrent"])
def test_evaluations_are_recorded_and_leave_training_as_it_was(make, tmp_path: Path) -> None:
    runs = {}
    for every in (0, 2):
        cfg = make("pendulum")
        cfg.iterations, cfg.callbacks.eval_every, cfg.callbacks.eval_envs = 4, every, 3
        runner = Run(cfg, tmp_path / f"every{every}")
        runner.learn()
        runner.close()
        runs[every] = (records(tmp_path / f"every{every}"), runner.runner.policy.state_dict())
    plain, evaluated = runs[0][0], runs[2][0]
    assert [("eval_return" in r) for r in evaluated] == [False, True, False, True]
    assert all(np.isfinite(r["eval_return"]) and r["eval_return_std"] >= 0 for r in evaluated if "eval_return" in r)
    assert [{k: v for k, v in r.items() if k not in DROPPED} for r in evaluated] == [
        {k: v for k, v in r.items() if k not in DROPPED} for r in plain]
    for name, value in runs[0][1].items():
        assert torch.equal(value, runs[2][1][name]), name


def test_save_best_and_stop_when_from_the_command_line(tmp_path: Path, caplog) -> None:
    """The best checkpoint is the iteration with the highest evaluation; `stop_when` stops after the first
    iteration that meets it, saved."""
    common = ["--task", "pendulum", "--env.num_envs", "16", "--ppo.steps_per_env", "8", "--perf.compile", "off",
              "--log.progress", "false", "--log.dir", str(tmp_path), "--callbacks.eval_every", "1",
              "--callbacks.eval_envs", "2"]
    assert main(["train", *common, "--iterations", "4", "--log.run_name", "best",
                 "--callbacks.save_best", "eval_return"]) == 0
    evals = [r["eval_return"] for r in records(tmp_path / "best")]
    best = syncfree.load(tmp_path / "best" / "best.pt")
    assert best.iteration == 1 + int(np.argmax(evals))

    with caplog.at_level(logging.INFO, logger="syncfree"):
        assert main(["train", *common, "--iterations", "10", "--log.run_name", "stop",
                     "--callbacks.stop_when", f"eval_return >= {min(evals) - 1000}"]) == 0
    err = caplog.text
    assert "iteration 1: stopping: eval_return=" in err and "meets callbacks.stop_when" in err
    assert [r["iteration"] for r in records(tmp_path / "stop")] == [1]
    assert syncfree.load(tmp_path / "stop" / "latest.pt").iteration == 1


def test_patience_counts_the_records_without_a_new_high() -> None:
    callbacks = Callbacks(dataclasses.replace(small_config("pendulum"), callbacks=CallbackConfig(
        save_best="eval_return", patience=2)))
    runner = SimpleNamespace(run_dir=None)
    reasons = [callbacks.after_iteration(runner, record) for record in  # type: ignore[arg-type]
               ({"eval_return": 1.0}, {}, {"eval_return": 2.0}, {"eval_return": 2.0}, {"mean_return": 9.0},
                {"eval_return": float("nan")}, {"eval_return": 1.5})]
    assert reasons[:-1] == [None] * 6 and callbacks.best == 2.0
    assert reasons[-1] == "eval_return has not passed its best (2) in 2 records (callbacks.patience=2)"


def test_a_function_stops_training_and_the_best_survives_a_resume(tmp_path: Path) -> None:
    seen = []

    def enough(runner, record) -> bool:
        seen.append(record["iteration"])
        return record["iteration"] == 2

    settings = dict(env={"num_envs": 16}, ppo={"steps_per_env": 8}, log={"progress": False},
                    perf={"compile": "off"})
    result = syncfree.learn("pendulum", run_dir=tmp_path / "run", iterations=5, on_iteration=[enough],
                            callbacks={"eval_every": 1, "eval_envs": 2, "save_best": "eval_return"}, **settings)
    assert seen == [1, 2] and result.record["iteration"] == 2
    best = result.run.callbacks.best
    assert best == max(r["eval_return"] for r in records(tmp_path / "run"))
    again = syncfree.learn("pendulum", resume=tmp_path / "run" / "latest.pt", iterations=3, run_dir=tmp_path / "run",
                           resume_in_place=True)
    assert again.run.callbacks.best == max(best, again.record["eval_return"])


@pytest.mark.parametrize(("setting", "line"), [
    (["--callbacks.stop_when", "eval_return ~ 3"], "callbacks.stop_when='eval_return ~ 3' is invalid"),
    (["--callbacks.patience", "3"], "callbacks.patience=3 is invalid; allowed: 0 unless callbacks.save_best"),
    (["--callbacks.eval_envs", "0"], "callbacks.eval_envs=0 is invalid"),
    (["--callbacks.save_best", "eval_return"], "callbacks.save_best='eval_return' is invalid; allowed: a metric the "
                                               "records have (eval_return comes only with callbacks.eval_every > 0)"),
    (["--callbacks.stop_when", "eval_return >= 1"], "callbacks.stop_when='eval_return >= 1' is invalid"),
])
def test_bad_callback_settings_are_one_line(setting: list[str], line: str, capsys) -> None:
    assert main(["train", "--task", "pendulum", *setting]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and line in err, err


@pytest.mark.parametrize(("setting", "line"), [
    (["--callbacks.save_best", "mean_retrun"], "callbacks.save_best='mean_retrun' names a metric no record of this "
                                               "run holds; did you mean mean_return?"),
    (["--callbacks.stop_when", "eval_retrun >= 3", "--callbacks.eval_every", "2"],
     "callbacks.stop_when='eval_retrun >= 3' names a metric no record of this run holds; did you mean eval_return?"),
])
def test_a_misspelt_metric_is_one_line_before_the_first_record_is_written(setting: list[str], line: str,
                                                                          tmp_path: Path, capsys) -> None:
    argv = ["train", "--task", "pendulum", "--env.num_envs", "8", "--ppo.steps_per_env", "4", "--iterations", "3",
            "--perf.compile", "off", "--log.progress", "false", "--log.dir", str(tmp_path), "--log.run_name", "run"]
    assert main([*argv, *setting]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and line in err, err
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == "" and not list((tmp_path / "run").glob("*.pt"))
    # the folder holds no record: the corrected command takes it again
    assert main([*argv, *(s.replace("retrun", "return") for s in setting)]) == 0
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 3


def test_a_run_from_python_that_stops_on_bad_input_releases_its_folder(tmp_path: Path) -> None:
    """`syncfree.learn` raising in the loop (here: a misspelt metric at the first record) leaves no lock behind, and
    a folder with records but no checkpoint is refused by name, without a checkpoint to resume that is not there."""
    import syncfree
    from syncfree.errors import UserError

    small = {"env.num_envs": 8, "ppo.steps_per_env": 4, "iterations": 2, "perf.compile": "off",
             "log": {"dir": str(tmp_path), "run_name": "run", "progress": False}}
    with pytest.raises(UserError, match="did you mean mean_return"):
        syncfree.learn("pendulum", callbacks={"save_best": "mean_retrun"}, **small)
    assert not (tmp_path / "run" / ".lock").exists()
    syncfree.learn("pendulum", callbacks={"save_best": "mean_return"}, **small)
    for saved in (tmp_path / "run").glob("*.pt"):
        saved.unlink()
    with pytest.raises(UserError, match=re.escape("holds the records of a run that saved no checkpoint "
                                                  "(metrics.jsonl); choose another log.run_name, or move that "
                                                  "folder away")):
        syncfree.learn("pendulum", **small)


def test_a_metric_a_record_holds_later_is_no_misspelling(tmp_path: Path) -> None:
    """`mean_return` is in no record before an episode ends (here: none in 2 iterations of 4 steps); it is a metric
    of the run all the same."""
    result = syncfree.learn("pendulum", run_dir=tmp_path / "run", iterations=2, env={"num_envs": 8},
                            ppo={"steps_per_env": 4}, log={"progress": False}, perf={"compile": "off"},
                            callbacks={"save_best": "mean_return", "stop_when": "mean_length > 1000"})
    assert "mean_return" not in result.record and result.record["iteration"] == 2


def test_evaluation_needs_envs_it_can_make() -> None:
    from syncfree.envs.builtin.classic import Pendulum

    with pytest.raises(UserError, match=r"callbacks\.eval_every=2 needs a task that makes its envs"):
        syncfree.learn(Pendulum(16), run_dir=False, iterations=1, callbacks={"eval_every": 2})


def test_load_and_evaluate(tmp_path: Path) -> None:
    syncfree.learn("pendulum", run_dir=tmp_path / "run", iterations=1, env={"num_envs": 16},
                   ppo={"steps_per_env": 8}, log={"progress": False}, perf={"compile": "off"})
    path = tmp_path / "run" / "latest.pt"
    loaded = syncfree.load(path)
    assert loaded.iteration == 1 and loaded.cfg.task == "pendulum"
    greedy = syncfree.evaluate(path, num_envs=3)
    assert greedy.shape == (3,) and (greedy == syncfree.evaluate(loaded, num_envs=3)).all()
    assert (greedy == loaded.evaluate(loaded.make_env(3, 12345))).all()
    generator = torch.get_rng_state()
    sampled = syncfree.evaluate(loaded, num_envs=3, sample=True, seed=4)
    assert torch.equal(torch.get_rng_state(), generator)
    assert (sampled == syncfree.evaluate(loaded, num_envs=3, sample=True, seed=4)).all()
    assert (sampled == syncfree.evaluate(loaded, sample=True, seed=4, env=loaded.make_env(3, 4))).all()
    with pytest.raises(UserError, match=r"num_envs=0 is invalid"):
        syncfree.evaluate(loaded, num_envs=0)


def test_training_asked_for_again_after_a_callback_stopped_goes_on() -> None:
    result = syncfree.learn("pendulum", run_dir=False, iterations=4, on_iteration=[lambda r, rec: True],
                            env={"num_envs": 8}, ppo={"steps_per_env": 4, "num_minibatches": 2},
                            log={"progress": False}, perf={"compile": "off"})
    run = result.run
    assert run.runner.iteration == 1
    run.callbacks.functions.clear()
    assert run.learn()["iteration"] == 4


@pytest.mark.parametrize("task", ["pendulum", "point-mass"])
def test_every_evaluation_plays_the_same_episodes(task: str) -> None:
    """Evaluations of one policy give the same returns, however many came before: the envs start each from their
    state when made (a score does not depend on the evaluations before it, e.g. a study's reports)."""
    from syncfree.tasks import make_task_env, preset
    from syncfree.train.runner import Runner

    cfg = preset(task)
    cfg.env.num_envs, cfg.iterations, cfg.log.progress, cfg.callbacks.eval_envs = 16, 1, False, 8
    runner = Runner(cfg)
    callbacks = Callbacks(cfg, make_env=lambda n, seed: make_task_env(cfg, n, runner.device, seed))
    first, second, third = (callbacks.evaluate(runner) for _ in range(3))
    assert np.array_equal(first, second) and np.array_equal(first, third)
    assert np.unique(first).size > 1  # the envs start apart: the same returns are not one episode's


def test_evaluation_envs_whose_state_does_not_copy_go_on_as_before(caplog: pytest.LogCaptureFixture) -> None:
    """A user's env whose state holds something `deepcopy` refuses: one line says the evaluations go on from the
    last one's episodes; nothing fails."""
    import threading

    env = SimpleNamespace(saveable=True, state_dict=lambda: {"lock": threading.Lock()})
    with caplog.at_level("INFO", logger="syncfree"):
        assert Callbacks.start_state(env) is None
    assert "state could not be copied (TypeError" in caplog.text
    assert Callbacks.start_state(SimpleNamespace(saveable=False)) is None
    state = {"x": torch.zeros(2)}
    copied = Callbacks.start_state(SimpleNamespace(saveable=True, state_dict=lambda: state))
    state["x"].add_(1.0)
    assert torch.equal(copied["x"], torch.zeros(2))  # a copy, not the env's live tensors
