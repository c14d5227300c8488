"""Every switch's optimized path has a budget: on each workload the switches' scopes reach (each policy kind, the
env layer, each algorithm), one iteration with every switch optimized makes exactly the host syncs, dispatched ops,
new tensor storages and bytes allocated that `BUDGETS` pins, per phase. An added copy, temporary or recomputation
anywhere on an optimized path changes a pinned count and fails here, although no host read is added; so does
removing work (then lower the budget, and say why in the commit).

The effect tests (test_switch_effects.py) prove what each baseline costs; these pin what the optimized path costs.
Regenerate the table after a deliberate change with `python tests/test_optimized_budgets.py` (it prints `BUDGETS`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from switch_readers import readers, recorded_reads, recording

import conftest
from conftest import TEST_DEVICE, small_config
from syncfree.bench.timing import count_iteration
from syncfree.config import PerfConfig, TrainConfig
from syncfree.tasks import switch_scope
from syncfree.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")


def g1_token() -> TrainConfig:
    from test_g1_switches import g1_config
    return g1_config(token=True)


def off_policy(algorithm: str) -> TrainConfig:
    from test_offpolicy import small
    return small(algorithm, n_step=3)  # n-step returns: the replay buffer's vectorized sums act


def wide() -> TrainConfig:
    """2,048 envs x 2 steps, one minibatch: critic evaluations of more rows than the baseline's chunk."""
    cfg = small_config("pendulum")
    cfg.env.num_envs = 2048
    cfg.ppo = dataclasses.replace(cfg.ppo, steps_per_env=2, num_epochs=1, num_minibatches=1)
    return cfg


def with_rnd() -> TrainConfig:
    from test_rnd import rnd_config
    return rnd_config()


WORKLOADS: dict[str, Callable[[str], TrainConfig]] = {
    "ppo-mlp": lambda teacher: small_config("pendulum"),
    "ppo-mlp-compile-step": lambda teacher: small_config("pendulum", compile="step"),  # its functions, eagerly
    "ppo-mlp-wide": lambda teacher: wide(),
    "ppo-mlp-discrete": lambda teacher: small_config("cartpole"),
    "ppo-mlp-env-layer": lambda teacher: small_config("g1-track"),
    "ppo-token-env-layer": lambda teacher: g1_token(),
    "ppo-rnd": lambda teacher: with_rnd(),
    "recurrent-mlp": lambda teacher: conftest.recurrent_config(),
    "recurrent-token-sets": lambda teacher: conftest.grid_config(),
    "distillation": lambda teacher: conftest.distill_config(teacher),
    "sac": lambda teacher: off_policy("sac"),
    "td3": lambda teacher: off_policy("td3"),
}
"""Workload -> its small config, every switch at its default (optimized; `compile=off` unless named: the counters
see eager code): pendulum (and wide enough to chunk the critic), cartpole, g1-track (the env layer) with the MLP and the token policy, PPO with RND, the
recurrent algorithm with the recurrent MLP and with grid-arena's token-set policy, distillation, SAC, TD3."""

Budget = tuple[int, int, int, int]
"""(host syncs, dispatched ops, new tensor storages, bytes allocated) of one phase over one iteration."""

