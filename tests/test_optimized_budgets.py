"""Every switch's optimized path has a budget: on each workload the switches' scopes reach (each policy kind, the
env layer, each algorithm), one iteration with every switch optimized makes exactly the host syncs, dispatched ops,
new tensor storages and bytes allocated that `BUDGETS` pins, per phase and between the phases. An added copy,
temporary or recomputation anywhere on an optimized path changes a pinned count and fails here, although no host
read is added; so does removing work (then lower the budget, and say why in the commit). The env adapters' steps
have budgets of their own (`ADAPTER_BUDGETS`).

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
from syncfree.core.counters import count_syncs
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


def with_symmetry() -> TrainConfig:
    from test_symmetry import symmetric_config
    return symmetric_config()  # point-mass: augmented minibatches and the mirror loss


WORKLOADS: dict[str, Callable[[str], TrainConfig]] = {
    "ppo-mlp": lambda teacher: small_config("pendulum"),
    "ppo-mlp-compile-step": lambda teacher: small_config("pendulum", compile="step"),  # its functions, eagerly
    "ppo-mlp-wide": lambda teacher: wide(),
    "ppo-mlp-discrete": lambda teacher: small_config("cartpole"),
    "ppo-mlp-env-layer": lambda teacher: small_config("g1-track"),
    "ppo-token-env-layer": lambda teacher: g1_token(),
    "ppo-rnd": lambda teacher: with_rnd(),
    "ppo-symmetry": lambda teacher: with_symmetry(),
    "recurrent-mlp": lambda teacher: conftest.recurrent_config(),
    "recurrent-token-sets": lambda teacher: conftest.grid_config(),
    "distillation": lambda teacher: conftest.distill_config(teacher),
    "sac": lambda teacher: off_policy("sac"),
    "td3": lambda teacher: off_policy("td3"),
}
"""Workload -> its small config, every switch at its default (optimized; `compile=off` unless named: the counters
see eager code): pendulum (and wide enough to chunk the critic), cartpole, g1-track (the env layer) with the MLP and
the token policy, PPO with RND and with symmetry (point-mass's mirror), the recurrent algorithm with the recurrent
MLP and with grid-arena's token-set policy, distillation, SAC, TD3."""

Budget = tuple[int, int, int, int]
"""(host syncs, dispatched ops, new tensor storages, bytes allocated) of one phase over one iteration."""

BUDGETS: dict[str, dict[str, Budget]] = {
    "ppo-mlp": {
        "act": (0, 288, 264, 292256), "store": (0, 80, 0, 0), "env": (0, 400, 296, 37248),
        "normalizer": (0, 208, 176, 1856), "stats": (0, 144, 56, 3072), "advantages": (0, 128, 77, 25636),
        "update.forward": (0, 364, 300, 650080), "update.backward": (0, 584, 336, 661664),
        "update.optimizer": (0, 192, 164, 924), "logging": (1, 111, 70, 17105),
        "outside the phases": (0, 51, 34, 30720),
    },
    "ppo-mlp-compile-step": {
        "act": (0, 336, 264, 292256), "env": (0, 400, 296, 37248), "stats": (0, 384, 232, 4928),
        "advantages": (0, 128, 77, 25636), "update.step": (0, 2440, 1788, 1970208),
        "logging": (1, 111, 70, 17105), "outside the phases": (0, 34, 2, 4096),
    },
    "ppo-mlp-wide": {
        "act": (0, 72, 66, 4669544), "store": (0, 20, 0, 0), "env": (0, 100, 74, 593952),
        "normalizer": (0, 52, 44, 464), "stats": (0, 36, 14, 49152), "advantages": (0, 44, 29, 1245220),
        "update.forward": (0, 91, 75, 5197912), "update.backward": (0, 146, 84, 4990504),
        "update.optimizer": (0, 48, 41, 231), "logging": (1, 111, 70, 17105), "outside the phases": (0, 23, 9, 245760),
    },
    "ppo-mlp-discrete": {
        "act": (0, 224, 184, 290304), "store": (0, 80, 0, 0), "env": (0, 456, 360, 55296),
        "normalizer": (0, 208, 176, 2432), "stats": (0, 144, 56, 3328), "advantages": (0, 128, 77, 25900),
        "update.forward": (0, 312, 252, 654224), "update.backward": (0, 548, 316, 678560),
        "update.optimizer": (0, 192, 160, 892), "logging": (1, 106, 65, 17775),
        "outside the phases": (0, 51, 34, 36864),
    },
    "ppo-mlp-env-layer": {
        "act": (0, 288, 264, 4155232), "store": (0, 80, 0, 0), "env": (0, 13152, 9144, 22868152),
        "normalizer": (0, 208, 176, 469856), "stats": (0, 184, 80, 420352),
        "advantages": (0, 128, 77, 162388), "update.forward": (0, 364, 300, 8849472),
        "update.backward": (0, 584, 336, 2713568), "update.optimizer": (0, 192, 164, 924),
        "logging": (1, 218, 111, 388225), "outside the phases": (0, 69, 49, 3531568),
    },
    "ppo-token-env-layer": {
        "act": (0, 560, 456, 7096960), "store": (0, 80, 0, 0), "env": (0, 13680, 9464, 27066552),
        "normalizer": (0, 448, 352, 680224), "stats": (0, 344, 176, 609536),
        "advantages": (0, 126, 75, 154196), "update.forward": (0, 776, 580, 25916144),
        "update.backward": (0, 1184, 628, 17715608), "update.optimizer": (0, 192, 204, 1260),
        "logging": (1, 271, 161, 693589), "outside the phases": (0, 69, 49, 5028656),
    },
    "ppo-rnd": {
        "act": (0, 288, 264, 311872), "store": (0, 464, 328, 33984), "env": (0, 272, 184, 36096),
        "normalizer": (0, 208, 176, 2432), "stats": (0, 144, 56, 3328), "advantages": (0, 128, 77, 25900),
        "update.forward": (0, 364, 300, 711600), "update.backward": (0, 584, 336, 706256),
        "update.optimizer": (0, 776, 564, 91132), "logging": (1, 120, 72, 17799),
        "outside the phases": (0, 75, 48, 41133),
    },
    "ppo-symmetry": {  # each minibatch and its reflection in one forward, the mirror loss on its means
        "act": (0, 288, 264, 311872), "store": (0, 80, 0, 0), "env": (0, 272, 184, 36096),
        "normalizer": (0, 208, 176, 2432), "stats": (0, 144, 56, 3328), "advantages": (0, 128, 77, 25900),
        "update.forward": (0, 472, 380, 1486304), "update.backward": (0, 624, 372, 1431264),
        "update.optimizer": (0, 192, 164, 940), "logging": (1, 114, 70, 17795),
        "outside the phases": (0, 51, 34, 40960),
    },
    "recurrent-mlp": {
        "act": (0, 360, 344, 424608), "store": (0, 166, 0, 0), "env": (0, 400, 296, 37248),
        "stats": (0, 184, 64, 3104), "normalizer": (0, 208, 176, 1856), "advantages": (0, 43, 7, 6272),
        "update.forward": (0, 2056, 884, 1662832), "update.backward": (0, 3172, 1884, 2648240),
        "update.optimizer": (0, 192, 196, 1180), "logging": (1, 161, 114, 41793), "outside the phases": (0, 9, 0, 0),
    },
    "recurrent-token-sets": {
        "act": (0, 520, 272, 1677696), "store": (0, 176, 0, 0), "env": (0, 72, 0, 0),
        "stats": (0, 184, 64, 96608), "normalizer": (0, 0, 0, 0), "advantages": (0, 27, 7, 1344),
        "update.forward": (0, 992, 504, 3473120), "update.backward": (0, 1396, 768, 2167504),
        "update.optimizer": (0, 108, 116, 780), "logging": (1, 151, 94, 48302), "outside the phases": (0, 9, 0, 0),
    },
    "distillation": {
        "act": (0, 312, 280, 294336), "store": (0, 16, 0, 0), "env": (0, 400, 296, 37248),
        "stats": (0, 144, 56, 3072), "update.forward": (0, 46, 26, 141376),
        "update.backward": (0, 86, 32, 143912), "update.optimizer": (0, 72, 47, 298),
        "logging": (1, 70, 40, 8558), "outside the phases": (0, 7, 0, 0),
    },
    "sac": {  # n-step discounts: a table made once, one op a batch less than a pow of a new tensor
        "act": (0, 144, 140, 20832), "store": (0, 72, 0, 0), "env": (0, 200, 148, 4704),
        "normalizer": (0, 104, 88, 928), "stats": (0, 72, 28, 384), "update.forward": (0, 904, 640, 606368),
        "update.backward": (0, 776, 408, 421024), "update.optimizer": (0, 88, 12, 112),
        "logging": (1, 31, 2, 28), "outside the phases": (0, 1, 0, 0),
    },
    "td3": {
        "act": (0, 56, 44, 17632), "store": (0, 72, 0, 0), "env": (0, 200, 148, 4704),
        "normalizer": (0, 104, 88, 928), "stats": (0, 72, 28, 384), "update.forward": (0, 570, 346, 473072),
        "update.backward": (0, 402, 158, 251992), "update.optimizer": (0, 26, 0, 0),
        "logging": (1, 25, 2, 20), "outside the phases": (0, 25, 8, 64),
    },
}
"""Workload -> phase -> its `Budget` over one iteration after two of warm-up (per rollout step: divide by the
steps per env; per minibatch: by the minibatches of the update), on CPU torch 2.13; `OUTSIDE`: what runs between
the phases."""

PINNED = TEST_DEVICE == "cpu" and torch.__version__.startswith("2.13")
"""The ops and allocations are pinned for the build they were counted on; elsewhere the syncs alone are checked."""

UNCOUNTED = {
    "cuda_graphs": "acts on a CUDA device only, in compiled code the counters do not see",
    "physics_partitions": "acts on Isaac Lab env configs only (test_isaaclab_settings.py)",
    "host_env_worker": "its work is another process's (test_host_worker.py, test_mettagrid_adapter.py)",
    "autocast": "the budgets count float32 work (`off`; `auto` lowers calls only on CPUs with bfloat16 instructions)",
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

OUTSIDE = "outside the phases"
"""The iteration's counts less its phases': what runs between them (an update's loop, the runner's), budgeted as one
more phase so that work added there is seen as well."""


def measure(workload: str, teacher: str) -> dict[str, Any]:
    """One iteration's counts per phase after two of warm-up, the switches the run read (file, value) and those
    that act in its scope (computed once per workload)."""
    if workload not in MEASURED:
        if workload == "recurrent-token-sets":
            pytest.importorskip("mettagrid")
        cfg = WORKLOADS[workload](teacher)
        # float32, as `auto` resolves on the CPU the budgets were counted on: on one with bfloat16 instructions it
        # would lower the wide workload's large calls and add their casts
        cfg.perf.autocast = "off"
        cfg.perf = recording(cfg.perf)
        with recorded_reads() as reads:
            runner = Runner(cfg)
            runner.cfg.iterations = 2
            runner.learn()
            with count_syncs() as whole:
                counts = count_iteration(runner)
        scope = switch_scope(cfg, TEST_DEVICE, policy=runner.policy)
        acting = {f.name for f in PerfConfig.switches()} - set(cfg.perf.inert_switches(scope))
        phases = {name: (c["syncs"], c["ops"], c["allocations"], c["allocated_bytes"])
                  for name, c in counts["phases"].items()}
        in_phases = [sum(counted[i] for counted in phases.values()) for i in range(4)]
        phases[OUTSIDE] = (whole.syncs - in_phases[0], whole.num_ops - in_phases[1],
                           whole.allocations - in_phases[2], whole.allocated_bytes - in_phases[3])
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


ADAPTER_BUDGETS: dict[str, Budget] = {
    "gymnasium-pendulum": (0, 10, 0, 0),  # the buffers are the tensors the trainer reads: nothing copied
    "gymnasium-pendulum-staged": (0, 12, 0, 0),  # the CUDA path's buffers: one copy down, one up
    "gymnasium-cartpole-staged": (0, 10, 0, 0),  # discrete actions: one add into the staged actions
    "rsl_rl-env": (0, 15, 1, 4),  # the groups passed on; one mean of the env's per-env logged value
    "rsl_rl-vec-env": (0, 3, 3, 100),  # each group copied once (rsl_rl keeps them past the step), the dones
}
"""Adapter -> its `Budget` per env step, the wrapped env's own work excluded, the same at every step after the first
(through time-outs and terminations): a Gymnasium vector env (the host simulator's results in one copy up, its
actions in one copy down when staged), an env written for rsl_rl behind syncfree's protocol, and a syncfree env
behind rsl_rl's `VecEnv`."""


class Replayed:
    """An env whose `step` returns the results the wrapped env's step gave for the same actions, computed before the
    count starts: an adapter's step counted without its env's."""

    def __init__(self, env: Any) -> None:
        self.env, self.result = env, None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, actions: torch.Tensor) -> Any:
        return self.result


def _gymnasium(env_id: str, staged: bool) -> tuple[Any, Callable[[], None], Callable[[], None]]:
    pytest.importorskip("gymnasium")
    from syncfree.envs.adapters.gymnasium import make_gymnasium

    env = make_gymnasium(env_id, 4, seed=3, staged=staged)
    gen = torch.Generator().manual_seed(0)
    continuous = env.action_spec.kind == "continuous"
    actions = [torch.randn(4, env.action_spec.size, generator=gen) if continuous
               else torch.randint(env.action_spec.size, (4,), generator=gen) for _ in range(ADAPTER_STEPS)]
    env.reset()
    return env, lambda: None, lambda: env.step(actions.pop())


def _rsl_rl_env() -> tuple[Any, Callable[[], None], Callable[[], None]]:
    pytest.importorskip("rsl_rl")
    from test_from_rsl_rl_adapter import PointMass

    from syncfree.envs.adapters.from_rsl_rl import RslRlVecEnv

    inner = Replayed(PointMass(8))
    env = RslRlVecEnv(inner)
    env.reset()
    actions = torch.zeros(8, 2)
    return env, lambda: setattr(inner, "result", inner.env.step(actions)), lambda: env.step(actions)


def _rsl_rl_vec_env() -> tuple[Any, Callable[[], None], Callable[[], None]]:
    pytest.importorskip("rsl_rl")
    from syncfree.envs.adapters.rsl_rl import SyncfreeToRslRl
    from syncfree.tasks import make_env

    inner = Replayed(make_env("pendulum", 4, seed=0, max_episode_length=5))
    env = SyncfreeToRslRl(inner)
    actions = torch.zeros(4, 1)
    return env, lambda: setattr(inner, "result", inner.env.step(actions)), lambda: env.step(actions)


ADAPTERS: dict[str, Callable[[], tuple[Any, Callable[[], None], Callable[[], None]]]] = {
    "gymnasium-pendulum": lambda: _gymnasium("Pendulum-v1", staged=False),
    "gymnasium-pendulum-staged": lambda: _gymnasium("Pendulum-v1", staged=True),
    "gymnasium-cartpole-staged": lambda: _gymnasium("CartPole-v1", staged=True),
    "rsl_rl-env": _rsl_rl_env,
    "rsl_rl-vec-env": _rsl_rl_vec_env,
}
"""Adapter -> (the adapter, what runs before each counted step: the wrapped env's step, the counted step)."""

ADAPTER_STEPS = 210
"""Steps counted: past Pendulum's 200-step time limit, CartPole's terminations and the other envs' time-outs."""


def adapter_counts(adapter: str) -> list[Budget]:
    """The `Budget` of each of `ADAPTER_STEPS` steps of an adapter, after one."""
    env, before, step = ADAPTERS[adapter]()
    before()
    step()
    counted = []
    for _ in range(ADAPTER_STEPS - 1):
        before()
        with count_syncs() as c:
            step()
        counted.append((c.syncs, c.num_ops, c.allocations, c.allocated_bytes))
    close = getattr(env, "close", None)
    if close is not None:
        close()
    return counted


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_an_adapter_step_costs_exactly_its_budget(adapter: str) -> None:
    counted = set(adapter_counts(adapter))
    budget = ADAPTER_BUDGETS[adapter]
    if not PINNED:
        assert {c[0] for c in counted} == {budget[0]}
        return
    assert counted == {budget}, f"{adapter}: (syncs, ops, allocations, bytes) per step differ from the budget"


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
