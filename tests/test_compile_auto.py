"""`perf.compile=auto`, the default: a run compiles only when it is long enough for the measured compile warm-up to
pay back (early stopping counted), says which and why in its start line, and records the mode chosen in its config
and checkpoints; an env whose step does not compile as one graph runs eagerly beside the compiled trainer."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from syncfree import doctor
from syncfree.config import TrainConfig
from syncfree.core.compile import compile_counts, hot
from syncfree.core.switches import PerfConfig
from syncfree.envs.api import ActionSpec, TorchVecEnv
from syncfree.errors import UserError
from syncfree.tasks import default_config, make_env, preset, task_names
from syncfree.train import checkpoint, compile_choice
from syncfree.train.compile_choice import (
    CompileChoice,
    choose_compile,
    compile_env_step,
    earliest_stop,
    median_break_even,
    payback_table,
    resolve_compile,
)
from syncfree.train.run import Run, start
from syncfree.train.runner import Runner

ROOT = Path(__file__).resolve().parent.parent
CPU = torch.device("cpu")
FIGURES = {"eager_s": 0.3, "compiled_s": 0.1, "warmup_s": 40.0, "break_even": 201}


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A table of figures in place of the shipped one (so the rule is tested apart from what was measured)."""
    fake = {"machine": "test", "device": "cpu", "tasks": {
        "pendulum": FIGURES, "cartpole": {**FIGURES, "break_even": 10},
        "slow-to-compile": {**FIGURES, "compiled_s": 0.35, "break_even": None}},
        "learners": {"sac": {"pendulum": {**FIGURES, "warmup_s": 30.0, "break_even": 300},
                             "point-mass": {**FIGURES, "compiled_s": 0.35, "break_even": None},
                             "measured-a": {**FIGURES, "break_even": 50},
                             "measured-b": {**FIGURES, "break_even": 60}}}}
    monkeypatch.setattr(compile_choice, "payback_table", lambda: fake)
    return fake


def config(task: str, iterations: int, compile: str = "auto") -> TrainConfig:
    cfg = TrainConfig(task=task, iterations=iterations)
    cfg.perf = PerfConfig(compile=compile)  # type: ignore[arg-type]
    return cfg


def test_auto_compiles_from_the_break_even_on(table: dict) -> None:
    assert choose_compile(config("pendulum", 200), CPU).mode == "off"
    chosen = choose_compile(config("pendulum", 201), CPU)
    assert chosen.mode == "step"
    assert chosen.reason == "auto: a 40 s warm-up pays back after 201 iterations"
    short = choose_compile(config("pendulum", 20), CPU)
    assert short.mode == "off" and short.reason == "auto: a 40 s warm-up pays back after 201 iterations"


def test_auto_never_compiles_where_compiled_iterations_were_not_faster(table: dict) -> None:
    chosen = choose_compile(config("slow-to-compile", 10_000), CPU)
    assert chosen.mode == "off" and "were not faster (0.35 s against 0.3 s)" in str(chosen.reason)


def test_a_task_without_figures_takes_the_median_break_even(table: dict) -> None:
    # 201, 10 and never (counted as the longest, 201): the median is 201
    assert median_break_even(table["tasks"]) == 201
    assert median_break_even({"a": {**FIGURES, "break_even": None}}) == compile_choice.NEVER
    assert choose_compile(config("mine:make", 200), CPU).mode == "off"
    chosen = choose_compile(config("mine:make", 201), CPU)
    assert chosen == CompileChoice("step", "auto: the built-in presets' median warm-up pays back after 201 iterations")


def test_a_device_without_figures_compiles_and_a_set_mode_is_kept(table: dict) -> None:
    chosen = choose_compile(config("pendulum", 1), torch.device("cuda"))
    assert chosen.mode == "step" and "no measured warm-up on cuda" in str(chosen.reason)
    for mode in ("off", "hot", "step"):
        cfg = config("pendulum", 10_000 if mode == "off" else 1, mode)
        assert resolve_compile(cfg, CPU) == (cfg, compile_choice.CompileChoice(mode))


