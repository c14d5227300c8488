"""`syncfree tune` and `syncfree.tune`: a study of tiny training runs on Optuna, resumed by rerunning the command;
its objective is the evaluation `syncfree eval` gives; pruned trials keep their runs; best.yaml trains; a search
space is data whose every mistake is one line; an unreachable database is one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

import syncfree
from syncfree import cli
from syncfree.errors import UserError
from syncfree.tasks import preset
from syncfree.tuning.space import default_space

optuna = pytest.importorskip("optuna")

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--task", "cartpole", "--env.num_envs", "16", "--ppo.steps_per_env", "8", "--ppo.num_minibatches", "2",
        "--ppo.num_epochs", "1", "--env.max_episode_length", "40", "--callbacks.eval_envs", "4",
        "--perf.compile", "off", "--threads", "1"]
"""Trials of a few hundred env steps on 16 cartpoles, evaluated on 4 episodes of at most 40 steps."""
TINY_OVERRIDES = {"env.num_envs": 16, "ppo.steps_per_env": 8, "ppo.num_minibatches": 2, "ppo.num_epochs": 1,
                  "env.max_episode_length": 40, "callbacks.eval_envs": 4, "perf.compile": "off", "threads": 1}
SPACE = {"ppo.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
         "ppo.num_epochs": {"type": "int", "low": 1, "high": 2},
         "env.num_envs": {"type": "categorical", "choices": [16, 32]}}


def write_space(folder: Path, space: dict) -> Path:
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


def errors(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return errors_of(capsys.readouterr().err)


def errors_of(err: str) -> list[str]:
    """The lines of `err` that are not the log's (`syncfree: tune: ...` lines, which logging prints)."""
    return [line for line in err.strip().splitlines() if not line.startswith("syncfree: tune:")]


