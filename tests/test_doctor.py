"""`syncfree doctor`: host syncs, allocations and ops found at their source lines, in syncfree's envs and in a
user's env written for rsl_rl; budgets; the training loop as a target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from syncfree import doctor
from syncfree.cli import main
from syncfree.core.switches import PerfConfig
from syncfree.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")


class ConventionalEnv:
    """An env written for rsl_rl's interface with two conventional sync sites: the step count read with `.item()`
    and the finished envs reset through a boolean mask."""

    def __init__(self, num_envs: int = 8) -> None:
        self.num_envs, self.num_actions, self.max_episode_length = num_envs, 2, 5
        self.device, self.cfg = torch.device("cpu"), {}
        self.state = torch.zeros(num_envs, 2)
        self.length = torch.zeros(num_envs, dtype=torch.int64)
        self.steps = torch.zeros((), dtype=torch.int64)

    def get_observations(self):
        from tensordict import TensorDict

        return TensorDict({"policy": self.state.clone()}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor):
        self.state = self.state + 0.1 * actions
        self.length += 1
        self.steps += 1
        self.last_step = int(self.steps.item())  # PLANTED: a host read every step
        done = self.length >= self.max_episode_length
        self.state[done] = 0.0  # PLANTED: a boolean-mask reset
        self.length.masked_fill_(done, 0)
        distance = self.state.norm(dim=1)
        reward = -self.state.norm(dim=1) - 0.1 * distance  # PLANTED: the same norm again
        return self.get_observations(), reward, done, {"time_outs": done.clone()}


def make_conventional_env() -> ConventionalEnv:
    return ConventionalEnv()


def planted_line(marker: str) -> str:
    lines = Path(__file__).read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if marker in line and "PLANTED" in line)
    return f"{Path(__file__).name}:{number}"


def sites_of(report: doctor.Report) -> dict[str, dict]:
    return {Path(row["site"]).name: row for row in report.sites()}


def test_an_rsl_rl_env_s_planted_syncs_are_found_at_their_lines() -> None:
    pytest.importorskip("rsl_rl")
    report = doctor.examine_env(doctor.as_vec_env(make_conventional_env()), steps=10, warmup=2)
    found = sites_of(report)
    item, mask = planted_line("a host read every step"), planted_line("a boolean-mask reset")
    assert found[item]["sync_kinds"] == {"item": 1.0}
    assert found[mask]["syncs"] == 1.0 and "aten::index_put_" in found[mask]["sync_kinds"]
    top = [Path(row["site"]).name for row in report.sites()[:2]]
    assert sorted(top) == sorted([item, mask])  # the worst lines are the planted ones
    assert report.per_step()["syncs"] >= 2
    repeated = {Path(row["site"]).name: row["repeats"] for row in report.sites() if row["repeats"]}
    assert repeated == {planted_line("the same norm again"): 1.0}  # and nothing else repeats


def test_g1_track_conventional_paths_are_found_and_the_optimized_env_has_none() -> None:
    baseline = doctor.examine_env(doctor.task_env("g1-track", 32, PerfConfig.preset("baseline")), steps=12)
    files = {Path(row["site"].rpartition(":")[0]).name for row in baseline.sites() if row["syncs"] > 0}
    # history length `.item()` and `any()`, per-metric `.item()`, sampler diagnostics, reset `nonzero`, actions to
    # the host, termination counts
    assert {"history.py", "commands.py", "sampler.py", "env.py", "rewards.py"} <= files
    env_lines = [row for row in baseline.sites() if "managers/env.py:" in row["site"]]
    assert {k for row in env_lines for k in row["sync_kinds"]} >= {"cpu", "aten::nonzero"}
    optimized = doctor.examine_env(doctor.task_env("g1-track", 32, PerfConfig.preset("optimized")), steps=12)
    assert optimized.per_step()["syncs"] == 0
    assert all(row["syncs"] == 0 for row in optimized.sites())


def test_shared_observation_terms_remove_repeated_term_computations() -> None:
    """Without `shared_obs_terms` the groups of g1-track compute the same deterministic terms again in each step;
    the doctor finds the repeats at the terms' arithmetic."""
    def repeats_in_term_math(share: bool) -> float:
        report = doctor.examine_env(doctor.task_env("g1-track", 16, PerfConfig(shared_obs_terms=share)), steps=4)
        return sum(row["repeats"] for row in report.sites() if "envs/math.py" in row["site"])

    assert repeats_in_term_math(False) > repeats_in_term_math(True)