BUDGETS: dict[str, dict[str, Budget]] = {
    "ppo-mlp": {
        "act": (0, 288, 264, 292256), "store": (0, 80, 0, 0), "env": (0, 400, 296, 37248),
        "normalizer": (0, 208, 176, 1856), "stats": (0, 144, 56, 3072), "advantages": (0, 128, 77, 25636),
        "update.forward": (0, 364, 300, 650080), "update.backward": (0, 584, 336, 661664),
        "update.optimizer": (0, 192, 164, 924), "logging": (1, 111, 70, 17105),
    },
    "ppo-mlp-compile-step": {
        "act": (0, 336, 264, 292256), "env": (0, 400, 296, 37248), "stats": (0, 384, 232, 4928),
        "advantages": (0, 128, 77, 25636), "update.step": (0, 2440, 1788, 1970208),
        "logging": (1, 111, 70, 17105),
    },
    "ppo-mlp-wide": {
        "act": (0, 72, 66, 4669544), "store": (0, 20, 0, 0), "env": (0, 100, 74, 593952),
        "normalizer": (0, 52, 44, 464), "stats": (0, 36, 14, 49152), "advantages": (0, 44, 29, 1245220),
        "update.forward": (0, 91, 75, 5197912), "update.backward": (0, 146, 84, 4990504),
        "update.optimizer": (0, 48, 41, 231), "logging": (1, 111, 70, 17105),
    },
    "ppo-mlp-discrete": {
        "act": (0, 224, 184, 290304), "store": (0, 80, 0, 0), "env": (0, 456, 360, 55296),
        "normalizer": (0, 208, 176, 2432), "stats": (0, 144, 56, 3328), "advantages": (0, 128, 77, 25900),
        "update.forward": (0, 312, 252, 654224), "update.backward": (0, 548, 316, 678560),
        "update.optimizer": (0, 192, 160, 892), "logging": (1, 106, 65, 17775),
    },
    "ppo-mlp-env-layer": {
        "act": (0, 288, 264, 4155232), "store": (0, 80, 0, 0), "env": (0, 13152, 9144, 22868152),
        "normalizer": (0, 208, 176, 469856), "stats": (0, 184, 80, 420352),
        "advantages": (0, 128, 77, 162388), "update.forward": (0, 364, 300, 8849472),
        "update.backward": (0, 584, 336, 2713568), "update.optimizer": (0, 192, 164, 924),
        "logging": (1, 218, 111, 388225),
    },
    "ppo-token-env-layer": {
        "act": (0, 560, 456, 7096960), "store": (0, 80, 0, 0), "env": (0, 13680, 9464, 27066552),
        "normalizer": (0, 448, 352, 680224), "stats": (0, 344, 176, 609536),
        "advantages": (0, 126, 75, 154196), "update.forward": (0, 776, 580, 25916144),
        "update.backward": (0, 1184, 628, 17715608), "update.optimizer": (0, 192, 204, 1260),
        "logging": (1, 271, 161, 693589),
    },
    "ppo-rnd": {
        "act": (0, 288, 264, 311872), "store": (0, 464, 328, 33984), "env": (0, 272, 184, 36096),
        "normalizer": (0, 208, 176, 2432), "stats": (0, 144, 56, 3328), "advantages": (0, 128, 77, 25900),
        "update.forward": (0, 364, 300, 711600), "update.backward": (0, 584, 336, 706256),
        "update.optimizer": (0, 776, 564, 91132), "logging": (1, 120, 72, 17799),
    },
    "recurrent-mlp": {
        "act": (0, 360, 344, 424608), "store": (0, 166, 0, 0), "env": (0, 400, 296, 37248),
        "stats": (0, 184, 64, 3104), "normalizer": (0, 208, 176, 1856), "advantages": (0, 43, 7, 6272),
        "update.forward": (0, 2056, 884, 1662832), "update.backward": (0, 3172, 1884, 2648240),
        "update.optimizer": (0, 192, 196, 1180), "logging": (1, 161, 114, 41793),
    },
    "recurrent-token-sets": {
        "act": (0, 520, 272, 1677696), "store": (0, 176, 0, 0), "env": (0, 72, 0, 0),
        "stats": (0, 184, 64, 96608), "normalizer": (0, 0, 0, 0), "advantages": (0, 27, 7, 1344),
        "update.forward": (0, 992, 504, 3473120), "update.backward": (0, 1396, 768, 2167504),
        "update.optimizer": (0, 108, 116, 780), "logging": (1, 151, 94, 48302),
    },
    "distillation": {
        "act": (0, 312, 280, 294336), "store": (0, 16, 0, 0), "env": (0, 400, 296, 37248),
        "stats": (0, 144, 56, 3072), "update.forward": (0, 46, 26, 141376),
        "update.backward": (0, 86, 32, 143912), "update.optimizer": (0, 72, 47, 298),
        "logging": (1, 70, 40, 8558),
    },
    "sac": {  # n-step discounts: a table made once, one op a batch less than a pow of a new tensor
        "act": (0, 144, 140, 20832), "store": (0, 72, 0, 0), "env": (0, 200, 148, 4704),
        "normalizer": (0, 104, 88, 928), "stats": (0, 72, 28, 384), "update.forward": (0, 904, 640, 606368),
        "update.backward": (0, 776, 408, 421024), "update.optimizer": (0, 88, 12, 112),
        "logging": (1, 31, 2, 28),
    },
    "td3": {
        "act": (0, 56, 44, 17632), "store": (0, 72, 0, 0), "env": (0, 200, 148, 4704),
        "normalizer": (0, 104, 88, 928), "stats": (0, 72, 28, 384), "update.forward": (0, 570, 346, 473072),
        "update.backward": (0, 402, 158, 251992), "update.optimizer": (0, 26, 0, 0),
        "logging": (1, 25, 2, 20),
    },
}
"""Workload -> phase -> its `Budget` over one iteration after two of warm-up (per rollout step: divide by the
steps per env; per minibatch: by the minibatches of the update), on CPU torch 2.13."""

PINNED = TEST_DEVICE == "cpu" and torch.__version__.startswith("2.13")
"""The ops and allocations are pinned for the build they were counted on; elsewhere the syncs alone are checked."""

