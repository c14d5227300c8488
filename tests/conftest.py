from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._dynamo
from torch.utils._python_dispatch import TorchDispatchMode

from syncfree.algo.configs import RecurrentPPOTrainConfig
from syncfree.algo.settings import PPOConfig
from syncfree.config import PerfConfig, TrainConfig
from syncfree.policy.settings import RecurrentCoreConfig
from syncfree.tasks import default_config

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
torch._dynamo.config.disable = os.environ["TORCH_COMPILE_DISABLE"] == "1"
"""`torch.compile` runs its functions eagerly in this suite and in the processes it starts (compiling costs seconds
per graph on this machine); tests of compiled code turn it on with the `compile_enabled` fixture."""
TEST_DEVICE = os.environ.get("SYNCFREE_TEST_DEVICE", "cpu")
"""Set to `cuda` to run the small-preset tests on a GPU (budgets then also run under sync-debug mode "error")."""


@pytest.fixture
def one_thread():
    """One torch thread, restored afterwards: small batches run several times faster on one thread than on two
    busy ones, and a bench run sets the count for the whole process."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_config(task: str = "cartpole", **perf: bool) -> TrainConfig:
    """The small preset of the equivalence tests: 32 envs x 8 steps, 2 epochs x 2 minibatches, `perf.compile` off
    unless given (the compiled path has tests of its own); the task's config type with its defaults otherwise."""
    cfg = default_config(task, seed=3, device=TEST_DEVICE, iterations=3)
    cfg.env.num_envs = 32
    cfg.env.max_episode_length = 10  # episodes end by time-out as well as by failure
    cfg.policy = dataclasses.replace(cfg.policy, actor_hidden=[32, 32], critic_hidden=[32, 32])
    cfg.ppo = PPOConfig(steps_per_env=8, num_epochs=2, num_minibatches=2)
    cfg.log.progress = False
    cfg.perf = PerfConfig(**{"compile": "off", **perf})
    return cfg


def recurrent_config(task: str = "pendulum", **perf) -> RecurrentPPOTrainConfig:
    """`small_config` with `policy.kind=recurrent` (the recurrent MLP policy, an LSTM of 16, one segment per env's
    rollout), 2 iterations."""
    from syncfree.tasks import with_algorithm

    cfg = with_algorithm(small_config(task, **perf), "recurrent-ppo")
    assert isinstance(cfg, RecurrentPPOTrainConfig) and cfg.ppo.horizon() == cfg.ppo.steps_per_env
    cfg.policy.rnn = RecurrentCoreConfig(hidden=16)
    cfg.iterations = 2
    return cfg


def distill_config(teacher: str, task: str = "pendulum", **perf) -> TrainConfig:
    """`small_config` distilling from the checkpoint `teacher` (`--algorithm distillation`), in chunks of 4 of its 8
    steps."""
    from syncfree.tasks import with_algorithm

    cfg = with_algorithm(small_config(task, **perf), "distillation")
    cfg.distill.teacher, cfg.distill.gradient_length = teacher, 4
    return cfg


def straight_and_resumed(config: Callable[[int], TrainConfig], folder: Path, iterations: int = 3
                         ) -> tuple[Any, Any, dict[str, Any]]:
    """`config(iterations)` trained in one run, and `config(iterations - 1)` trained with its checkpoint in `folder`,
    then a fresh `config(iterations)` resumed from that checkpoint to the end: (the straight runner, the resumed
    runner, the checkpoint)."""
    from syncfree.train import checkpoint
    from syncfree.train.run import Run
    from syncfree.train.runner import Runner

    straight = Runner(config(iterations))
    straight.learn()
    first = Run(config(iterations - 1), folder)
    first.learn()
    first.close()
    saved = checkpoint.load(folder / "latest.pt")
    resumed = Runner(config(iterations))
    resumed.load_state_dict(saved)
    resumed.learn()
    return straight, resumed, saved