def test_a_study_scores_by_evaluation_resumes_when_rerun_and_its_best_yaml_trains(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    space = write_space(tmp_path, SPACE)
    command = ["tune", *TINY, "--space", str(space), "--budget-steps", "384", "--pruner", "none"]
    assert cli.main([*command, "--trials", "2"]) == 0
    folder = tmp_path / "runs" / "tune-cartpole-ppo"
    assert (folder / "study.db").is_file()
    assert cli.main([*command, "--trials", "3"]) == 0  # the same command again goes on with the study
    out = capsys.readouterr().out
    study = optuna.load_study(study_name="tune-cartpole-ppo", storage=f"sqlite:///{folder / 'study.db'}")
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert [t.number for t in trials] == [0, 1, 2] and len(study.trials) == 3
    for trial in trials:
        run = folder / f"trial-{trial.number:04d}"
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert config["ppo"]["learning_rate"] == pytest.approx(trial.params["ppo.learning_rate"])
        assert config["env"]["num_envs"] == trial.params["env.num_envs"]
        steps = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["env_steps"]
        assert 384 <= steps < 384 + 32 * 8  # the budget, rounded up to whole iterations
    best = max(trials, key=lambda t: t.value)
    # the objective is what `syncfree eval` says of the trial's last checkpoint on the evaluation's envs
    returns = syncfree.evaluate(folder / f"trial-{best.number:04d}" / "latest.pt", num_envs=4, seed=12345)
    assert best.value == pytest.approx(float(returns.mean()))
    table = out.split("best trials of study tune-cartpole-ppo:\n")[-1].splitlines()
    assert table[0].split()[:2] == ["trial", "return"] and len(table) == 5  # header, rule, three trials
    assert table[2].split()[:2] == [str(best.number), f"{best.value:.4g}"]  # best first
    assert {(folder / "history.png").is_file(), (folder / "importances.png").is_file()} == {True}
    best_yaml = yaml.safe_load((folder / "best.yaml").read_text())
    assert best_yaml["ppo"]["learning_rate"] == pytest.approx(best.params["ppo.learning_rate"])
    assert best_yaml["ppo"]["num_epochs"] == best.params["ppo.num_epochs"]
    assert best_yaml["env"]["max_episode_length"] == 40  # the base config's options kept
    assert cli.main(["train", "--config", str(folder / "best.yaml"), "--log.dir", str(tmp_path / "again"),
                     "--log.run_name", "best", "--log.progress", "false"]) == 0
    again = yaml.safe_load((tmp_path / "again" / "best" / "config.yaml").read_text())
    assert again["ppo"] == best_yaml["ppo"] and again["iterations"] == best.user_attrs["iterations"]
    # the study belongs to its task: another task under its name is one line
    capsys.readouterr()
    assert cli.main(["tune", "--task", "pendulum", "--study", "tune-cartpole-ppo", "--trials", "1"]) == 2
    assert errors(capsys) == [f"syncfree: error: tune: study 'tune-cartpole-ppo' in sqlite:///{folder / 'study.db'} "
                              "was started with task cartpole, not pendulum; name another --study"]


def test_a_pruned_trial_stops_at_its_report_keeps_its_run_and_counts(tmp_path: Path) -> None:
    result = syncfree.tune("cartpole", trials=2, space=SPACE, budget_steps=16 * 8 * 4, reports=2,
                           pruner=optuna.pruners.ThresholdPruner(lower=1e9), folder=tmp_path, study="pruned",
                           **TINY_OVERRIDES)
    states = [t.state for t in result.study.trials]
    assert states == [optuna.trial.TrialState.PRUNED] * 2
    for trial in result.study.trials:
        run = Path(trial.user_attrs["run_dir"])
        assert (run / "latest.pt").is_file() and (run / "config.yaml").is_file()
        records = (run / "metrics.jsonl").read_text().splitlines()
        budget_iterations = 4 * 16 // trial.params["env.num_envs"]
        # reported at half the budget, pruned there: the run stopped after that iteration, saved
        assert len(records) == budget_iterations // 2 and list(trial.intermediate_values) == [1]
    assert result.best_config is None and result.table == "no trial finished"


@pytest.mark.slow  # two processes start (torch imported in each): about 15 s on 2 cores
def test_two_workers_split_the_cores_and_share_the_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("syncfree.tuning.cores", lambda: 2)
    assert TINY[-2:] == ["--threads", "1"]
    base = [*TINY[:-2], "--threads", "0"]  # the study chooses
    caplog.set_level("INFO", logger="syncfree")
    assert cli.main(["tune", *base, "--space", str(write_space(tmp_path, SPACE)), "--budget-steps", "256",
                     "--trials", "2", "--workers", "2", "--objective", "return,seconds", "--study", "pair"]) == 0
    assert "on 2 workers x 1 thread (2 cores)" in caplog.text
    study = optuna.load_study(study_name="pair", storage=f"sqlite:///{tmp_path / 'runs' / 'pair' / 'study.db'}")
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) == 2  # a trial asked for while the other worker's filled the study does not run
    assert all(t.user_attrs.get("surplus") for t in study.trials if t.state != optuna.trial.TrialState.COMPLETE)
    assert len({t.number for t in trials}) == len(trials)
    for trial in trials:
        config = yaml.safe_load((Path(trial.user_attrs["run_dir"]) / "config.yaml").read_text())
        assert config["threads"] == 1 and len(trial.values) == 2 and trial.values[1] > 0
    assert "seconds" in capsys.readouterr().out.splitlines()[1]  # the table of the Pareto front


def test_workers_asking_at_once_never_run_more_trials_than_the_study_holds() -> None:
    """Three workers ask for trials of a study of 2 at the same moment: the database's order of their numbers decides,
    the third is failed unrun and counts toward nothing; a retry waiting to run takes its place in the count."""
    from syncfree.tuning.study import SURPLUS, counted, surplus

    settings = SimpleNamespace(trials=2)
    study = optuna.create_study()
    asked = [study.ask() for _ in range(3)]  # all three running before any checks the count
    assert [surplus(study, t, settings) for t in asked] == [False, False, True]
    asked[2].set_user_attr(SURPLUS, True)
    study.tell(asked[2], state=optuna.trial.TrialState.FAIL)
    assert counted(study) == 2
    study.tell(asked[0], 1.0)
    study.tell(asked[1], state=optuna.trial.TrialState.FAIL)  # its worker stopped: retried as a new trial
    study.enqueue_trial({}, user_attrs={})
    retry = study.ask()
    study._storage.set_trial_system_attr(retry._trial_id, "retry_history", [asked[1].number])
    assert surplus(study, retry, settings) is False  # it takes the place of the trial it retries
    assert surplus(study, study.ask(), settings) is True


