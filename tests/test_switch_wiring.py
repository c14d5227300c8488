"""Every perf switch reaches every module that reads it: each file that reads `perf.<switch>` (found by a walk over
the source, `switch_readers.readers`) is built from a config whose switches are all at a non-default value, and the
value it reads there is the one set (a `RecordingPerf` records the reading file and the value). `WIRING` names, for
every reader, the driver that builds it; a new reader that the table does not name fails, and so does a wiring
that hands a module another config (a default, a copy with the switch reset) or stops reading the switch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from switch_readers import readers, recorded_reads, recording

import conftest
from conftest import TEST_DEVICE, small_config
from syncfree.config import PerfConfig, TrainConfig
from syncfree.core.switches import Scope
from syncfree.errors import UserError
from syncfree.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")

NON_DEFAULT = dataclasses.replace(PerfConfig.preset("baseline"), validate_distributions=True)
"""Every switch away from its default: at its baseline, and the check on (its baseline is its default)."""


STARTING = dataclasses.replace(NON_DEFAULT, compile="hot", validate_distributions=False)
"""For a run's start: a compile mode that compiles (`off` says nothing of it), the check off as `hot` needs."""


def non_default(switch: str, driver: str = "") -> Any:
    """The value `driver` sets `switch` to."""
    if driver.startswith("whole-step fallback"):
        return getattr(NON_DEFAULT, switch) if switch in driver else getattr(PerfConfig(compile="step"), switch)
    return getattr(STARTING if driver in ("start", "listing") else NON_DEFAULT, switch)


WIRING: dict[str, dict[str, str]] = {
    "autocast": {"algo/distillation.py": "distillation", "algo/feedforward.py": "ppo-mlp",
                 "algo/recurrent.py": "recurrent-token-sets", "algo/offpolicy.py": "sac",
                 "config/sections.py": "validation", "core/switches.py": "rules", "train/evaluate.py": "evaluation",
                 "train/runner.py": "ppo-mlp"},
    "batched_command_metrics": {"envs/managers/env.py": "ppo-token-env-layer"},
    "cache_encoded_outputs": {"algo/feedforward.py": "ppo-token-env-layer"},
    "cache_full_latent": {"algo/feedforward.py": "ppo-token-env-layer"},
    "cache_game_config": {"tasks/grid_arena.py": "recurrent-token-sets"},
    "cached_minibatch_indices": {"algo/recurrent.py": "recurrent-token-sets"},
    "compile": {"algo/distillation.py": "distillation", "algo/feedforward.py": "ppo-mlp",
                "algo/offpolicy.py": "sac", "algo/recurrent.py": "recurrent-token-sets", "config/sections.py": "validation",
                "core/compile.py": "ppo-mlp", "core/switches.py": "rules", "switches.py": "listing",
                "train/compile_choice.py": "ppo-mlp", "train/run.py": "start", "train/runner.py": "start"},
    "cpu_time_index": {"algo/recurrent.py": "recurrent-token-sets"},
    "critic_chunk_size": {"algo/distillation.py": "distillation", "algo/feedforward.py": "ppo-mlp",
                          "config/sections.py": "validation", "core/switches.py": "rules"},
    "cuda_graphs": {"config/sections.py": "validation", "core/compile.py": "ppo-mlp"},
    "deferred_episode_stats": {"train/monitors.py": "ppo-mlp"},
    "deferred_nonfinite_check": {"train/monitors.py": "ppo-mlp"},
    "deterministic": {"bench/floor.py": "floor", "train/runner.py": "ppo-mlp"},
    "device_adaptive_lr": {"algo/feedforward.py": "whole-step fallback: device_adaptive_lr", "algo/optim.py": "ppo-mlp", "core/switches.py": "rules"},
    "device_loss_stats": {"algo/distillation.py": "distillation", "algo/feedforward.py": "ppo-mlp",
                          "algo/offpolicy.py": "sac", "core/switches.py": "rules"},
    "fast_history": {"envs/managers/env.py": "ppo-token-env-layer"},
    "fused_adamw": {"algo/optim.py": "ppo-mlp", "algo/rnd.py": "ppo-rnd"},
    "fused_target_update": {"algo/offpolicy.py": "td3"},
    "gate_full_log_probs": {"algo/recurrent.py": "recurrent-token-sets"},
    "grad_finite_from_norm": {"algo/feedforward.py": "whole-step fallback: grad_finite_from_norm", "algo/optim.py": "ppo-mlp",
                              "core/switches.py": "rules"},
    "host_env_worker": {"tasks/grid_arena.py": "recurrent-token-sets", "tasks/gym.py": "gymnasium"},
    "log_env_actions": {"envs/managers/env.py": "ppo-token-env-layer"},
    "physics_partitions": {"config/sections.py": "validation", "envs/adapters/isaaclab.py": "isaaclab"},
    "preallocated_last_actions": {"algo/recurrent.py": "recurrent-token-sets"},
    "replay_on_device": {"algo/offpolicy.py": "sac"},
    "reset_without_sync": {"envs/managers/env.py": "ppo-token-env-layer"},
    "retain_host_memory": {"train/runner.py": "ppo-mlp"},
    "sampling_diagnostics": {"envs/builtin/g1_track/env.py": "ppo-token-env-layer"},
    "shared_obs_terms": {"envs/managers/env.py": "ppo-token-env-layer"},
    "sparse_token_max": {"algo/recurrent.py": "recurrent-token-sets"},
    "token_embedding_tables": {"algo/recurrent.py": "recurrent-token-sets"},
    "validate_distributions": {"algo/distillation.py": "distillation", "algo/feedforward.py": "ppo-mlp"},
    "vectorized_n_step": {"algo/offpolicy.py": "td3"},
    "whole_chunk_distillation": {"algo/distillation.py": "distillation"},
    "zero_grad_set_to_none": {"algo/optim.py": "ppo-mlp"},
}
"""Switch -> each file that reads it -> the driver (`DRIVERS`) that builds that file's reader."""


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> str:
    return conftest.pendulum_teacher(tmp_path_factory.mktemp("teacher"))