def assert_trains_as_shipped(cfg: TrainConfig) -> None:
    """An off-policy preset as a user gets it, no setting changed: it validates, a full buffer lets a batch draw its
    `batch_size`, and its random warm-up (`learning_starts`) ends before its iterations do."""
    from syncfree.algo.replay import drawable_transitions
    from syncfree.tasks.configs import validated

    own, num_envs = validated(cfg).learner, cfg.env.num_envs  # type: ignore[attr-defined]
    assert own.batch_size <= drawable_transitions(own.buffer_size, num_envs, own.n_step), (cfg.task, own)
    assert own.learning_starts < cfg.iterations * own.steps_per_env * num_envs, (cfg.task, own)


def dispatched_op_names(fn: Callable[[], object]) -> Counter[str]:
    """The aten ops `fn` dispatches from Python, by name: every op of eager code; compiled code dispatches only the
    kernels its graphs call out to (matrix products) and the ops around its graphs."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()
    return Counter(event.name for event in profile.events() if event.name.startswith("aten::"))


def ops_outside_graphs(fn: Callable[[], object]) -> int:
    """The aten ops `fn` dispatches outside every compiled graph (a graph's calls out to kernels, e.g. its matrix
    products, are profiled inside its `Torch-Compiled Region`)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()

    def inside(event) -> bool:
        while event is not None:
            if event.name.startswith("Torch-Compiled Region"):
                return True
            event = event.cpu_parent
        return False

    return sum(event.name.startswith("aten::") and not inside(event) for event in profile.events())


def grid_config(iterations: int = 2, **perf) -> TrainConfig:
    """2 simulations x 4 agents, 8 steps in rows of 4 (16 segments), 2 epochs x 2 minibatches, a small policy. The
    simulations step in this process unless `host_env_worker=True` is given (the worker's start costs a second or
    two per runner; it steps the same episodes, `test_mettagrid_adapter.py` pins that)."""
    from syncfree.tasks import preset

    cfg = preset("grid-arena")
    cfg.seed, cfg.device, cfg.iterations = 5, TEST_DEVICE, iterations
    cfg.env.num_envs = 2
    cfg.env.max_steps = 16
    cfg.policy.recurrent = dataclasses.replace(cfg.policy.recurrent, hidden=16, embed_dim=8, encoder_hidden=16)
    cfg.ppo = dataclasses.replace(cfg.ppo, steps_per_env=8, bptt_horizon=4, num_epochs=2, num_minibatches=2)
    cfg.log.progress = False
    cfg.perf = dataclasses.replace(cfg.perf, **{"host_env_worker": False, **perf})
    return cfg



def copy_trained_state(source, target) -> None:
    """Give `target` the trainer state and the stored rollout of `source` (trained one iteration or more), so one
    update can be compared on identical inputs."""
    target.load_state_dict(source.state_dict())
    for name, x in source.algorithm.storage.state_tensors().items():
        getattr(target.algorithm.storage, name).copy_(x)


def update_stats(runner, progress: float = 0.0) -> dict[str, torch.Tensor]:
    """One update of `runner`'s algorithm on its stored rollout, `progress` into the run; its statistics
    (`Algorithm.statistics`) by name, as float64."""
    runner.algorithm.update(progress)
    return {name: value.double() for name, value in runner.algorithm.statistics().items()}


def pendulum_teacher(folder: Path) -> str:
    """A pendulum policy trained for one iteration under `folder` (once: a later call finds it), a teacher for
    distillation."""
    from syncfree.train.run import Run

    checkpoint = folder / "teacher" / "latest.pt"
    if not checkpoint.exists():
        cfg = small_config("pendulum")
        cfg.iterations, cfg.log.progress = 1, False
        runner = Run(cfg, checkpoint.parent)
        runner.learn()
        runner.close()
    return str(checkpoint)


def train_iterations(cfg: TrainConfig) -> tuple:
    """Train `cfg.iterations` one at a time: (trainer, every finished episode, every iteration's record)."""
    from syncfree.train.runner import Runner

    trainer = Runner(cfg)
    episodes, records = [], []
    for it in range(1, cfg.iterations + 1):
        records.append(trainer.learn(until=it))
        episodes += trainer.monitors.episodes.iteration_episodes
    return trainer, episodes, records


