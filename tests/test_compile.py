"""`perf.compile`: the compiled hot loop against the eager one, steady state without recompiles, and bad settings.

Compiled kernels round differently from eager ones (fused elementwise code), so compiled and eager are compared
within a stated tolerance on identical inputs, with inductor drawing random numbers exactly as eager does
(`fallback_random`); the CartPole learning test (tests/test_learning.py) trains with the default, compiled, config.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch._inductor.config as inductor_config

from conftest import (
    TEST_DEVICE,
    copy_trained_state,
    dispatched_op_names,
    distill_config,
    grid_config,
    ops_outside_graphs,
    pendulum_teacher,
    recurrent_config,
    small_config,
    update_stats,
)
from syncfree.algo.settings import RNDConfig
from syncfree.algo.storage import Batch
from syncfree.cli import main
from syncfree.config import PerfConfig
from syncfree.core.compile import compile_counts, hot
from syncfree.errors import UserError
from syncfree.tasks import make_env
from syncfree.train.runner import Runner

pytestmark = pytest.mark.usefixtures("compile_enabled")

TOLERANCE = dict(rtol=1e-5, atol=1e-5)
"""Compiled vs eager, float32: a few ulps per fused kernel, grown through two small MLPs and one Adam step."""


@pytest.fixture
def same_random_numbers():
    with inductor_config.patch(fallback_random=True):
        yield


def pair(task: str = "pendulum", max_episode_length: int = 10, compiled: str = "hot", **ppo) -> tuple[Runner, Runner]:
    """An eager and a compiled trainer built from the same seed: equal parameters, env states and RNG states;
    `ppo`: PPO settings of both."""
    trainers = []
    for mode in ("off", compiled):
        cfg = small_config(task, compile=mode)
        cfg.env.max_episode_length = max_episode_length
        cfg.ppo = dataclasses.replace(cfg.ppo, **ppo)
        trainers.append(Runner(cfg))
    return trainers[0], trainers[1]


def assert_close_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], **TOLERANCE, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.usefixtures("same_random_numbers")
def test_compiled_rollout_matches_eager() -> None:
    """Act, storage writes, normalizers and bookkeeping of 8 steps: the same tensors within the tolerance."""
    eager, compiled = pair(max_episode_length=5)
    for trainer in (eager, compiled):
        torch.manual_seed(1)
        with torch.inference_mode():
            for t in range(trainer.cfg.ppo.steps_per_env):
                trainer.rollout_step(t)
    assert_close_tensors(eager.algorithm.storage.state_tensors(), compiled.algorithm.storage.state_tensors())
    assert_close_tensors(dict(eager.policy.named_buffers()), dict(compiled.policy.named_buffers()))
    torch.testing.assert_close(eager.monitors.episodes.device_payload(), compiled.monitors.episodes.device_payload(), **TOLERANCE)
    assert torch.equal(eager.monitors.nonfinite.device_payload(), compiled.monitors.nonfinite.device_payload())
    assert eager.algorithm.storage.time_outs.sum() > 0  # time-outs (5 steps) happened inside the compared 8 steps


@pytest.mark.parametrize("task", ["cartpole", "pendulum", "point-mass"])
def test_compiled_env_step_matches_eager(task: str) -> None:
    """The built-in tasks' step compiles whole (its random draws stay on the env's generator, outside)."""
    eager, compiled = (make_env(task, 64, TEST_DEVICE, seed=5, max_episode_length=7) for _ in range(2))
    compiled.compile_step(lambda fn, *static: hot(fn, PerfConfig(compile="step"), torch.device(TEST_DEVICE), static))
    actions = torch.Generator().manual_seed(6)
    for _ in range(20):
        if eager.action_spec.kind == "discrete":
            a = torch.randint(0, eager.action_spec.size, (64,), generator=actions)
        else:
            a = 3 * torch.randn(64, eager.action_spec.size, generator=actions)
        a = a.to(TEST_DEVICE)
        x, y = eager.step(a), compiled.step(a.clone())
        assert torch.equal(x.terminated, y.terminated) and torch.equal(x.truncated, y.truncated)
        torch.testing.assert_close(x.reward, y.reward, **TOLERANCE)
        assert_close_tensors(x.obs, y.obs)
        assert_close_tensors(x.info, y.info)
    assert torch.equal(eager.generator.get_state(), compiled.generator.get_state())


@pytest.mark.usefixtures("same_random_numbers")
@pytest.mark.parametrize(("mode", "adapt_every"), [("hot", "minibatch"), ("step", "minibatch"), ("step", "update")])
def test_one_compiled_update_on_an_identical_rollout_matches_eager(mode: str, adapt_every: str) -> None:
    """`hot`: compiled forward and losses; `step`: the whole minibatch (gradients, clip, AdamW) as one graph; with
    the schedule adapting per minibatch (inside the graph) or once per update (after it, on the summed KLs)."""
    # the KL is above twice this target: every adaptation divides the lr by 1.5
    eager, compiled = pair(compiled=mode, desired_kl=1e-9, kl_adapt_every=adapt_every)
    eager.cfg.iterations = 1
    eager.learn()  # fills the storage
    if mode == "hot":
        size = compiled.algorithm.storage.returns.numel() // compiled.cfg.ppo.num_minibatches
        compiled.algorithm.losses(Batch(*(x[:size] for x in compiled.algorithm.storage.flat())))  # compiling may draw random numbers
    else:
        copy_trained_state(eager, compiled)
        compiled.algorithm.update()  # compiles (and steps: the state is copied again below)
        assert compiled.algorithm.whole_step is not None
    copy_trained_state(eager, compiled)
    lr_before = float(compiled.algorithm.optim.lr)
    before = {n: p.detach().clone() for n, p in eager.policy.named_parameters()}
    stats = []
    for trainer in (eager, compiled):
        torch.manual_seed(2)  # the same minibatch order
        stats.append(update_stats(trainer))
    # the means of the minibatch losses: the surrogate is a small difference of large terms (~1e-4 of them)
    torch.testing.assert_close(stats[0], stats[1], rtol=1e-3, atol=1e-6)
    # the learning rate moved inside the compiled code and the move was kept
    adaptations = 4 if adapt_every == "minibatch" else 1
    assert float(stats[1]["learning_rate"]) == pytest.approx(max(1e-5, lr_before / 1.5**adaptations), rel=1e-6)
    assert_close_tensors(dict(eager.policy.named_parameters()), dict(compiled.policy.named_parameters()))
    for (_, a), (_, b) in zip(eager.algorithm.optim.optimizer.state_dict()["state"].items(),
                              compiled.algorithm.optim.optimizer.state_dict()["state"].items(), strict=True):
        assert_close_tensors(a, b)
    assert all(not torch.equal(p, before[n]) for n, p in compiled.policy.named_parameters())  # it did update


def dispatched_ops(fn: Callable[[], object]) -> int:
    return sum(dispatched_op_names(fn).values())


def phase_ops(runner: Runner) -> tuple[int, int]:
    """The ops of a rollout (with its returns) and of an update, as `Runner.iterate` runs them."""
    algorithm = runner.algorithm

    def rollout() -> None:
        algorithm.begin_rollout()
        with torch.inference_mode():
            for t in range(algorithm.steps_per_env):
                runner.rollout_step(t)
            algorithm.compute_returns(runner.obs)

    return dispatched_ops(rollout), dispatched_ops(lambda: algorithm.update(progress=0.5))


def env_step(runner: Runner) -> None:
    with torch.inference_mode():
        runner.env.step(torch.zeros_like(runner.algorithm.storage.actions[0]))


def predictor_step(runner: Runner) -> None:
    rnd = runner.algorithm.rnd
    rnd.begin_update()
    obs = runner.algorithm.storage.flat().critic_obs
    rnd.update(obs, torch.arange(obs.shape[0] // runner.cfg.ppo.num_minibatches))  # the compiled minibatch's size


COMPILED_PARTS = {"feed-forward": env_step, "feed-forward with RND": predictor_step}
"""Parts with graphs of their own: a built-in torch task's env step, RND's predictor step."""


COMPILED_CASES = {
    "feed-forward": lambda mode, tmp: small_config("cartpole", compile=mode),
    "feed-forward with RND": lambda mode, tmp: dataclasses.replace(small_config("point-mass", compile=mode),
                                                                   rnd=RNDConfig(enabled=True, weight=0.5)),
    "recurrent": lambda mode, tmp: grid_config(1, compile=mode),
    "distillation": lambda mode, tmp: distill_config(pendulum_teacher(tmp), compile=mode),
}
"""Each algorithm `perf.compile` compiles (one task each), built for a mode."""


@pytest.mark.usefixtures("same_random_numbers")  # graphs it leaves behind draw as the equivalence tests expect
@pytest.mark.parametrize("case,mode", [("feed-forward", "hot"), ("feed-forward", "step"),
                                       ("feed-forward with RND", "step"), ("recurrent", "hot"),
                                       ("distillation", "hot")])
def test_compiled_phases_dispatch_a_fraction_of_eager_ops_and_compile_once(case: str, mode: str,
                                                                           tmp_path: Path) -> None:
    """What compiling saves, counted: after the first iteration a compiled rollout and a compiled update each
    dispatch at most 3/4 of the ops the eager ones do (the rest runs inside graphs), and nothing compiles again;
    `step` (the default) makes the feed-forward update one graph, fewer ops again than `hot`. A second trainer of
    the same shapes reuses the graphs."""
    if case == "recurrent":
        pytest.importorskip("mettagrid")
    make = COMPILED_CASES[case]
    trainers = {}
    for compiled in ("off", mode):
        trainers[compiled] = Runner(make(compiled, tmp_path))
        trainers[compiled].cfg.iterations = 1
        trainers[compiled].learn()
    warm = compile_counts()
    eager_rollout, eager_update = phase_ops(trainers["off"])
    rollout, update = phase_ops(trainers[mode])
    assert rollout <= 0.75 * eager_rollout, (rollout, eager_rollout)
    assert update <= 0.75 * eager_update, (update, eager_update)
    if case in COMPILED_PARTS:  # a part with a graph of its own, small beside the rest of its phase
        part = [dispatched_ops(lambda r=r: COMPILED_PARTS[case](r)) for r in (trainers["off"], trainers[mode])]
        assert part[1] <= 0.75 * part[0], part
    trainers[mode].cfg.iterations = 3
    trainers[mode].learn()
    assert compile_counts() == warm
    assert warm["unique_graphs"] >= 2  # a rollout graph and an update graph at least
    if case == "feed-forward":
        other = Runner(make(mode, tmp_path))
        other.cfg.iterations = 1
        other.learn()
        assert compile_counts() == warm
        if mode == "step":
            hot = Runner(make("hot", tmp_path))
            hot.cfg.iterations = 1
            hot.learn()
            assert update <= 0.5 * phase_ops(hot)[1]
            # the gradients' norms are the graph's own kernels, not a call out to the eager foreach kernel
            update_ops = dispatched_op_names(lambda: trainers[mode].algorithm.update(progress=0.5))
            assert update_ops["aten::_foreach_norm"] == 0, update_ops


@pytest.mark.parametrize("mode", ["hot", "step"])
def test_compiled_record_step_computes_the_bootstrap_values_inside_its_graph(mode: str) -> None:
    """The values time-outs bootstrap from (the critic on the episodes' last observations) are part of the record
    step's graph: a compiled record dispatches no op outside it, where the eager one runs the critic and the rest
    op by op."""
    runners = {compiled: Runner(small_config("gym:CartPole-v1", compile=compiled, host_env_worker=False))
               for compiled in ("off", mode)}
    outside = {}
    for compiled, runner in runners.items():
        runner.cfg.iterations = 1
        runner.learn()
        algorithm = runner.algorithm
        with torch.inference_mode():
            step = runner.env.step(algorithm.act(runner.obs, 0))
            assert "final_obs" in step.info  # the Gymnasium adapter's final observations, which the bootstrap reads
            outside[compiled] = ops_outside_graphs(lambda a=algorithm, s=step: a.record(0, s))
    assert outside[mode] == 0 and outside["off"] > 20, outside


@pytest.mark.usefixtures("same_random_numbers")
def test_compiled_bootstrap_values_match_eager() -> None:
    """Time-outs with a final observation (the Gymnasium adapter's): the compiled record step, which computes the
    critic's values of the final observations inside its graph, stores the reward plus gamma times those values, as
    the eager record step does, within the tolerance; both from the values before the step's normalizer update."""
    stored = []
    for mode in ("off", "hot"):
        runner = Runner(small_config("gym:CartPole-v1", compile=mode, host_env_worker=False))
        algorithm = runner.algorithm
        torch.manual_seed(1)
        with torch.inference_mode():
            step = runner.env.step(algorithm.act(runner.obs, 0))
            final_obs = {"critic": step.info["final_obs"]["critic"] + 0.5}  # not the step's own observation
            step = step._replace(truncated=torch.ones_like(step.truncated), terminated=torch.zeros_like(step.terminated),
                                 info={**step.info, "final_obs": final_obs})
            expected = step.reward + runner.cfg.ppo.gamma * runner.policy.value(final_obs["critic"])
            algorithm.record(0, step)
        reward = algorithm.storage.rewards[0].clone()
        torch.testing.assert_close(reward, expected, **TOLERANCE)
        stored.append(reward)
    torch.testing.assert_close(stored[0], stored[1], **TOLERANCE)


def test_graphs_do_not_assert_their_inputs_again_at_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph of `hot` runs its kernels without re-asserting each input's sizes and strides (dynamo's guards have
    matched them): torch.compile's default graph asserts every input at every call."""
    import torch._C._dynamo.guards as guards

    asserted = Counter[str]()
    original = guards.assert_size_stride

    def counted(*args):
        asserted["inputs"] += 1
        return original(*args)

    monkeypatch.setattr(guards, "assert_size_stride", counted)  # read when a graph's module loads
    inputs = [torch.randn(5, 3, device=TEST_DEVICE) for _ in range(4)]

    def fused(a, b, c, d):  # a function no other test compiles, so its graph's module loads under the patch
        return (a * b + c).tanh() - d * 0.731

    calls = {}
    for name, graph in (("hot", hot(fused, PerfConfig(compile="hot"), torch.device(TEST_DEVICE))),
                        ("default", torch.compile(fused, fullgraph=True, dynamic=False))):
        graph(*inputs)  # compiles
        asserted.clear()
        for _ in range(3):
            torch.testing.assert_close(graph(*inputs), fused(*inputs))
        calls[name] = asserted["inputs"]
    assert calls == {"hot": 0, "default": 3 * len(inputs)}, calls


@pytest.mark.usefixtures("same_random_numbers")
def test_compiled_recurrent_iteration_matches_eager() -> None:
    """grid-arena's recurrent algorithm: the compiled rollout step (encoder, LSTM, heads, sampling) and minibatch
    losses against eager ones, over one iteration from the same seed: the same actions, and stored values,
    statistics and updated parameters within the tolerance."""
    pytest.importorskip("mettagrid")
    runners = [Runner(grid_config(1, compile=mode)) for mode in ("off", "hot")]
    for runner in runners:
        torch.manual_seed(1)
        runner.learn()
    eager, compiled = (r.algorithm for r in runners)
    assert torch.equal(eager.buffer.data["actions"], compiled.buffer.data["actions"])
    for name in ("log_prob", "values"):
        torch.testing.assert_close(eager.buffer.data[name], compiled.buffer.data[name], **TOLERANCE)
    # the means of the minibatch losses: the surrogate is a small difference of large terms
    assert_close_tensors(*({k: v.double() for k, v in a.statistics().items()} for a in (eager, compiled)))
    assert_close_tensors(dict(runners[0].policy.named_parameters()), dict(runners[1].policy.named_parameters()))


def test_recurrent_steady_state_is_two_graphs_without_recompiles() -> None:
    """The recurrent algorithm compiles its rollout step and its minibatch losses (two graphs, cut `hot` and there
    are none), then nothing more: no recompile over later iterations."""
    pytest.importorskip("mettagrid")
    torch._dynamo.reset()  # graphs an earlier test compiled for the same code would be reused
    runner = Runner(grid_config(1, compile="hot"))
    before = compile_counts()
    runner.learn()
    warm = compile_counts()
    assert warm["unique_graphs"] - before["unique_graphs"] == 2
    runner.cfg.iterations = 3
    runner.learn()
    assert compile_counts() == warm


@pytest.mark.usefixtures("same_random_numbers")
def test_compiled_recurrent_mlp_iteration_matches_eager_and_does_not_recompile() -> None:
    """`policy.kind=recurrent` on pendulum: the compiled rollout step (both recurrent cores, MLPs, Gaussian sampling)
    and minibatch losses (8 steps replayed) against eager ones over one iteration from the same seed, within the
    tolerance; then a second compiled iteration compiles nothing new."""
    runners = [Runner(recurrent_config(compile=mode)) for mode in ("off", "hot")]
    for runner in runners:
        runner.cfg.iterations = 1
        torch.manual_seed(1)
        runner.learn()
    eager, compiled = (r.algorithm for r in runners)
    for name in ("actions", "log_prob", "values"):
        torch.testing.assert_close(eager.buffer.data[name], compiled.buffer.data[name], **TOLERANCE)
    assert_close_tensors(*({k: v.double() for k, v in a.statistics().items()} for a in (eager, compiled)))
    assert_close_tensors(dict(runners[0].policy.named_parameters()), dict(runners[1].policy.named_parameters()))
    warm = compile_counts()
    runners[1].cfg.iterations = 2
    runners[1].learn()
    assert compile_counts() == warm


def test_a_host_read_inside_a_compiled_function_fails_loudly() -> None:
    """`fullgraph=True` is what checks compiled code for host reads: a `.item()` in the act step is an error,
    not a silent graph break."""
    trainer = Runner(small_config("cartpole", compile="hot"))
    act = trainer.policy.act

    def act_with_a_host_read(actor_obs, critic_obs):
        out = act(actor_obs, critic_obs)
        if out.value.sum().item() > 1e30:
            raise AssertionError("unreachable")
        return out

    trainer.policy.act = act_with_a_host_read
    trainer.cfg.iterations = 1
    with pytest.raises(Exception, match=r"(?i)graph break|data-dependent|item|Unsupported"):
        trainer.learn()


def test_compiled_kernels_are_kept_outside_the_temporary_folder(tmp_path, monkeypatch) -> None:
    """`hot` points torch's compile caches at `~/.cache/syncfree/torchinductor` (XDG_CACHE_HOME respected), where
    the next run of the same config finds them; a `TORCHINDUCTOR_CACHE_DIR` the user set is kept."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # as torch sets it when it first looks
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ours = tmp_path / "cache" / "syncfree" / "torchinductor"
    double = hot(lambda x: torch.sin(x) * 2.0, PerfConfig(compile="hot"), torch.device("cpu"))
    assert cache_dir() == str(ours)
    double(torch.arange(4.0))
    assert any(path.is_file() for path in ours.rglob("*"))  # compiled code written there
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    hot(lambda x: x + 1, PerfConfig(compile="hot"), torch.device("cpu"))
    assert cache_dir() == str(tmp_path / "mine")


def test_compile_with_validated_distributions_is_refused() -> None:
    with pytest.raises(UserError, match=r"perf\.validate_distributions"):
        Runner(small_config("cartpole", compile="hot", validate_distributions=True))


@pytest.mark.skipif(TEST_DEVICE == "cuda", reason="the CPU refusal")
def test_cuda_graphs_on_a_cpu_is_refused_in_one_line(capsys) -> None:
    assert main(["train", "--task", "cartpole", "--device", "cpu", "--perf.compile", "hot", "--perf.cuda_graphs", "on",
                 "--iterations", "1", "--log.progress", "false"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "perf.cuda_graphs=on needs a CUDA device" in err[0]
    assert main(["train", "--task", "cartpole", "--perf.compile", "off", "--perf.cuda_graphs", "on",
                 "--iterations", "1"]) == 2
    assert "perf.cuda_graphs" in capsys.readouterr().err


@pytest.mark.skipif(TEST_DEVICE != "cuda", reason="CUDA graphs need a GPU")
def test_cuda_graph_replays_draw_new_noise(compile_enabled) -> None:
    """The rollout step is replayed as a CUDA graph (inductor skipped none of the trainer's graphs: a graph that
    mutates an input whose address is not static is run without one), and each replay draws new noise."""
    from torch._dynamo.utils import counters

    skipped = counters["inductor"]["cudagraph_skips"]
    trainer = Runner(small_config("pendulum", compile="hot", cuda_graphs="on"))
    trainer.cfg.iterations = 2
    trainer.learn()  # warm-up and capture
    assert counters["inductor"]["cudagraph_skips"] == skipped
    row = trainer.algorithm.storage.rows[0]
    with torch.inference_mode():
        first = trainer.algorithm._act_step(trainer.obs, row).clone()
        second = trainer.algorithm._act_step(trainer.obs, row).clone()
    assert not torch.equal(first, second)


@pytest.mark.skipif(TEST_DEVICE != "cuda", reason="CUDA graphs need a GPU")
def test_the_recurrent_rollout_replays_as_cuda_graphs_with_its_state_in_place(compile_enabled) -> None:
    """The recurrent trainer's graphs replay (inductor skips none), and the agents' states stay the tensors the
    step reads in place, each step's new state copied in (a state carried as the graph's output would be overwritten
    by its next replay: CUDA graph trees raise on reading it)."""
    from torch._dynamo.utils import counters

    skipped = counters["inductor"]["cudagraph_skips"]
    trainer = Runner(recurrent_config("pendulum", compile="hot", cuda_graphs="on"))
    state = trainer.algorithm.state
    assert trainer.algorithm.state_in_place
    trainer.cfg.iterations = 2
    trainer.learn()
    assert counters["inductor"]["cudagraph_skips"] == skipped
    assert trainer.algorithm.state is state and all(bool(s.abs().sum() > 0) for s in state)
    assert all(torch.isfinite(p).all() for p in trainer.policy.parameters())


def test_many_sizes_in_one_process_do_not_hit_the_recompile_limit() -> None:
    """A bench holds trainers of many sizes: a compiled function keeps a graph per shape beyond dynamo's default 8."""

    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + 1.0

    fn = hot(scale, PerfConfig(compile="step"), torch.device(TEST_DEVICE))
    for n in range(1, 13):
        x = torch.ones(n, device=TEST_DEVICE)
        assert torch.equal(fn(x), torch.full((n,), 3.0, device=TEST_DEVICE))