@pytest.mark.usefixtures("compile_enabled")
def test_without_a_cpp_compiler_auto_runs_eagerly_and_a_mode_set_is_one_line(table: dict) -> None:
    """torch builds its CPU kernels with a C++ compiler at the first compiled call (a slim container has none): there
    `auto` runs eagerly and says why, where the run would have crashed in its first iteration; `step` or `hot` set
    by the user is refused before anything runs. Other devices, and a disabled dynamo, need none."""
    import torch._inductor.config as inductor_config

    from syncfree.core.compile import missing_compiler

    assert missing_compiler(CPU) is None  # this machine has one
    with inductor_config.patch({"cpp.cxx": (None, "/nonexistent/g++")}):
        assert missing_compiler(CPU) == "/nonexistent/g++"
        assert choose_compile(config("pendulum", 201), CPU) == CompileChoice(
            "off", "auto: a 40 s warm-up pays back after 201 iterations, but no C++ compiler answers here (looked "
                   "for: /nonexistent/g++) to build torch's CPU kernels")
        assert choose_compile(config("pendulum", 200), CPU) == CompileChoice(
            "off", "auto: a 40 s warm-up pays back after 201 iterations")
        for mode in ("hot", "step"):
            with pytest.raises(UserError, match=rf"^perf\.compile={mode}: torch builds its CPU kernels with a C\+\+ "
                                                r"compiler and none answers here \(looked for: /nonexistent/g\+\+\); "
                                                r"install one \(g\+\+\) or name it in CXX, or set perf\.compile=off$"):
                choose_compile(config("pendulum", 1, mode), CPU)
        assert choose_compile(config("pendulum", 1, "off"), CPU) == CompileChoice("off")
        assert missing_compiler(torch.device("cuda")) is None
        with torch._dynamo.config.patch(disable=True):
            assert missing_compiler(CPU) is None
            assert choose_compile(config("pendulum", 1, "step"), CPU) == CompileChoice("step")


def test_resolving_copies_the_config(table: dict) -> None:
    cfg = config("cartpole", 10)
    resolved, chosen = resolve_compile(cfg, CPU)
    assert (resolved.perf.compile, cfg.perf.compile, chosen.mode) == ("step", "auto", "step")
    assert dataclasses.replace(resolved.perf, compile="auto") == cfg.perf


def learner(task: str, iterations: int, algorithm: str = "sac", **own: int) -> TrainConfig:
    cfg = preset(task, algorithm=algorithm)
    cfg.iterations = iterations
    for key, value in own.items():
        setattr(getattr(cfg, algorithm), key, value)
    return cfg


def test_an_off_policy_learner_weighs_its_own_figures_from_its_first_gradient_step(table: dict) -> None:
    """SAC's figures, not its task's (PPO's 201 on pendulum), counted over the iterations that take gradient steps:
    pendulum's preset takes 4 iterations of random steps first."""
    cfg = learner("pendulum", 303)
    assert cfg.iterations_before_learning() == 4
    assert choose_compile(cfg, CPU) == CompileChoice(
        "off", "auto: sac's 30 s warm-up pays back after 300 iterations that update (the first after 4 without)")
    assert choose_compile(learner("pendulum", 304), CPU).mode == "step"
    assert choose_compile(learner("pendulum", 300, learning_starts=0), CPU) == CompileChoice(
        "step", "auto: sac's 30 s warm-up pays back after 300 iterations")
    assert choose_compile(learner("point-mass", 10_000), CPU) == CompileChoice(
        "off", "auto: point-mass's compiled iterations of sac were not faster (0.35 s against 0.3 s)")
    stopped = learner("pendulum", 10_000)
    stopped.callbacks = dataclasses.replace(stopped.callbacks, eval_every=200, stop_when="eval_return >= 0")
    assert choose_compile(stopped, CPU) == CompileChoice(
        "off", "auto: sac's 30 s warm-up pays back after 300 iterations that update (the first after 4 without); "
               "callbacks.stop_when may stop the run at iteration 200")


