"""Every script under `benchmarks/` imports against the package as it is (a renamed or moved name fails here, not
in the middle of a user's hour-long study)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py")))
def test_benchmark_script_imports(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import their neighbours
    spec = importlib.util.spec_from_file_location(f"benchmark_{script[:-3]}", BENCHMARKS / script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    assert callable(getattr(module, "main", None)), f"{script} has no main()"


@pytest.mark.slow
def test_learning_parity_runs_resumes_and_reports(tmp_path: Path) -> None:
    """The study end to end at 2 iterations (`SYNCFREE_PARITY_ITERATIONS`): each (learner, seed) writes its run with
    the CPU's bfloat16 capability, the report gives a rerun command for this `--out`, and a second call finds the
    runs done and launches nothing."""
    from syncfree.policy.actor_critic import native_bf16

    command = [sys.executable, str(BENCHMARKS / "learning_parity.py"), "--tasks", "pendulum", "--learners",
               "syncfree", "rsl_rl", "--seeds", "0", "--out", str(tmp_path)]
    env = {**os.environ, "SYNCFREE_PARITY_ITERATIONS": "2", "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    runs = {learner: tmp_path / "runs" / "pendulum" / f"{learner}-seed0.json" for learner in ("syncfree", "rsl_rl")}
    for path in runs.values():
        run = json.loads(path.read_text())
        assert [p["iteration"] for p in run["points"]] == [2] and run["cpu_bf16"] == native_bf16(torch.device("cpu"))
    report = (tmp_path / "README.md").read_text()
    assert f"--learners syncfree rsl_rl --seeds 0 --out {tmp_path}`" in report and (tmp_path / "pendulum.png").is_file()
    assert set(json.loads((tmp_path / "result.json").read_text())["pendulum"]) >= {"syncfree", "rsl_rl"}
    written = {learner: path.stat().st_mtime_ns for learner, path in runs.items()}
    subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    assert {learner: path.stat().st_mtime_ns for learner, path in runs.items()} == written


def test_the_recurrent_learners_train_recurrent_models_on_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    """`syncfree-recurrent` trains the recurrent MLP policy and `rsl_rl-rnn` rsl_rl's `RNNModel`s of the same
    sizes; both are evaluated from the zero state (2 iterations, `SYNCFREE_PARITY_ITERATIONS`)."""
    pytest.importorskip("rsl_rl")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setenv("SYNCFREE_PARITY_ITERATIONS", "2")
    from learning_parity import train_one
    from side_by_side_rsl_rl import rsl_rl_config

    from syncfree.tasks import preset

    threads = torch.get_num_threads()
    try:
        runs = {learner: train_one("cartpole-continuous", learner, 0) for learner in ("syncfree-recurrent",
                                                                                      "rsl_rl-rnn")}
    finally:
        torch.set_num_threads(threads)
    for run in runs.values():
        assert [p["iteration"] for p in run["points"]] == [2] and run["points"][0]["eval_return"] > 0
    mapped = rsl_rl_config(preset("cartpole-continuous"), check_for_nan=False, compile_mode=None, rnn=True)
    assert [mapped[net]["class_name"] for net in ("actor", "critic")] == ["RNNModel", "RNNModel"]
    assert (mapped["actor"]["rnn_type"], mapped["actor"]["rnn_hidden_dim"]) == ("lstm", 256)


def test_rsl_rl_reward_norm_learner_scales_the_rewards_rsl_rl_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    """`rsl_rl-reward-norm`: rsl_rl steps the env through `ScaledRewards`, which hands it each reward divided as
    `RewardScale` divides it (episode ends included) and passes everything else through."""
    pytest.importorskip("rsl_rl")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from learning_parity import ScaledRewards

    from syncfree.envs.adapters.rsl_rl import SyncfreeToRslRl
    from syncfree.policy.normalizer import RewardScale
    from syncfree.tasks import make_env

    plain, scaled = (SyncfreeToRslRl(make_env("pendulum", 8, seed=4)) for _ in range(2))
    scaled = ScaledRewards(scaled, gamma=0.9)
    reference = RewardScale(8, gamma=0.9)
    assert scaled.num_envs == 8 and scaled.num_actions == plain.num_actions
    actions = torch.linspace(-1, 1, 8).unsqueeze(1)
    ended = 0
    for _ in range(250):  # pendulum's episodes end by time-out at 200 steps
        _, raw, dones, _ = plain.step(actions)
        _, got, _, _ = scaled.step(actions)
        torch.testing.assert_close(got, reference(raw, dones.bool()))
        ended += int(dones.sum())
    assert ended > 0 and not torch.allclose(got, raw)


@pytest.mark.parametrize(("schedule", "rate", "target", "rates", "share"), [
    ("adaptive", 2e-5, 1e-9, [2e-5 / 1.5, 1e-5, 1e-5], 2 / 3),  # every update's KL above the target: down to 1e-5
    ("adaptive", 6e-3, 1e9, [9e-3, 1e-2, 1e-2], 2 / 3),  # every one below it: up to 1e-2
    ("fixed", 2e-5, 1e-9, [2e-5] * 3, None),
], ids=["floor", "ceiling", "fixed"])
def test_learning_seeds_reports_the_final_eval_and_the_rate_at_a_bound(
        schedule: str, rate: float, target: float, rates: list[float], share: float | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`learning_seeds.run`: with `eval_envs` the final policy's mean return on fresh envs, with its deterministic
    and with its sampled actions; on an adaptive schedule (adapting once per update, by 1.5) the share of iterations
    that ended with the rate at a bound of [1e-5, 1e-2]; a fixed schedule reports no share."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import learning_seeds

    def small_preset(task: str):
        cfg = preset(task)
        cfg.env.num_envs, cfg.perf.compile = 16, "off"
        cfg.ppo.schedule, cfg.ppo.learning_rate, cfg.ppo.desired_kl = schedule, rate, target
        cfg.ppo.kl_adapt_every = "update"
        return cfg

    preset = learning_seeds.preset
    monkeypatch.setattr(learning_seeds, "preset", small_preset)
    result = learning_seeds.run("pendulum", seed=0, iterations=3, eval_envs=4)
    assert len(result["figure"]) == 3 and result["learning_rate"] == pytest.approx(rates)
    assert result["eval_return"] < 0 and result["eval_return_sampled"] < 0  # pendulum's rewards are costs
    assert result["eval_return_sampled"] != result["eval_return"]  # std about 1: sampling changes the returns
    assert result.get("share_at_bound") == (pytest.approx(share) if share is not None else None)


def test_learning_seeds_evaluates_along_the_run_without_changing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`eval_every`: the deterministic policy evaluated every K iterations, and the mean of those in the last 10 % of
    the iterations reported; the training is the same as without them, bit for bit."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import learning_seeds

    def small_preset(task: str, algorithm: str = ""):
        cfg = preset(task, algorithm=algorithm) if algorithm else preset(task)
        cfg.env.num_envs, cfg.env.max_episode_length, cfg.perf.compile = 16, 12, "off"
        cfg.learner.learning_starts, cfg.learner.batch_size, cfg.learner.updates_per_iteration = 64, 64, 2
        return cfg

    preset = learning_seeds.preset
    monkeypatch.setattr(learning_seeds, "preset", small_preset)
    plain = learning_seeds.run("pendulum", seed=0, iterations=20, eval_envs=4, algorithm="sac")
    along = learning_seeds.run("pendulum", seed=0, iterations=20, eval_envs=4, algorithm="sac", eval_every=2)
    assert along["figure"][3:] == plain["figure"][3:] and not any(math.isnan(f) for f in plain["figure"][3:])
    assert along["last_record"]["critic_loss"] == plain["last_record"]["critic_loss"]
    assert along["eval_return"] == plain["eval_return"]
    assert [e["iteration"] for e in along["evaluations"]] == list(range(2, 21, 2))
    assert along["evaluations"][-1]["eval_return"] == along["eval_return"]
    late = [e["eval_return"] for e in along["evaluations"] if e["iteration"] >= 18]
    assert along["eval_return_late"] == pytest.approx(sum(late) / 2) and "evaluations" not in plain


def test_learning_seeds_merges_the_files_of_seeds_run_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`--merge`: the runs of one task, algorithm and settings written by separate commands, reported and written as
    one file, as one command over the seeds would; files of different runs, or a seed twice, are one line."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import learning_seeds

    def part(seed: int, figure: list[float], late: float, **changed: object) -> str:
        run = {"seed": seed, "figure": figure, "wall_seconds": 10.0 + seed, "eval_return": late + 1,
               "evaluations": [{"iteration": 2, "eval_return": 0.0}, {"iteration": 4, "eval_return": late}],
               "eval_return_late": late}
        path = tmp_path / f"s{seed}-{len(changed)}.json"
        path.write_text(json.dumps({"task": "pendulum", "algorithm": "sac", "settings": {}, "seeds": [seed],
                                    "windows": {}, "wall_seconds": [run["wall_seconds"]], "runs": [run],
                                    **changed}))
        return str(path)

    files = [part(0, [1.0, 3.0], 10.0), part(1, [2.0, 6.0], 20.0)]
    learning_seeds.main(["--merge", *files, "--windows", "1-2", "--out", str(tmp_path / "all.json")])
    out = capsys.readouterr().out
    assert "iterations 1-2: 3.000 ± 1.414 (min 2.000, max 4.000) over 2 seeds" in out
    assert "over the last 10 % of the iterations (every 2): mean return 15.00 ± 7.07 over 2 seeds" in out
    whole = json.loads((tmp_path / "all.json").read_text())
    assert whole["seeds"] == [0, 1] and whole["wall_seconds"] == [10.0, 11.0]
    assert whole["windows"]["1-2"]["per_seed"] == [2.0, 4.0] and [r["seed"] for r in whole["runs"]] == [0, 1]
    for other, says in (([files[0], part(2, [1.0], 0.0, algorithm="td3")], "algorithm 'td3', where"),
                        ([files[0], files[0]], "seed repeated among [0, 0]")):
        with pytest.raises(SystemExit, match=re.escape(says)):
            learning_seeds.main(["--merge", *other, "--windows", "1-1"])


def test_learning_seeds_windows_leave_out_iterations_without_a_finished_episode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from learning_seeds import window_summary

    nan = math.nan
    runs = [{"figure": [nan, 2.0, 4.0]}, {"figure": [nan, nan, 6.0]}, {"figure": [nan, nan, nan]}]
    summary = window_summary(runs, 2, 3)
    assert summary["per_seed"][:2] == [3.0, 6.0] and math.isnan(summary["per_seed"][2])
    assert (summary["seeds"], summary["mean"], summary["min"], summary["max"]) == (2, 4.5, 3.0, 6.0)
    assert summary["sd"] == pytest.approx(2.1213203)
    empty = window_summary(runs, 1, 1)
    assert empty["seeds"] == 0 and all(math.isnan(empty[k]) for k in ("mean", "sd", "min", "max"))


def test_mettagrid_restarts_counts_the_conversions_of_each_side(tmp_path: Path) -> None:
    pytest.importorskip("mettagrid")
    spec = importlib.util.spec_from_file_location("benchmark_mettagrid_restarts", BENCHMARKS / "mettagrid_restarts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--num_envs", "2", "--repeats", "1", "--steps", "60", "--out", str(tmp_path)])
    (row,) = json.loads((tmp_path / "results.json").read_text())["sizes"]
    assert row["simulations_started"] == 4  # 76 steps of 64-step episodes: each of the 2 restarted once
    assert row["conversions"] == {"on": 1, "off": 4} and row["on"]["median"] > 0 and row["off"]["median"] > 0
    assert "| 2 |" in (tmp_path / "results.md").read_text()
    module.main(["--switch", "host_env_worker", "--num_envs", "2", "--repeats", "1", "--steps", "60", "--out",
                 str(tmp_path)])
    (row,) = json.loads((tmp_path / "results.json").read_text())["sizes"]
    assert row["simulations_started"] == 4 and row["on"]["median"] > 0 and row["off"]["median"] > 0
    text = (tmp_path / "results.md").read_text()
    assert "`host_env_worker` on and off" in text and "conversions" not in text


def test_grid_scale_measures_agent_steps_and_refuses_uneven_splits(tmp_path: Path) -> None:
    pytest.importorskip("mettagrid")
    spec = importlib.util.spec_from_file_location("benchmark_grid_scale", BENCHMARKS / "grid_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--sims", "1", "--ranks", "1", "--iterations", "2", "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert row["agents"] == 4 and row["agent_steps_per_iteration"] == 4 * 32 and row["iterations"] == 2
    assert row["agent_steps_per_s"] > 0 and row["losses_finite"]
    assert "| 1 (4) | 1 | 128 |" in (tmp_path / "results.md").read_text()
    with pytest.raises(SystemExit, match="3 simulations on 2 processes"):
        module.main(["--sims", "3", "--ranks", "2", "--out", str(tmp_path)])


def test_the_own_env_study_envs_pass_check_env_and_lost_reads_what_was_learned(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    """`own_env_defaults.py`'s envs are valid syncfree envs (as a user's would have to be), and `lost` is the share
    of what a run learned that it lost by its end, for rising negative and positive returns alike."""
    from syncfree.envs.check import check_env

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import own_env_defaults as study

    for name in study.ENVS:
        check_env(getattr(study, f"make_{name}")(num_envs=8))
    assert study.summary([-100.0] * 10 + [-10.0] * 5 + [-20.0] * 10)["lost"] == pytest.approx(10 / 90)
    assert study.summary([0.0, 1.0, 0.5, *[1.0] * 20])["lost"] == 0.0  # first: the lowest of the first 10
    assert study.summary([1.0, 0.0, 0.5, *[1.0] * 10, *[0.5] * 10])["lost"] == 0.5


def test_learning_seeds_changes_the_settings_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--set KEY=VALUE`: the value read as JSON, else as a string, set on the preset and validated."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import learning_seeds

    from syncfree.errors import UserError

    assert learning_seeds.parse_setting("ppo.learning_rate=3e-3") == ("ppo.learning_rate", 0.003)
    assert learning_seeds.parse_setting("ppo.optimizer=muon") == ("ppo.optimizer", "muon")
    preset, make_runner, built = learning_seeds.preset, learning_seeds.make_runner, []

    def small_preset(task: str):
        cfg = preset(task)
        cfg.env.num_envs, cfg.perf.compile = 16, "off"
        return cfg

    def runner(cfg):
        built.append(cfg)
        return make_runner(cfg)

    monkeypatch.setattr(learning_seeds, "preset", small_preset)
    monkeypatch.setattr(learning_seeds, "make_runner", runner)
    learning_seeds.run("pendulum", seed=0, iterations=1, eval_envs=0, settings={"ppo.optimizer": "muon"})
    assert built[0].ppo.optimizer == "muon" and built[0].ppo.num_epochs == preset("pendulum").ppo.num_epochs
    with pytest.raises(UserError, match=r"ppo\.optimizer"):
        learning_seeds.run("pendulum", seed=0, iterations=1, eval_envs=0, settings={"ppo.optimizer": "sgd"})


def test_the_off_policy_learners_run_their_own_study_and_are_compared_at_ppos_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`syncfree-sac` starts from g1-track's SAC preset with the study's CPU-sized settings and its own iterations;
    the report gives its return at `syncfree`'s mean training time: each run's last evaluation by then."""
    pytest.importorskip("matplotlib")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from learning_parity import learner_config, parse_set, report, run_path, study_of

    from syncfree.algo.offpolicy import OffPolicyTrainConfig
    from syncfree.config import with_values
    from syncfree.errors import UserError
    from syncfree.tasks import preset
    from syncfree.tasks.configs import validated

    study = study_of("g1-track", "syncfree-sac")
    assert (study.iterations, study.eval_every) == (3500, 350) and study_of("g1-track").iterations == 100
    assert study_of("g1-track", "syncfree-sac", 7000).iterations == 7000  # `--iterations`, the learners' only
    assert study_of("g1-track", "syncfree", 7000).iterations == 100
    assert learner_config("g1-track", "syncfree-td3", 0, iterations=7000).iterations == 7000
    assert study.off_policy is not None
    cfg = validated(with_values(preset("g1-track", algorithm="sac"), study.off_policy.values("sac")))
    assert isinstance(cfg, OffPolicyTrainConfig)
    assert (cfg.learner.batch_size, cfg.learner.updates_per_iteration, cfg.policy.critic_hidden) == (
        256, 1, [512, 256, 128])

    assert parse_set(["ALGO.action_bounds=unit", "policy.critic_hidden=[64, 64]"]) == [
        ("ALGO.action_bounds", "unit"), ("policy.critic_hidden", [64, 64])]
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        parse_set(["ALGO.action_bounds"])
    # a misspelt key or a bad value is the config's one line, before any run starts
    assert learner_config("g1-track", "syncfree-td3", 0, ["ALGO.batch_size=128"]).learner.batch_size == 128
    with pytest.raises(UserError, match="batch_size"):
        learner_config("g1-track", "syncfree-sac", 0, ["ALGO.batchsize=128"])
    with pytest.raises(UserError, match=r"sac\.tau"):
        learner_config("g1-track", "syncfree-sac", 0, ["ALGO.tau=2"])
    refused = subprocess.run([sys.executable, str(BENCHMARKS / "learning_parity.py"), "--tasks", "g1-track",
                              "--learners", "syncfree-sac", "--seeds", "0", "--out", str(tmp_path / "refused"),
                              "--set", "ALGO.batchsize=128"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--set for syncfree-sac on g1-track" in refused.stderr
    assert "batch_size" in refused.stderr and not (tmp_path / "refused").exists()

    def write(learner: str, seed: int, points: list[tuple[float, float]]) -> None:
        path = run_path(tmp_path, "g1-track", learner, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        points_json = [{"iteration": i + 1, "env_steps": 100 * (i + 1), "seconds": s, "eval_return": r}
                       for i, (s, r) in enumerate(points)]
        path.write_text(json.dumps({"seed": seed, "points": points_json, "iterations_set": 3 if learner != "syncfree"
                                    else None}))

    write("syncfree", 0, [(100.0, 5.0), (200.0, 10.0)])
    write("syncfree", 1, [(100.0, 6.0), (220.0, 12.0)])  # mean training time 210 s
    write("syncfree-sac", 0, [(150.0, 1.0), (205.0, 2.0), (300.0, 9.0)])
    write("syncfree-sac", 1, [(150.0, 3.0), (215.0, 4.0), (300.0, 9.0)])
    text = " ".join(report(tmp_path).split())
    assert "syncfree-sac at syncfree's mean training time (210 s): 2.50 ±" in text and "(per seed 2.00, 3.00)" in text
    assert "--learners syncfree syncfree-sac --seeds 0 1 --out " in text and text.count("--iterations 3") == 1
    summary = json.loads((tmp_path / "result.json").read_text())["g1-track"]
    assert summary["syncfree-sac"]["at_syncfree_seconds"] == {"seconds": 210.0, "per_seed": [2.0, 3.0]}


def test_sac_vs_sb3_trains_the_preset_as_it_is_and_evaluates_along_the_run(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`--preset`: the layout both libraries share is the task's SAC preset's (its 3-step returns included);
    `--eval_every` evaluates the live policy as the final checkpoint is evaluated (the same envs and seed), and
    averages the last 10 %."""
    pytest.importorskip("gymnasium")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import sac_vs_sb3

    from syncfree.tasks import preset

    cfg = preset("gym:Pendulum-v1", algorithm="sac")
    assert cfg.sac.n_step == 3
    out = tmp_path / "report.json"
    assert sac_vs_sb3.main(["--env", "Pendulum-v1", "--preset", "--libraries", "syncfree", "--steps", "640",
                            "--seeds", "0", "--eval_envs", "2", "--eval_every", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["layout"] == {"envs": cfg.env.num_envs, "steps_per_env": cfg.sac.steps_per_env,
                                "gradient_steps": cfg.sac.updates_per_iteration, "batch_size": cfg.sac.batch_size,
                                "learning_starts": cfg.sac.learning_starts, "hidden": cfg.policy.actor_hidden,
                                "activation": "relu", "gamma": cfg.sac.gamma, "tau": cfg.sac.tau,
                                "buffer_size": cfg.sac.buffer_size, "n_step": cfg.sac.n_step}
    assert report["steps"] == 640 == 10 * cfg.env.num_envs * cfg.sac.steps_per_env
    (run,) = report["runs"]
    assert [iteration for iteration, _ in run["evaluations"]] == [2, 4, 6, 8, 10]
    assert run["evaluations"][-1][1] == pytest.approx(run["return"])  # the live policy is the checkpoint's
    assert run["return_late"] == run["evaluations"][-1][1]  # iteration 10 alone is in the last 10 %
    given = sac_vs_sb3.parse(["--env", "Pendulum-v1", "--preset", "--learning_starts", "128"]).layout
    assert given == {**report["layout"], "learning_starts": 128}
    one_step = sac_vs_sb3.parse(["--env", "Pendulum-v1", "--preset", "--n_step", "1"]).layout
    assert one_step == {**report["layout"], "n_step": 1}  # both libraries' n-step returns
    with pytest.raises(SystemExit, match="--n_step 0 is invalid"):
        sac_vs_sb3.parse(["--env", "Pendulum-v1", "--n_step", "0"])


def test_sac_vs_sb3_times_the_steady_iterations_after_the_first_that_trains(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Without evaluations the speed is also taken from two iterations past the first that trains (which compiles
    under `--compile`) to the end; a run that ends before is refused in one line. `--autocast` is the run's
    `perf.autocast`, the layout's n-step returns its `sac.n_step`."""
    pytest.importorskip("gymnasium")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import sac_vs_sb3

    import syncfree

    learn, precisions = syncfree.learn, []
    monkeypatch.setattr(syncfree, "learn", lambda *a, **k: precisions.append((k["perf.autocast"], k["sac.n_step"]))
                        or learn(*a, **k))
    out = tmp_path / "report.json"
    assert sac_vs_sb3.main(["--env", "Pendulum-v1", "--preset", "--libraries", "syncfree", "--steps", "640",
                            "--learning_starts", "64", "--seeds", "0", "--eval_envs", "2", "--autocast", "off",
                            "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["steady_from"], report["compile"]) == (3, "off")  # 64 random steps: iteration 1 of 64 env steps
    assert report["autocast"] == "off" and precisions == [("off", 3)]  # and the preset's 3-step returns
    assert sac_vs_sb3.parse(["--env", "Pendulum-v1"]).autocast == "auto"  # syncfree's default
    (run,) = report["runs"]
    assert run["steady_steps_per_s"] > 0 and report["summary"]["syncfree"]["steady_steps_per_s"]["mean"] > 0
    with pytest.raises(SystemExit, match="end before iteration 3"):
        sac_vs_sb3.main(["--env", "Pendulum-v1", "--preset", "--libraries", "syncfree", "--steps", "192",
                         "--learning_starts", "64", "--seeds", "0"])


def test_offpolicy_compile_runs_each_mode_with_gradient_steps_and_reports_medians(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each mode runs the learner from its first iteration on (no random steps), interleaved over repeats; the
    figures are medians of iterations 2..N and of the repeats, the warm-up a compiled first iteration minus eager's."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import offpolicy_compile

    calls = []
    seconds = {"off": [1.0, 0.5, 0.7, 0.6], "hot": [9.0, 0.4, 0.4, 0.5], "step": [12.0, 0.25, 0.2, 0.3]}

    def fake_run(task, compile, iterations, cache, runs, name, extra=()):
        calls.append((compile, tuple(extra)))
        return seconds[compile]

    monkeypatch.setattr(offpolicy_compile, "run", fake_run)
    result = offpolicy_compile.measure("pendulum", "td3", 4, 2, Path("/nonexistent"))
    assert [c for c, _ in calls] == ["off", "hot", "step"] * 2
    assert {extra for _, extra in calls} == {("--algorithm", "td3", "--td3.learning_starts", "0")}
    assert result["seconds_per_iteration"] == {"off": 0.6, "hot": 0.4, "step": 0.25}
    assert result["warmup_s"] == {"hot": 8.0, "step": 11.0}
    row = offpolicy_compile.report([result], "a CPU", "cmd").splitlines()[-1]
    assert row == "| pendulum | td3 | 0.600 | 0.400 | 0.250 | 2.40x | 1.60x | 8.0 | 11.0 |"


def test_the_action_saturation_probe_reports_each_learners_actions_at_its_points(monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    """g1-track's study settings, one iteration: TD3's deterministic actions lie in [-1, 1] (`unit` bounds), the
    share at the ends is a share, and the actor's pre-tanh output is reported for the off-policy learners only;
    settings given reach the learner's config."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from action_saturation_probe import probe

    (row,) = probe("syncfree-td3", 0, [1], ["ALGO.pre_tanh_penalty=0.01"], eval_envs=8)
    assert row["iteration"] == 1 and 0.0 <= row["saturated_share"] <= 1.0 and 0.0 < row["mean_abs_action"] <= 1.0
    assert row["mean_abs_pre_tanh"] > 0.0
    (ppo,) = probe("syncfree", 0, [1], [], eval_envs=8)
    assert "mean_abs_pre_tanh" not in ppo and ppo["mean_abs_action"] > 0.0


def test_batched_twin_critics_checks_the_gradients_equal_and_times_both_forms(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each cell times the two networks' and the batched form's gradient; the forms' gradients are compared first,
    and a batched form that computes another loss is refused."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import batched_twin_critics

    out = tmp_path / "twin.json"
    assert batched_twin_critics.main(["--rows", "8", "--width", "16", "--modes", "eager", "--calls", "1",
                                      "--repeats", "1", "--out", str(out)]) == 0
    cells = json.loads(out.read_text())["cells"]
    assert [(c["rows"], c["width"], c["precision"], c["compiled"]) for c in cells] == [(8, 16, "off", False),
                                                                                     (8, 16, "bf16", False)]
    for c in cells:
        assert c["two_networks_ms"] > 0 and c["batched_ms"] > 0
        assert c["speedup"] == pytest.approx(c["two_networks_ms"] / c["batched_ms"])
    batched_q = batched_twin_critics.batched_q  # a second critic that counts half: another loss
    monkeypatch.setattr(batched_twin_critics, "batched_q",
                        lambda *args: batched_q(*args) * torch.tensor([[1.0], [0.5]]))
    with pytest.raises(AssertionError, match=r"^w0$"):
        batched_twin_critics.cell(8, 16, 5, "off", False, 1, 1)


def test_autocast_threshold_times_both_precisions_per_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each cell times float32 and bfloat16 calls of the same network's gradient and reports their ratio."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import autocast_threshold

    out = tmp_path / "threshold.json"
    assert autocast_threshold.main(["--rows", "8", "16", "--widths", "16", "--modes", "eager", "--calls", "1",
                                    "--repeats", "1", "--out", str(out)]) == 0
    cells = json.loads(out.read_text())["cells"]
    assert [(c["rows"], c["width"], c["work"], c["compiled"]) for c in cells] == [(8, 16, 128, False),
                                                                                 (16, 16, 256, False)]
    for cell in cells:
        assert cell["float32_ms"] > 0 and cell["bfloat16_ms"] > 0
        assert cell["speedup"] == pytest.approx(cell["float32_ms"] / cell["bfloat16_ms"])