def assert_same_state(a: object, b: object, path: str = "state") -> None:
    """Bitwise equality of nested checkpoint-like structures (dicts, lists, tensors, plain values)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for key in a:
            assert_same_state(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


@pytest.fixture
def compile_enabled():
    """`torch.compile` really compiles in this test (dynamo's own `config.patch`: pytest's monkeypatch does not
    restore config-module attributes reliably)."""
    with torch._dynamo.config.patch(disable=False):
        yield


@pytest.fixture(autouse=True)
def _restore_torch_global_state():
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(deterministic)


def refused_training(argv: list[str], capsys: pytest.CaptureFixture[str], log_dir: Path) -> str:
    """`syncfree train` with `argv` (1 iteration of 16 envs x 4 steps) must exit 2 with one line on stderr and leave
    no run folder in `log_dir`; returns the line."""
    from syncfree.cli import main

    code = main(["train", *argv, "--iterations", "1", "--env.num_envs", "16", "--ppo.steps_per_env", "4",
                 "--log.dir", str(log_dir)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert not any(log_dir.iterdir())  # no run folder left behind
    return err


def trained_host_reads(cfg: TrainConfig, iterations: int = 2) -> tuple[Any, tuple[int, int, int]]:
    """A trainer of `cfg` after `iterations` iterations, and the host reads it makes per rollout step, per minibatch
    and per iteration (counted over one more iteration)."""
    from syncfree.bench.timing import count_iteration
    from syncfree.train.runner import Runner

    trainer = Runner(cfg)
    trainer.cfg.iterations = iterations
    trainer.learn()
    counts = count_iteration(trainer)
    return trainer, (counts["syncs_per_step"], counts["syncs_per_minibatch"], counts["syncs_per_iteration"])


def update_on_one_rollout(*trainers: Any) -> None:
    """Each trainer collects one rollout and updates on it, from the same random states (seeds 4, then 5)."""
    for trainer in trainers:
        torch.manual_seed(4)
        trainer.algorithm.begin_rollout()
        with torch.inference_mode():
            for t in range(trainer.cfg.ppo.steps_per_env):
                trainer.rollout_step(t)
            trainer.algorithm.compute_returns(trainer.obs)
        torch.manual_seed(5)
        trainer.algorithm.update()


class StagingCopies(TorchDispatchMode):
    """The copies a host simulator's adapter makes between its host buffers and the device, seen at the dispatcher:
    `uploads` read its packed results buffer, `downloads` write its host action tensor (a staged adapter, whose
    host and device buffers are apart)."""

    def __init__(self, env: Any) -> None:
        super().__init__()
        self.results = env._pack.host_buffer.untyped_storage().data_ptr()
        self.actions = env._act.host.untyped_storage().data_ptr()
        self.uploads = self.downloads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.copy_.default:
            dst, src = args[0], args[1]
            self.uploads += src.untyped_storage().data_ptr() == self.results
            self.downloads += dst.untyped_storage().data_ptr() == self.actions
        return func(*args, **(kwargs or {}))


USER_GYM_MODULE = '''
import gymnasium
import numpy as np
from gymnasium.spaces import Box


class Point(gymnasium.Env):
    """A point moved by a 1-D action in [-2, 2] toward 0.5; 20 steps an episode; no render."""

    def __init__(self, render_mode=None):
        self.action_space = Box(-2.0, 2.0, (1,), np.float32)
        self.observation_space = Box(-np.inf, np.inf, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t = float(self.np_random.uniform(-1, 1)), 0
        return np.array([self.x, 0.5], np.float32), {}

    def step(self, action):
        self.x += 0.1 * float(np.asarray(action).reshape(-1)[0])
        self.t += 1
        return np.array([self.x, 0.5], np.float32), -abs(self.x - 0.5), False, self.t >= 20, {}


gymnasium.register("Tests/Point-v0", entry_point=Point, max_episode_steps=20)
'''


def user_gym_task(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A user's module in `folder` (on the import path, this process's and its children's) that registers a namespaced Gymnasium env without a
    renderer, and the task that names it: `gym:<module>:Tests/Point-v0`."""
    name = f"user_envs_{abs(hash(str(folder))) % 10**8}"
    (folder / f"{name}.py").write_text(USER_GYM_MODULE)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(folder), os.environ.get("PYTHONPATH")))))
    return f"gym:{name}:Tests/Point-v0"  # the host env worker, a process of its own, imports it too