def test_a_learner_without_figures_of_its_own_runs_eagerly_or_takes_its_median(table: dict) -> None:
    # TD3 has no figures in the table: eager at any length, not PPO's figures
    assert choose_compile(learner("pendulum", 100_000, "td3"), CPU) == CompileChoice(
        "off", "auto: td3 runs eagerly (its compile warm-up is not measured)")
    # a task SAC was not measured on: the median of SAC's break-evens (50, 60, 300, never counted as 300)
    cfg = learner("cartpole-continuous", 59, learning_starts=0)
    assert cfg.iterations_before_learning() == 0
    expected = "auto: the built-in presets' median warm-up of sac pays back after 60 iterations"
    assert choose_compile(cfg, CPU) == CompileChoice("off", expected)
    assert choose_compile(learner("cartpole-continuous", 60, learning_starts=0), CPU) == CompileChoice("step", expected)
    # on a device its gradient step was not measured on: eager (PPO's loop compiles there)
    assert choose_compile(learner("pendulum", 100_000), torch.device("cuda")) == CompileChoice(
        "off", "auto: sac's compiled gradient step has no measured warm-up on cuda; --perf.compile step compiles it")


def test_code_built_outside_a_runner_refuses_auto() -> None:
    with pytest.raises(ValueError, match=r"perf\.compile=auto is chosen per run"):
        hot(lambda x: x, PerfConfig(), CPU)


def payback_script():
    spec = importlib.util.spec_from_file_location("compile_payback", ROOT / "benchmarks" / "compile_payback.py")
    script = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(script)  # type: ignore[union-attr]
    return script


def test_the_shipped_table_covers_the_built_in_tasks_and_is_consistent() -> None:
    """The figures `benchmarks/compile_payback.py` wrote: every built-in task has them (mjlab's tasks run in an
    environment of their own), and each break-even, the learners' too, follows from the seconds beside it by the
    script's formula."""
    script = payback_script()
    measured = payback_table()
    assert measured["device"] == "cpu"
    assert {name for name in task_names() if "<" not in name} <= set(measured["tasks"])
    learners = [(f"{task} ({a})", f) for a, by_task in measured["learners"].items() for task, f in by_task.items()]
    for task, f in [*measured["tasks"].items(), *learners]:
        saving = f["eager_s"] - f["compiled_s"]
        expected = 1 + math.ceil(f["warmup_s"] / saving) if saving > 0 else None
        # the table rounds its seconds: the break-even from the rounded figures may differ by one
        assert expected is None if f["break_even"] is None else abs(f["break_even"] - expected) <= 1, task
    assert script.TABLE == compile_choice.TABLE


def test_the_docs_and_the_shipped_table_are_the_benchmarks_results() -> None:
    script = payback_script()
    saved = json.loads((ROOT / "benchmarks" / "results" / "compile-payback-cpu" / "results.json").read_text())
    ordered = script.ordered_results({(r["task"], r.get("algorithm")): r for r in saved["results"]})
    text = script.DOCS.read_text()
    assert script.docs_with_table(text, ordered, saved["machine"]) == text  # the block is current
    assert "| task | eager s/it |" in text and "| pendulum (sac) |" in text
    shipped = payback_table()
    assert {k: shipped[k] for k in ("tasks", "learners")} == {
        k: v for k, v in script.shipped_table(ordered, saved["machine"]).items() if k in ("tasks", "learners")}
    assert set(shipped["learners"]) == set(script.LEARNERS)
    assert all(set(shipped["learners"][a]) == set(script.LEARNER_TASKS) for a in script.LEARNERS)


def test_the_warm_up_counts_the_iterations_up_to_the_first_that_updates() -> None:
    """A learner's gradient step first compiles where its buffer first holds a batch: the warm-up is what the
    compiled run took more up to that iteration, the seconds per iteration are those after it."""
    script = payback_script()
    eager, compiled = [1.0, 1.0, 2.0, 2.0, 2.0, 2.0], [3.0, 21.0, 1.5, 1.5, 1.5, 1.5]
    assert script.figures(eager, compiled) == {"eager_s": 2.0, "compiled_s": 1.5, "warmup_s": 2.0, "break_even": 5}
    assert script.figures(eager, compiled, first=2) == {"eager_s": 2.0, "compiled_s": 1.5, "warmup_s": 22.0,
                                                        "break_even": 45}