UNCOUNTED = {
    "cuda_graphs": "acts on a CUDA device only, in compiled code the counters do not see",
    "physics_partitions": "acts on Isaac Lab env configs only (test_isaaclab_settings.py)",
    "host_env_worker": "its work is another process's (test_host_worker.py, test_mettagrid_adapter.py)",
    "autocast": "`auto` keeps these small policies in float32 (under its threshold, and this CPU lacks bfloat16)",
    "validate_distributions": "a check, off in both presets: its optimized value is its baseline",
}
"""Switches no budgeted workload can count here, and why."""

OUTSIDE_THE_LOOP = {
    "config/sections.py": "validates the config",
    "core/switches.py": "the switches' applicability rules",
    "switches.py": "`syncfree switches`",
    "train/run.py": "the run's start line",
    "train/evaluate.py": "evaluation",
    "bench/floor.py": "the bench's compute floor",
    "envs/adapters/isaaclab.py": "Isaac Lab env configs",
    "tasks/gym.py": "Gymnasium tasks' env factory (the worker: `UNCOUNTED`)",
}
"""Files that read switches outside a training iteration: `test_switch_wiring.py` observes them."""

READ_OUTSIDE_THE_LOOP = {("compile", "train/runner.py"): "the start line and the progress display's first iteration"}
"""(switch, file) -> where a file of the loop reads a switch outside the iteration."""


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> str:
    return conftest.pendulum_teacher(tmp_path_factory.mktemp("teacher"))


MEASURED: dict[str, dict[str, Any]] = {}


def measure(workload: str, teacher: str) -> dict[str, Any]:
    """One iteration's counts per phase after two of warm-up, the switches the run read (file, value) and those
    that act in its scope (computed once per workload)."""
    if workload not in MEASURED:
        if workload == "recurrent-token-sets":
            pytest.importorskip("mettagrid")
        cfg = WORKLOADS[workload](teacher)
        cfg.perf = recording(cfg.perf)
        with recorded_reads() as reads:
            runner = Runner(cfg)
            runner.cfg.iterations = 2
            runner.learn()
            counts = count_iteration(runner)
        scope = switch_scope(cfg, TEST_DEVICE, policy=runner.policy)
        acting = {f.name for f in PerfConfig.switches()} - set(cfg.perf.inert_switches(scope))
        phases = {name: (c["syncs"], c["ops"], c["allocations"], c["allocated_bytes"])
                  for name, c in counts["phases"].items()}
        MEASURED[workload] = {"phases": phases, "reads": reads, "acting": acting}
        close = getattr(runner.env, "close", None)
        if close is not None:
            close()
    return MEASURED[workload]


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_the_optimized_path_costs_exactly_its_budget(workload: str, teacher: str) -> None:
    phases = measure(workload, teacher)["phases"]
    budget = BUDGETS[workload]
    assert sorted(phases) == sorted(budget), "the iteration's phases changed"
    if not PINNED:
        assert {p: c[0] for p, c in phases.items()} == {p: b[0] for p, b in budget.items()}
        return
    over = {phase: {"counted": phases[phase], "budget": budget[phase]} for phase in budget
            if phases[phase] != budget[phase]}
    assert not over, f"{workload}: (syncs, ops, allocations, bytes) per phase differ from the budget: {over}"


def test_every_switch_acts_in_a_budgeted_workload_and_every_reader_is_run(teacher: str) -> None:
    """Each switch acts (is not inert) in some workload of `BUDGETS`, and every file that reads it in the training
    loop read it in one of them: a new reader, policy kind or algorithm is budgeted here or named as outside."""
    runs = {workload: measure(workload, teacher) for workload in WORKLOADS
            if workload != "recurrent-token-sets" or _has_mettagrid()}
    for switch, files in sorted(readers().items()):
        if switch not in UNCOUNTED:
            assert any(switch in run["acting"] for run in runs.values()), f"{switch}: acts in no budgeted workload"
        for file in sorted(files - set(OUTSIDE_THE_LOOP) - {f for s, f in READ_OUTSIDE_THE_LOOP if s == switch}):
            seen = [w for w, run in runs.items() if any(read[:2] == (switch, file) for read in run["reads"])]
            assert seen, f"{switch}: {file} reads it but no budgeted workload ran that read"


def _has_mettagrid() -> bool:
    try:
        import mettagrid  # noqa: F401
    except ImportError:
        return False
    return True


def table(teacher: str) -> str:
    lines = ["BUDGETS: dict[str, dict[str, Budget]] = {"]
    for workload in WORKLOADS:
        lines.append(f'    "{workload}": {{')
        line = "       "
        for phase, budget in measure(workload, teacher)["phases"].items():
            entry = f' "{phase}": {budget},'
            if len(line) + len(entry) > 110:
                lines.append(line)
                line = "       "
            line += entry
        lines += [line, "    },"]
    return "\n".join([*lines, "}"])


if __name__ == "__main__":  # print the table as today's code counts it
    import tempfile

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        print(table(conftest.pendulum_teacher(Path(folder))), file=sys.stdout)