def lose_the_database_at_trial(number: int, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before trial `number` trains, the study's SQLite file is deleted (`gone`) or overwritten with what no
    database reads (`broken`, as a server that answers nonsense)."""
    from syncfree.tuning import study as study_module

    run_trial = study_module.run_trial

    def losing(trial, settings, prune):
        if trial.number == number:
            path = Path(settings.storage.removeprefix("sqlite:///"))
            if how == "gone":
                path.unlink()
            else:
                path.write_bytes(b"not a database " * 1000)
        return run_trial(trial, settings, prune)

    monkeypatch.setattr(study_module, "run_trial", losing)


@pytest.mark.parametrize("how", ["gone", "broken"])
def test_a_database_lost_mid_study_ends_the_command_in_one_line(how: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    lose_the_database_at_trial(1, how, monkeypatch)
    space = write_space(tmp_path, SPACE)
    assert cli.main(["tune", *TINY, "--space", str(space), "--budget-steps", "128", "--pruner", "none", "--trials",
                     "3", "--dir", str(tmp_path), "--study", "lost"]) == 2
    captured = capsys.readouterr()
    lines = errors_of(captured.err)
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    database = tmp_path / "lost" / "study.db"
    if how == "gone":
        assert lines[0] == (f"syncfree: error: tune: the study's database {database} is gone (deleted while the study "
                            f"ran): its trials are lost; their run folders stay in {tmp_path / 'lost'}")
    else:
        # the worker's next write fails, or (SQLite writing on into its log) the study's last reading of it
        assert lines[0].startswith("syncfree: error: tune: ") and f"sqlite:///{database}" in lines[0]
        assert "while the study ran" in lines[0] and "rerun the command once it is back" in lines[0]
    assert (tmp_path / "lost" / "trial-0000" / "latest.pt").is_file()


def test_every_mistake_in_a_search_space_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = write_space(tmp_path, {
        "ppo.lerning_rate": {"type": "float", "low": 1e-4, "high": 1e-2},
        "ppo.gamma": {"type": "float", "low": 0.999, "high": 0.9},
        "ppo.entropy_coef": {"type": "float", "low": 0.0, "high": 0.1, "log": True},
        "ppo.num_epochs": {"type": "float", "low": 1, "high": 4},
        "ppo.schedule": {"type": "categorical", "choices": ["fixed", "sometimes"]},
        "ppo.num_minibatches": {"type": "categorical", "choices": [2, 3]},
        "ppo.lam": {"type": "uniform", "low": 0.9, "high": 0.99},
        "ppo.clip_param": {"type": "float", "lo": 0.1, "high": 0.3},
        "iterations": {"type": "int", "low": 10, "high": 20},
        "ppo": {"type": "float", "low": 0, "high": 1},
    })
    assert cli.main(["tune", *TINY, "--space", str(space), "--dir", str(tmp_path / "runs")]) == 2
    lines = errors(capsys)
    assert len(lines) == 10 and all(line.startswith(f"syncfree: error: {space}: ") for line in lines)
    text = "\n".join(lines)
    for expected in ("ppo.lerning_rate: unknown key; did you mean ppo.learning_rate?",
                     "ppo.gamma: low=0.999 is above high=0.9",
                     "ppo.entropy_coef: low=0.0 is invalid with log: true",
                     "ppo.num_epochs: a float parameter on a setting of type int; use int",
                     "ppo.schedule: 'sometimes' is an invalid choice; allowed: one of fixed, adaptive, linear",
                     "ppo.num_minibatches: ppo.num_minibatches=3 is invalid; allowed: a divisor of",
                     "ppo.lam: type='uniform' is invalid; allowed: float, int, categorical",
                     "ppo.clip_param: lo: not a field of a float parameter",
                     "iterations: set by the study itself",
                     "ppo: is a section, not a setting"):
        assert expected in text, expected
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_a_search_space_is_read_as_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(f"ppo.learning_rate: !!python/object/apply:os.system ['touch {tmp_path}/ran']\n")
    assert cli.main(["tune", *TINY, "--space", str(space)]) == 2
    assert errors(capsys) == [f"syncfree: error: config: cannot read {space} (ConstructorError)"]
    assert not (tmp_path / "ran").exists()


def test_the_default_space_is_ppos_documented_one() -> None:
    base = preset("pendulum")
    parameters = {p.key: p for p in default_space(base)}
    assert set(parameters) == {"ppo.learning_rate", "ppo.entropy_coef", "ppo.num_epochs", "ppo.num_minibatches",
                               "ppo.gamma", "ppo.lam", "ppo.clip_param", "ppo.steps_per_env", "env.num_envs",
                               "ppo.optimizer"}
    assert parameters["env.num_envs"].choices == (base.env.num_envs // 2, base.env.num_envs, 2 * base.env.num_envs)
    assert parameters["ppo.optimizer"].choices == ("adam", "adamw", "muon", "schedule_free_adamw")
    adaptive = preset("pendulum")
    adaptive.ppo.schedule, adaptive.policy.actor_hidden, adaptive.policy.critic_hidden = "adaptive", [32], [32]
    chosen = {p.key: p for p in default_space(adaptive)}["ppo.optimizer"].choices
    assert chosen == ("adam", "adamw")  # no hidden matrix for muon; schedule-free AdamW wants a fixed rate
    docs = (Path(__file__).resolve().parents[1] / "docs" / "tune.md").read_text()
    assert all(f"`{key}`" in docs for key in parameters)


OFF_POLICY_TINY = {"env.num_envs": 8, "env.max_episode_length": 20, "callbacks.eval_envs": 2, "perf.compile": "off",
                   "threads": 1, "policy.actor_hidden": [16, 16], "policy.critic_hidden": [16, 16]}


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_the_off_policy_default_spaces_are_documented_and_every_draw_builds_and_trains(
        algorithm: str, tmp_path: Path) -> None:
    """Draws of the default space (random, seeded) each make a config that validates and builds; one trial of a
    few gradient steps trains and scores."""
    from syncfree.config import with_values
    from syncfree.tasks import validated, with_algorithm
    from syncfree.train.runner import Runner

    base = with_algorithm(preset("pendulum"), algorithm)
    parameters = default_space(base)
    keys = {p.key for p in parameters}
    own = {"actor_learning_rate", "critic_learning_rate", "tau", "batch_size", "updates_per_iteration", "n_step",
           "gamma", "optimizer", "pre_tanh_penalty",
           *(("policy_noise", "exploration_noise") if algorithm == "td3" else ())}
    assert keys == {f"{algorithm}.{name}" for name in own}
    if algorithm == "td3":  # mixed noise: the user's range; a drawn floor above its top would not validate
        mixed = with_values(base, {"td3.exploration_noise": 0.01, "td3.exploration_noise_max": 0.2})
        assert {p.key for p in default_space(mixed)} == keys - {"td3.exploration_noise"}
    docs = (Path(__file__).resolve().parents[1] / "docs" / "tune.md").read_text()
    assert all(f"`{key}`" in docs for key in keys)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    small = {f"{algorithm}.buffer_size": 1024, f"{algorithm}.learning_starts": 0, **OFF_POLICY_TINY}
    optimizers = set()
    for _ in range(6):
        trial = study.ask()
        values = {p.key: p.suggest(trial) for p in parameters}
        optimizers.add(values[f"{algorithm}.optimizer"])
        cfg = validated(with_values(with_values(base, small), values))
        runner = Runner(cfg)
        assert type(runner.algorithm).__name__ == algorithm.upper()
        runner.env.close()
    assert len(optimizers) >= 2

    result = syncfree.tune("pendulum", trials=1, budget_steps=64, pruner="none", folder=tmp_path, study=algorithm,
                           algorithm=algorithm, **{**small, f"{algorithm}.learning_starts": 32,
                                                   f"{algorithm}.steps_per_env": 4})
    (trial,) = result.study.trials
    assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs
    assert set(trial.params) == keys and trial.user_attrs["iterations"] == 2


def test_a_database_that_cannot_be_reached_is_one_line_and_exit_code_2(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    storage = "sqlite:////nonexistent-folder/study.db"
    assert cli.main(["tune", *TINY, "--storage", storage, "--dir", str(tmp_path), "--trials", "1"]) == 2
    lines = errors(capsys)
    assert len(lines) == 1 and lines[0].startswith(
        f"syncfree: error: tune: cannot open the study's storage {storage} (OperationalError: ")
    assert not any(tmp_path.iterdir())  # nothing was started


@pytest.mark.parametrize("storage,shown", [
    ("postgresql://tuner:secret@127.0.0.1:9/optuna", "postgresql://tuner:***@127.0.0.1:9/optuna"),
    ("nodb://x", "nodb://x"),
])
def test_a_storage_url_that_names_no_reachable_database_is_one_line(storage: str, shown: str, tmp_path: Path) -> None:
    with pytest.raises(UserError) as info:
        syncfree.tune("pendulum", trials=1, storage=storage, folder=tmp_path)
    assert str(info.value).startswith(f"tune: cannot open the study's storage {shown} (") and "\n" not in str(info.value)
    assert "secret" not in str(info.value)


def test_a_postgresql_storage_without_its_driver_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("psycopg", "psycopg2"):  # neither installed: importing either fails
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(UserError) as info:
        syncfree.tune("pendulum", trials=1, storage="postgresql://tuner:secret@127.0.0.1:9/optuna", folder=tmp_path)
    assert str(info.value) == ("tune: cannot open the study's storage postgresql://tuner:***@127.0.0.1:9/optuna "
                               "(ImportError: no driver for postgresql installed; pip install 'syncfree[tune]' (or "
                               "pip install 'psycopg[binary]'))")


@pytest.mark.parametrize("options,message", [
    ({"objective": "return,seconds", "pruner": "median"}, "tune: --pruner median needs one objective"),
    ({"objective": "speed"}, "tune: --objective 'speed' is invalid; allowed: return, return,seconds"),
    ({"sampler": "grid"}, "tune: --sampler 'grid' is invalid; allowed: tpe, cmaes, random, nsga2"),
    ({"workers": 0}, "tune: --workers 0 is invalid; allowed: an integer >= 1"),
    ({"heartbeat": -1}, "tune: --heartbeat -1 is invalid; allowed: seconds >= 0 (0: none)"),
    ({"heartbeat": 10, "grace": 10}, "tune: --grace 10 is invalid with --heartbeat 10; allowed: more seconds than"),
    ({"algorithm": "recurrent-ppo"}, "tune: --algorithm recurrent-ppo has no default search space; give one with "
                                      "--space"),
    ({"sampler_seed": -1}, "tune: --sampler-seed -1 is invalid; allowed: an integer from 0 to 4,294,967,275"),
    ({"sampler_seed": 2**32 - 5}, "tune: --sampler-seed 4294967291 is invalid"),
    ({"sampler_seed": 1, "sampler": optuna.samplers.RandomSampler(seed=0)},
     "tune: sampler_seed seeds the named samplers; an Optuna sampler given as an object takes its own seed"),
])
def test_choices_that_cannot_work_are_one_line(options: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(UserError) as info:
        syncfree.tune("pendulum", folder=tmp_path, **options)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    assert not any(tmp_path.iterdir())  # nothing was started


def test_the_documented_space_is_valid_for_pendulum() -> None:
    import re

    from syncfree.tuning.space import parse_space

    docs = (Path(__file__).resolve().parents[1] / "docs" / "tune.md").read_text()
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", docs, flags=re.S).group(1))
    assert [p.key for p in parse_space(example, preset("pendulum"), "docs/tune.md")] == list(example)


def test_a_trial_whose_settings_cannot_train_fails_in_one_line_and_the_study_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # 128 minibatches divide 16 envs x 8 steps, not 24 x 8: each setting is valid alone, not together
    grid = optuna.samplers.GridSampler({"env.num_envs": [16, 24], "ppo.num_minibatches": [128]}, seed=0)
    space = {"env.num_envs": {"type": "categorical", "choices": [16, 24]},
             "ppo.num_minibatches": {"type": "categorical", "choices": [128]}}
    caplog.set_level("INFO", logger="syncfree")
    result = syncfree.tune("cartpole", trials=2, space=space, budget_steps=128, sampler=grid, folder=tmp_path,
                           study="grid", **TINY_OVERRIDES)
    states = {t.params["env.num_envs"]: t.state for t in result.study.trials}
    assert states == {16: optuna.trial.TrialState.COMPLETE, 24: optuna.trial.TrialState.FAIL}
    failed = [line for line in caplog.text.splitlines() if " failed: " in line]
    assert len(failed) == 1 and "config: ppo.num_minibatches=128 is invalid; allowed: a divisor of" in failed[0]


@pytest.mark.parametrize("pruner", ["hyperband", "halving"])
def test_a_budget_of_seconds_ends_each_trial_and_best_yaml_keeps_its_iterations(pruner: str, tmp_path: Path) -> None:
    result = syncfree.tune("cartpole", trials=1, space={"ppo.clip_param": {"type": "float", "low": 0.1, "high": 0.3}},
                           budget_seconds=0.5, pruner=pruner, folder=tmp_path, study="timed", **TINY_OVERRIDES)
    (trial,) = result.study.trials
    records = (Path(trial.user_attrs["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    assert trial.state == optuna.trial.TrialState.COMPLETE and len(records) == trial.user_attrs["iterations"]
    assert trial.user_attrs["seconds"] >= 0.5
    assert result.best_config is not None
    assert yaml.safe_load(result.best_config.read_text())["iterations"] == len(records)


@pytest.mark.parametrize("options,line", [
    (["--trial", "5"], "tune: unknown option --trial; did you mean --trials?"),
    (["--trials", "five"], "tune: argument --trials: invalid int value: 'five'"),
    (["--budget-steps", "5", "--budget-seconds", "3"],
     "tune: argument --budget-seconds: not allowed with argument --budget-steps"),
])
def test_a_mistyped_option_is_one_line(options: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tune", *options]) == 2
    assert errors(capsys) == [f"syncfree: error: {line}"]


def test_a_trial_that_diverges_counts_as_pruned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="syncfree")
    result = syncfree.tune("pendulum", trials=1, space={"ppo.learning_rate": {"type": "categorical", "choices": [1e30]}},
                           budget_steps=512, folder=tmp_path, study="diverged",
                           **{**TINY_OVERRIDES, "ppo.schedule": "fixed"})
    (trial,) = result.study.trials
    assert trial.state == optuna.trial.TrialState.PRUNED  # the run stopped on non-finite values (NonFiniteError)
    assert "non-finite" in trial.user_attrs["error"] or "diverged" in trial.user_attrs["error"]
    assert f"tune: trial 0 diverged, counted as pruned: {trial.user_attrs['error']}" in caplog.text


def seeded_draws(sampler: str, order: list[int]) -> dict[int, float]:
    """Trial number -> its draw, with two workers of one study asking in `order` (0: the first worker, 1: the
    second), each with its own sampler seeded as `--sampler-seed 7` seeds it."""
    from syncfree.tuning.study import TrialSeeded, named_sampler
    from syncfree.tuning.trial import StudySettings

    settings = StudySettings(base=preset("cartpole"), parameters=[], trials=len(order), workers=2, name="s",
                             storage="", folder=Path("."), sampler=sampler, sampler_seed=7)
    storage = optuna.storages.InMemoryStorage()
    workers = [optuna.create_study(study_name="s", storage=storage, load_if_exists=True,
                                   sampler=TrialSeeded(lambda seed: named_sampler(settings, seed), 7))
               for _ in range(2)]
    draws = {}
    for worker in order:
        trial = workers[worker].ask()
        draws[trial.number] = trial.suggest_float("x", 0.0, 1.0)
        workers[worker].tell(trial, draws[trial.number])
    return draws


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_seeded_sampler_draws_by_trial_number_whichever_worker_asks(sampler: str) -> None:
    one_worker = seeded_draws(sampler, [0] * 14)
    assert seeded_draws(sampler, [0, 1] * 7) == one_worker == seeded_draws(sampler, [1, 1, 0] * 4 + [0, 1])
    assert len(set(one_worker.values())) == 14  # each trial a draw of its own, not one seed's first draw again


def test_two_studies_of_one_sampler_seed_try_the_same_settings_trial_by_trial(tmp_path: Path) -> None:
    space = {"ppo.clip_param": {"type": "float", "low": 0.1, "high": 0.3},
             "ppo.num_epochs": {"type": "int", "low": 1, "high": 4}}

    def params(study: str, seed: int | None) -> list[dict[str, Any]]:
        result = syncfree.tune("cartpole", trials=3, space=space, budget_steps=128, sampler="random",
                               sampler_seed=seed, pruner="none", folder=tmp_path, study=study, **TINY_OVERRIDES)
        return [t.params for t in sorted(result.study.trials, key=lambda t: t.number)]

    first = params("a", 3)
    assert params("b", 3) == first
    assert params("c", 4) != first