def test_the_training_loop_is_examined_phase_by_phase() -> None:
    from conftest import small_config

    report = doctor.examine_training(small_config("pendulum"))
    assert {"act", "env", "stats", "update.forward", "update.backward", "update.optimizer"} <= set(report.phases)
    assert report.unit["act"] == "step" and report.unit["update.forward"] == "minibatch"
    assert report.per_step()["syncs"] == 0 and report.per_step()["ops"] > 0
    cfg = small_config("pendulum")
    cfg.perf = PerfConfig.preset("baseline")
    cfg.perf.compile = "off"
    baseline = doctor.examine_training(cfg)
    assert baseline.per_step()["syncs"] == 7  # as rsl_rl's runner: 4 NaN checks, nonzero and two copies
    monitors = [row for row in baseline.sites() if "monitors.py" in row["site"] and row["syncs"] > 0]
    assert monitors and all(row["phase"] == "stats" for row in monitors)


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_the_off_policy_loop_is_examined_with_its_gradient_steps(algorithm: str, capsys) -> None:
    """`doctor train --algorithm sac`: the task's SAC preset, learning from the first step and warmed up until the
    buffer holds a batch, so that the counted iteration takes its gradient steps; 0 host reads per step and per
    gradient step. It examines `compile=step`, where a gradient step is one function (`update.step`), run eagerly
    under the counters."""
    assert main(["doctor", "train", "--task", "pendulum", "--algorithm", algorithm, "--env.num_envs", "32",
                 "--json", "--budget", "syncs=0"]) == 0
    report = json.loads(capsys.readouterr().out)
    phases = report["phases"]
    assert {"act", "store", "update.step"} <= set(phases)
    assert phases["update.step"]["per"] == "minibatch" and phases["update.step"]["runs"] == 32
    assert all(row["syncs"] == 0 for name, row in phases.items() if name != "logging"), phases
    assert f"with {algorithm}" in report["target"]
    with pytest.raises(UserError, match="doctor: --algorithm needs train"):
        doctor.parse_arguments(["--task", "pendulum", "--algorithm", algorithm])