def train(cfg: TrainConfig, iterations: int = 1) -> None:
    """`iterations` of `cfg` with every switch at its non-default value (`compile=off`, as `NON_DEFAULT` has it)."""
    cfg.perf = recording(NON_DEFAULT)
    cfg.iterations = iterations
    runner = Runner(cfg)
    runner.learn()
    close = getattr(runner.env, "close", None)
    if close is not None:
        close()


def grid() -> TrainConfig:
    pytest.importorskip("mettagrid")
    return conftest.grid_config()


def off_policy(algorithm: str) -> TrainConfig:
    from test_offpolicy import small
    return small(algorithm, n_step=3)


def token_env_layer() -> TrainConfig:
    from test_g1_switches import g1_config
    return g1_config(token=True)


def with_rnd() -> TrainConfig:
    from test_rnd import rnd_config
    return rnd_config()


def rules(teacher: str, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    """Each switch's applicability rule and those that read it, with that switch alone non-default (the rules
    read the others only past it), in scopes where each rule reads on."""
    scopes = [Scope(critic_rows=1 << 20), Scope(device="cuda"), Scope(off_policy=True, n_step=3, flat_rollouts=False),
              Scope(segment_buffer=True, full_log_probs=True, token_sets=True, token_policy=True)]
    for f in PerfConfig.switches():
        perf = recording(dataclasses.replace(PerfConfig(compile="step"), **{f.name: non_default(f.name)}))
        for scope in scopes:
            perf.inert_switches(scope)


def validation(teacher: str, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    cfg = small_config("pendulum")
    cfg.perf = recording(NON_DEFAULT)
    cfg.validate()


def listing(teacher: str, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    """`syncfree switches --task pendulum`, on the preset with the non-default values (a compile mode that compiles:
    the listing's default, `auto`, is then another value, and one a valid config holds)."""
    from syncfree import switches

    def preset(task: str, algorithm: str | None = None) -> TrainConfig:
        cfg = small_config(task)
        cfg.perf = recording(STARTING)
        return cfg

    monkeypatch.setattr(switches, "preset", preset)
    switches.listing("pendulum")


def start(teacher: str, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    """A run's start (its start lines say the compile mode), closed unstarted."""
    from syncfree.train.run import start as start_run

    cfg = small_config("pendulum")
    cfg.perf = recording(STARTING)
    start_run(cfg, tmp / "run").close()


def evaluation(teacher: str, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    """The policy of a checkpoint whose config has the non-default values, loaded for evaluation."""
    from syncfree.train import checkpoint, evaluate

    read = checkpoint.read

    def recorded(path: Path) -> tuple[TrainConfig, dict[str, Any]]:
        cfg, state = read(path)
        cfg.perf = recording(NON_DEFAULT)
        return cfg, state

    monkeypatch.setattr(checkpoint, "read", recorded)
    evaluate.load_policy(teacher)


def floor(teacher: str, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    """The bench's floor measured on a runner whose config has the non-default values (its loops stubbed)."""
    from syncfree.bench import floor as floor_module

    monkeypatch.setattr(floor_module, "floor_seconds", lambda *loops: {})
    measured = object.__new__(floor_module.Floor)
    measured.runner = SimpleNamespace(cfg=SimpleNamespace(perf=recording(NON_DEFAULT)), device=torch.device("cpu"),
                                      env=None, algorithm=SimpleNamespace(update=None))
    measured.measure()


def isaaclab(teacher: str, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    from syncfree.envs.adapters.isaaclab import apply_perf_settings

    physx = SimpleNamespace(gpu_max_num_partitions=4)
    apply_perf_settings(SimpleNamespace(sim=SimpleNamespace(dt=0.005, physx=physx)), recording(NON_DEFAULT))


def gymnasium(teacher: str, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    pytest.importorskip("gymnasium")
    from syncfree.tasks import make_task_env, preset

    cfg = preset("gym:CartPole-v1")
    cfg.perf = recording(NON_DEFAULT)
    make_task_env(cfg, 2, torch.device(TEST_DEVICE), 0).close()


def trains(build: Callable[[str], TrainConfig], iterations: int = 1) -> Callable[[str, pytest.MonkeyPatch, Path], None]:
    return lambda teacher, monkeypatch, tmp: train(build(teacher), iterations)


def whole_step_fallback(switch: str) -> Callable[[str, pytest.MonkeyPatch, Path], None]:
    """PPO under `compile=step` with `switch` alone at its baseline: the update says why it is not one graph."""
    def build(teacher: str, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
        cfg = small_config("pendulum")
        cfg.ppo = dataclasses.replace(cfg.ppo, schedule="adaptive")
        cfg.perf = recording(PerfConfig(compile="step", **{switch: non_default(switch)}))
        Runner(cfg)
    return build


DRIVERS: dict[str, Callable[[str, pytest.MonkeyPatch, Path], None]] = {
    "ppo-mlp": trains(lambda teacher: small_config("pendulum")),
    "ppo-token-env-layer": trains(lambda teacher: token_env_layer()),
    "ppo-rnd": trains(lambda teacher: with_rnd()),
    "recurrent-token-sets": trains(lambda teacher: grid()),
    "distillation": trains(conftest.distill_config),
    "sac": trains(lambda teacher: off_policy("sac"), iterations=2),  # the first fills the buffer
    "td3": trains(lambda teacher: off_policy("td3"), iterations=2),
    **{f"whole-step fallback: {switch}": whole_step_fallback(switch)
       for switch in ("device_adaptive_lr", "grad_finite_from_norm")},
    "rules": rules, "validation": validation, "listing": listing, "start": start, "evaluation": evaluation,
    "floor": floor, "isaaclab": isaaclab, "gymnasium": gymnasium,
}
"""Driver -> what builds (and runs once) the modules it reaches, every switch at its non-default value."""

OBSERVED: dict[str, set[tuple[str, str, str]]] = {}


@pytest.fixture
def observed(teacher: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], set]:
    """Driver -> the reads it made (each driver runs once per test process)."""
    def reads(driver: str) -> set[tuple[str, str, str]]:
        if driver not in OBSERVED:
            with monkeypatch.context() as patched, recorded_reads() as seen:
                DRIVERS[driver](teacher, patched, tmp_path)
            OBSERVED[driver] = seen
        return OBSERVED[driver]
    return reads


def test_the_table_names_every_reader_of_every_switch_and_no_other() -> None:
    found = {switch: files for switch, files in readers().items() if files}
    assert found == {switch: set(files) for switch, files in WIRING.items()}, (
        "a file reads a switch the table does not name, or no longer reads one it names: update WIRING")
    assert set(PerfConfig.switches_by_name()) == set(WIRING), "a switch that no file reads"


@pytest.mark.parametrize(("switch", "file"), [(s, f) for s, files in WIRING.items() for f in files],
                         ids=[f"{s}-{f.replace('/', '.')}" for s, files in WIRING.items() for f in files])
def test_each_reader_reads_the_value_set(switch: str, file: str, observed: Callable[[str], set]) -> None:
    driver = WIRING[switch][file]
    reads = observed(driver)
    values = {value for name, where, value in reads if (name, where) == (switch, file)}
    assert values, f"{file} never read perf.{switch} when {driver} built it"
    assert repr(non_default(switch, driver)) in values, f"{file} read perf.{switch} as {values}, not the value set"


REFUSED: dict[str, list[dict[str, Any]]] = {
    "autocast": [{"autocast": "fp8"}],
    "compile": [{"compile": "always"}],
    "critic_chunk_size": [{"critic_chunk_size": 0}],
    "cuda_graphs": [{"cuda_graphs": "sometimes"}, {"cuda_graphs": "on", "compile": "off"}],
    "physics_partitions": [{"physics_partitions": 0}],
}
"""Switch the config's validation reads -> the bad settings (a value, or a combination) it refuses, naming the
switch: where the validation's read of it acts."""

VALIDATED = [switch for switch, files in WIRING.items() if "config/sections.py" in files]


@pytest.mark.parametrize("switch", VALIDATED)
def test_the_validation_refuses_each_bad_value_of_a_switch_it_reads_in_one_line(switch: str) -> None:
    for bad in REFUSED[switch]:
        cfg = small_config("pendulum")
        cfg.perf = dataclasses.replace(PerfConfig(), **bad)
        try:
            cfg.validate()
            message = "accepted"
        except UserError as e:
            message = str(e)
        assert f"perf.{switch}={bad[switch]!r} is invalid" in message and "\n" not in message, (
            f"perf {bad}: {message}")