@pytest.mark.usefixtures("same_random_numbers")
def test_compiled_rnd_iteration_matches_eager_and_does_not_recompile() -> None:
    """Random network distillation under `compile=step`: the intrinsic reward inside the compiled record step, the
    predictor's whole step as its own graph; one iteration against the eager one within the tolerance, then a second
    compiled iteration (the schedule's weight moving with the step count, a device tensor) compiles nothing new."""
    runners = []
    for mode in ("off", "step"):
        cfg = small_config("point-mass", compile=mode)
        cfg.rnd = RNDConfig(enabled=True, weight=0.5, state_normalization=True, reward_normalization=True,
                            weight_schedule="linear", initial_step=2, final_step=30, final_value=0.1)
        cfg.iterations = 1
        runners.append(Runner(cfg))
    for runner in runners:
        torch.manual_seed(1)
        runner.learn()
    eager, compiled = (r.algorithm for r in runners)
    assert compiled.whole_step is not None
    torch.testing.assert_close(eager.storage.rewards, compiled.storage.rewards, **TOLERANCE)
    assert_close_tensors(*({k: v.double() for k, v in a.statistics().items()} for a in (eager, compiled)))
    assert_close_tensors(*(dict(a.rnd.module.state_dict()) for a in (eager, compiled)))  # type: ignore[union-attr]
    assert_close_tensors(dict(runners[0].policy.named_parameters()), dict(runners[1].policy.named_parameters()))
    warm = compile_counts()
    runners[1].cfg.iterations = 2
    runners[1].learn()
    assert compile_counts() == warm