def test_cli_table_json_and_budget(capsys, monkeypatch) -> None:
    pytest.importorskip("rsl_rl")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert main(["doctor", "--env", "test_doctor:make_conventional_env", "--steps", "5"]) == 0
    out = capsys.readouterr().out
    assert planted_line("a host read every step") in out.replace("tests/", "")
    assert main(["doctor", "--env", "test_doctor:make_conventional_env", "--steps", "5", "--json",
                 "--budget", "syncs=0"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["per_step"]["syncs"] == 2 and report["sites"][0]["syncs"] == 1
    assert "over budget: syncs per step 2 > budget 0" in captured.err
    assert main(["doctor", "--task", "point-mass", "--num_envs", "16", "--budget", "syncs=0,allocs=100"]) == 0


@pytest.mark.parametrize("args,culprit", [
    (["--task", "point-mass", "--budget", "time=1"], "unknown key 'time'"),
    (["--env", "no_such_module:make"], "cannot import 'no_such_module'"),
    (["--env", "json:nothing_here"], "json has no callable 'nothing_here'"),
    (["--env", "json:JSONDecoder"], "neither a syncfree VecEnv nor an rsl_rl VecEnv"),
    (["train", "--env", "json:JSONDecoder"], "train needs --task"),
])
def test_bad_targets_are_one_line(args: list[str], culprit: str, capsys) -> None:
    assert main(["doctor", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and culprit in err[0], err


@pytest.mark.parametrize("switch", ["fast_history", "reset_without_sync", None])
def test_g1_track_counts_equal_the_bench_s(switch: str | None) -> None:
    """The doctor's per-step and per-minibatch counts of a training iteration are the bench's for the same run:
    all switches at baseline, or one left out of the optimized set (the bench's leave-one-out rows); the lines it
    names add up to them."""
    from conftest import small_config
    from syncfree.bench.timing import count_iteration
    from syncfree.train.runner import Runner

    def config():
        cfg = small_config("g1-track")
        cfg.perf = PerfConfig.preset("baseline") if switch is None else doctor.with_switches(
            PerfConfig(compile="off"), [f"{switch}=false"])
        cfg.perf.compile = "off"
        return cfg

    report = doctor.examine_training(config())
    bench = Runner(config())
    bench.cfg.iterations = 1
    bench.learn()
    counts = count_iteration(bench)
    assert report.per_step()["syncs"] == pytest.approx(counts["syncs_per_step"])
    assert report.per_step()["syncs"] > 0
    minibatch = sum(c.syncs / report.per[name] for name, c in report.phases.items() if report.unit[name] == "minibatch")
    assert minibatch == pytest.approx(counts["syncs_per_minibatch"])
    per_step_sites = sum(row["syncs"] for row in report.sites() if row["per"] == "step")
    assert per_step_sites == pytest.approx(report.per_step()["syncs"])


def test_switch_settings_are_parsed_and_checked() -> None:
    perf = doctor.with_switches(PerfConfig(), ["fast_history=false", "critic_chunk_size=512", "compile=off"])
    assert (perf.fast_history, perf.critic_chunk_size, perf.compile) == (False, 512, "off")
    with pytest.raises(UserError, match="no switch 'fast_histories'"):
        doctor.with_switches(PerfConfig(), ["fast_histories=false"])
    with pytest.raises(UserError, match="fast_history is true or false"):
        doctor.with_switches(PerfConfig(), ["fast_history=maybe"])
    assert doctor.with_switches(PerfConfig(), ["grad_finite_from_norm=seed_before"]).grad_finite_from_norm == "seed_before"
    with pytest.raises(UserError, match="grad_finite_from_norm is true, false or seed_before"):
        doctor.with_switches(PerfConfig(), ["grad_finite_from_norm=before"])


def test_a_host_simulators_report_says_where_its_host_time_goes() -> None:
    """An adapter of a host simulator: microseconds per step by part of its step, and its copies per step (one
    each way when staged, none when its buffers are the trainer's tensors)."""
    from syncfree.envs.adapters.gymnasium import make_gymnasium

    for staged, copies in ((True, 1.0), (False, 0.0)):
        report = doctor.examine_env(make_gymnasium("Pendulum-v1", 4, seed=0, staged=staged), steps=6, warmup=2)
        assert list(report.host_time_us) == ["actions", "simulator", "packing", "device"]
        assert all(us > 0 for us in report.host_time_us.values())
        assert report.transfers == {"uploads": copies, "downloads": copies}
        assert report.per_step()["syncs"] == 0 and report.per_step()["allocs"] == 0
        text = doctor.table(report)
        assert "host time per env step (uncounted window): " in text
        assert f"host<->device copies per env step: {copies:g} uploads, {copies:g} downloads" in text
        assert report.to_json()["transfers"] == report.transfers
    assert doctor.examine_env(doctor.task_env("cartpole", 8, PerfConfig())).host_time_us == {}


def test_every_site_is_one_full_path_and_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The env's own file (here below the working folder) and syncfree's files are written the same way."""
    monkeypatch.chdir(Path(doctor.__file__).parent)  # syncfree's files lie below the working folder
    report = doctor.examine_env(doctor.task_env("pendulum", 8, PerfConfig.preset("optimized")), steps=4)
    sites = [row["site"] for row in report.sites()]
    assert sites and all(Path(site.rpartition(":")[0]).is_absolute() for site in sites), sites
    assert all(site.rpartition(":")[2].isdigit() for site in sites)