def test_a_short_run_of_the_default_config_runs_eagerly_and_records_it(tmp_path: Path) -> None:
    cfg = preset("pendulum")
    cfg.iterations, cfg.env.num_envs, cfg.ppo.steps_per_env = 2, 16, 8
    assert cfg.perf.compile == "auto"
    runner = Run(cfg, tmp_path / "run")
    try:
        runner.learn()
    finally:
        runner.close()
    assert runner.cfg.perf.compile == "off" and cfg.perf.compile == "auto"
    execution = runner.runner.execution()
    assert "perf.compile=off (auto: a " in execution and " warm-up pays back after " in execution
    lines = (tmp_path / "run" / "config.yaml").read_text().splitlines()
    assert lines[0] == f"# ran on {execution}"
    assert yaml.safe_load("\n".join(lines))["perf"]["compile"] == "off"
    stored, _ = checkpoint.read(str(tmp_path / "run" / "latest.pt"))
    assert stored.perf.compile == "off"  # a resume runs as the run did, and does not choose again


@pytest.mark.slow
def test_the_cli_says_what_auto_chose(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "syncfree", "train", "--task", "cartpole", "--iterations", "2",
                           "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false"],
                          capture_output=True, text=True, timeout=300, env={"OMP_NUM_THREADS": "1",
                                                                            "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    start = next(line for line in done.stderr.splitlines() if line.startswith("training cartpole"))
    assert "2 iterations; on cpu" in start and "perf.compile=off (auto: a " in start
    assert "first iteration compiles" not in done.stderr


# -- early stopping ----------------------------------------------------------------------------------------------

def stopping(task: str, iterations: int, **callbacks: object) -> TrainConfig:
    cfg = config(task, iterations)
    cfg.callbacks = dataclasses.replace(cfg.callbacks, **callbacks)
    cfg.callbacks.validate()
    return cfg


def test_early_stopping_counts_only_the_iterations_a_run_is_sure_to_run(table: dict) -> None:
    """`stop_when` on a training metric may stop after the first iteration; on an evaluation metric, at the first
    evaluation; `patience` no sooner than `patience` records after the first that reports its metric."""
    assert earliest_stop(stopping("pendulum", 1000).callbacks) is None
    assert earliest_stop(stopping("pendulum", 1000, stop_when="mean_return >= 0").callbacks) == (
        1, "callbacks.stop_when")
    evaluated = stopping("pendulum", 1000, eval_every=50, stop_when="eval_return >= 0", save_best="eval_return",
                         patience=3)
    assert earliest_stop(evaluated.callbacks) == (50, "callbacks.stop_when")
    assert earliest_stop(stopping("pendulum", 1000, save_best="mean_return", patience=9).callbacks) == (
        10, "callbacks.patience")
    assert earliest_stop(stopping("pendulum", 1000, eval_every=50, save_best="eval_return", patience=4).callbacks) == (
        250, "callbacks.patience")


def test_auto_does_not_compile_a_run_that_may_stop_before_the_break_even(table: dict) -> None:
    chosen = choose_compile(stopping("pendulum", 10_000, stop_when="mean_return >= 0"), CPU)
    assert chosen == CompileChoice("off", "auto: a 40 s warm-up pays back after 201 iterations; callbacks.stop_when "
                                          "may stop the run at iteration 1")
    chosen = choose_compile(stopping("mine:make", 10_000, save_best="mean_return", patience=100), CPU)
    assert chosen == CompileChoice("off", "auto: the built-in presets' median warm-up pays back after 201 iterations; "
                                          "callbacks.patience may stop the run at iteration 101")
    late = choose_compile(stopping("pendulum", 10_000, eval_every=250, stop_when="eval_return >= 0"), CPU)
    assert late == CompileChoice("step", "auto: a 40 s warm-up pays back after 201 iterations; callbacks.stop_when "
                                         "stops none before 250")
    assert choose_compile(stopping("pendulum", 100, eval_every=250, stop_when="eval_return >= 0"), CPU).mode == "off"


# -- an env whose step does not compile as one graph -------------------------------------------------------------

class ItemEnv(TorchVecEnv):
    """A user's env with a host read in its step, as Isaac Lab-style code has one: it runs eagerly, and its step
    cannot be one compiled graph."""

    state_names = ("state",)
    action_spec = ActionSpec("continuous", 1)

    def __init__(self, num_envs: int = 8, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(num_envs, device, seed, max_episode_length=16)
        self.obs_shapes = {"policy": (2,), "critic": (2,)}
        self.state = torch.zeros(num_envs, 2, device=self.device)

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.state[:, 1].add_(0.1 * actions[:, 0].clamp(-1.0, 1.0))
        self.state[:, 0].add_(0.1 * self.state[:, 1])
        if self.state.abs().max().item() > 10:  # the graph break
            self.state.clamp_(-10.0, 10.0)
        return -self.state.pow(2).sum(1), self.state[:, 0].abs() > 2

    def _initial_state(self) -> dict[str, torch.Tensor]:
        return {"state": self._uniform(-0.5, 0.5, 2)}

    def _observe(self) -> dict[str, torch.Tensor]:
        return {"policy": self.state.clone(), "critic": self.state.clone()}


HERE = os.path.relpath(__file__) if __file__.startswith(os.getcwd() + os.sep) else __file__
BREAK = next(f"{HERE}:{number}" for number, line in enumerate(Path(__file__).read_text().splitlines(), 1)
             if line.endswith("# the graph break"))
"""`file:line` of `ItemEnv`'s graph break."""


def own_env_config(iterations: int, compile: str = "auto") -> TrainConfig:
    """A run on `ItemEnv` (8 envs x 4 steps, one epoch of one minibatch, 8-unit networks) as `syncfree.learn` makes
    it for an env of the user's."""
    cfg = default_config("ItemEnv", None, iterations=iterations)
    cfg.env.num_envs = 8
    cfg.ppo = dataclasses.replace(cfg.ppo, steps_per_env=4, num_epochs=1, num_minibatches=1)
    cfg.policy = dataclasses.replace(cfg.policy, actor_hidden=[8], critic_hidden=[8])
    cfg.perf = PerfConfig(compile=compile)  # type: ignore[arg-type]
    cfg.log.progress = False
    return cfg


@pytest.mark.slow  # the trainer's graphs: about 1 min with empty compile caches, 12 s with them kept
def test_auto_compiles_the_trainer_and_runs_an_env_that_breaks_the_graph_eagerly(
        table: dict, compile_enabled: None, caplog: pytest.LogCaptureFixture) -> None:
    """Long enough to compile (the median break-even, 201), the run compiles the trainer's functions, steps the env
    eagerly, trains, and its start line names the line that breaks the env's graph."""
    env = ItemEnv()
    with caplog.at_level(logging.INFO, logger="syncfree"):
        run = start(own_env_config(201), None, env=env)
    try:
        assert run.cfg.perf.compile == "step"
        assert run.runner.compile_choice.env_break is not None and run.runner.compile_choice.env_break.site == BREAK
        assert "_transition" not in vars(env)  # the env's step is not wrapped: it runs eagerly
        start_line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("training ItemEnv"))
        assert (f"perf.compile=step (auto: the built-in presets' median warm-up pays back after 201 iterations; "
                f"ItemEnv's step runs eagerly: its graph breaks at {BREAK} (data-dependent branching))") in start_line
        before = compile_counts()["unique_graphs"]
        run.learn(until=2)
        assert run.runner.iteration == 2
        assert compile_counts()["unique_graphs"] > before  # the trainer's graphs
    finally:
        run.close()


@pytest.mark.slow  # SAC's whole gradient step compiles
@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_auto_compiles_an_off_policy_learner_on_a_users_env_that_breaks_the_graph(
        table: dict, compile_enabled: None, algorithm: str) -> None:
    """SAC and TD3 on a user's env past their break-even (the fake table's median for SAC, 60 iterations; TD3 has
    no figures there and runs eagerly): SAC compiles its whole gradient step, steps the env eagerly and trains."""
    cfg = default_config("ItemEnv", algorithm, iterations=60)
    cfg.env.num_envs, cfg.log.progress = 8, False
    own = cfg.learner
    own.batch_size, own.learning_starts, own.buffer_size, own.updates_per_iteration = 16, 0, 512, 2
    cfg.policy = dataclasses.replace(cfg.policy, actor_hidden=[8], critic_hidden=[8])
    env = ItemEnv()
    run = start(cfg, None, env=env)
    try:
        compiled = algorithm == "sac"
        assert run.cfg.perf.compile == ("step" if compiled else "off")
        assert "_transition" not in vars(env)  # the env's step runs eagerly either way
        assert (run.runner.algorithm._whole_step is not None) == compiled
        before = compile_counts()["unique_graphs"]
        records = [run.learn(until=it) for it in (1, 2, 3)]
        assert all(r["gradient_steps"] == 2 and math.isfinite(r["critic_loss"]) for r in records)
        assert (compile_counts()["unique_graphs"] > before) == compiled
    finally:
        run.close()


def test_forcing_compile_on_an_env_that_breaks_the_graph_is_one_line(compile_enabled: None) -> None:
    for mode in ("step", "hot"):
        with pytest.raises(UserError) as refused:
            Runner(own_env_config(1, mode), env=ItemEnv())
        message = str(refused.value)
        assert len(message.splitlines()) == 1
        assert message.startswith(f"perf.compile={mode}: ItemEnv's step does not compile as one graph: {BREAK} "
                                  "(data-dependent branching: if self.state.abs().max().item() > 10:  # the graph "
                                  "break); set perf.compile=auto"), message


def test_a_resumed_run_keeps_its_mode_and_runs_such_an_env_eagerly(compile_enabled: None) -> None:
    """A resume's mode was chosen by the run it continues: where the env's step no longer compiles, it runs
    eagerly instead of refusing the resume."""
    cfg = own_env_config(1, "step")
    cfg.resume = "earlier/latest.pt"
    env = ItemEnv()
    chosen = compile_env_step(env, CompileChoice("step"), cfg, CPU)
    assert chosen.env_break is not None and chosen.reason == (f"ItemEnv's step runs eagerly: its graph breaks at "
                                                              f"{chosen.env_break}")
    assert "_transition" not in vars(env)


def test_the_probe_leaves_the_env_as_it_was_and_built_in_steps_are_one_graph(compile_enabled: None) -> None:
    """Probing traces the step without running it: the env's state and random stream are untouched, and the built-in
    torch tasks' steps are one graph (their runs compile them as before)."""
    for task in ("cartpole", "pendulum", "point-mass"):
        env = make_env(task, num_envs=4)
        env.reset()
        before = env.state_dict()
        assert env.step_graph_break() is None, task
        after = env.state_dict()
        assert after.keys() == before.keys()
        for name in before:
            assert torch.equal(torch.as_tensor(before[name]), torch.as_tensor(after[name])), (task, name)
    env = ItemEnv()
    env.reset()
    found = env.step_graph_break()
    assert found is not None and (found.site, found.why) == (BREAK, "data-dependent branching")


def test_doctor_says_what_stops_the_compile(compile_enabled: None) -> None:
    report = doctor.examine_env(ItemEnv(), steps=2, warmup=1)
    assert report.compile.startswith(f"the env's step does not compile as one graph: {BREAK} (data-dependent "
                                     "branching: if self.state.abs().max().item() > 10:")
    assert "perf.compile=auto runs it eagerly" in doctor.table(report)
    assert report.to_json()["compile"] == report.compile
    assert doctor.compile_verdict(make_env("cartpole", num_envs=4)) == "the env's step compiles as one graph"
