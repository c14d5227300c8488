"""Every hot graph would be replayed as a CUDA graph: inductor's own reasons to run a graph without one, found on
the CPU.

With `perf.cuda_graphs` on, inductor runs a compiled graph without its CUDA graph (and logs `skipping cudagraphs
due to ...`) when the graph mutates an input whose address is not static (CUDA graph trees check this at the first
replay, with the static inputs that are not 16-byte aligned counted as not static), rebinds an input's storage,
holds an op a CUDA graph cannot capture or a size known only on the device, or takes a non-tensor input; and a graph
that reads its own previous call's output (a recurrent state carried from step to step) reads memory that CUDA graph
trees overwrite at the next replay, or free for other graphs' outputs in between. Here the
trainers compile their graphs as a run with CUDA graphs does (the switch is asked about a CUDA device, so everything
such a run marks static is marked; inductor compiles for the CPU), and inductor's checks
(`torch._inductor.cudagraph_utils`) run on each compiled graph: its post-grad graph, mutated inputs, static input
indices and, at its first call, its real inputs. Left out: inductor's check for nodes on the CPU, which every node
is here (the GPU check covers it)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config
from torch._inductor import cudagraph_utils
from torch._inductor.compile_fx import compile_fx, compile_fx_inner
from torch._inductor.utils import get_first_incompatible_cudagraph_node, remove_unaligned_input_idxs

import syncfree.core.compile as compile_module
from conftest import recurrent_config, small_config
from syncfree.config import TrainConfig
from syncfree.core.compile import compile_counts
from syncfree.train.runner import Runner

pytestmark = pytest.mark.usefixtures("compile_enabled")

Skips = dict[str, list[str]]
"""Graph (the compiled function's name; `(backward)` for its backward graph) -> inductor's reasons to skip it."""


def skip_reasons(gm: torch.fx.GraphModule, compiled: Any, static_input_idxs: list[int], inputs: list[Any]) -> list[str]:
    """What inductor decides for one compiled graph (`CompiledFxGraph.__init__`, `cudagraph_trees.check_for_mutation`),
    with the graph's real `inputs` at its first call."""
    static = list(remove_unaligned_input_idxs(inputs, static_input_idxs))  # as CUDA graph trees record it
    reasons = [compiled.disabled_cudagraphs_reason,
               cudagraph_utils.check_for_mutation_ignore_cuda_graph_managed_tensor(
                   gm, compiled.mutated_inputs, compiled.mutated_input_idxs, static),
               cudagraph_utils.get_input_storage_mutation_reason(cudagraph_utils.get_input_storage_mutation_info(gm))]
    node = get_first_incompatible_cudagraph_node(gm)
    if node is not None:
        reasons.append(f"skipping cudagraphs due to incompatible op {node.target}")
    if not all(isinstance(x, (torch.Tensor, torch.SymInt, torch.Generator)) for x in inputs):
        reasons.append("skipping cudagraphs due to non-Tensor inputs")
    return [r for r in reasons if r]


def copied_in(static_input_idxs: list[int], inputs: list[Any]) -> list[str]:
    """The shapes of the tensor inputs that are not static: CUDA graph trees copy each into the graph's own memory at
    every replay (a backward graph's inputs saved by its forward graph are that graph's outputs, not copied)."""
    static = set(remove_unaligned_input_idxs(inputs, static_input_idxs))
    return [str(tuple(x.shape)) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and i not in static]


COPIED: dict[str, list[str]] = {}
"""Graph -> what `copied_in` finds at its first call, for the graphs compiled by `compiled_as_with_cuda_graphs`."""


def fed_back(inputs: list[Any], previous: list[weakref.ref[torch.Tensor]]) -> str | None:
    """The reason a graph cannot replay when an input is one of its previous call's outputs (`previous`)."""
    outputs = [ref() for ref in previous]
    fed = [i for i, x in enumerate(inputs) if any(x is out for out in outputs if out is not None)]
    return (f"reads its previous call's outputs (inputs {fed}), which the next replay overwrites: keep such state in "
            "a tensor of its own") if fed else None


def checking_backend(name: str, found: Skips) -> Callable[..., Any]:
    """Inductor's own compilation, with each compiled graph's skip reasons written into `found` (and its inputs
    copied in at every replay into `COPIED`) at its first call, and again at each call whose static inputs are not
    all 16-byte aligned where an earlier call's were (a storage row of another step whose start is not aligned);
    at every call, whether it reads its previous call's outputs (`fed_back`)."""

    def inner(gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:
        compiled = compile_fx_inner(gm, example_inputs, **kwargs)
        key = name + (" (backward)" if kwargs.get("is_backward") else "")
        call = compiled.current_callable
        static = list(kwargs.get("static_input_idxs") or ())
        seen: set[tuple[int, ...]] = set()
        previous: list[weakref.ref[torch.Tensor]] = []

        def checked_call(inputs: list[Any]) -> Any:
            aligned = tuple(remove_unaligned_input_idxs(inputs, static))
            reasons = found.setdefault(key, [])
            if aligned not in seen:
                seen.add(aligned)
                reasons += [r for r in skip_reasons(gm, compiled, static, list(inputs)) if r not in reasons]
                COPIED[key] = sorted({*COPIED.get(key, []), *copied_in(static, list(inputs))})
            reason = fed_back(inputs, previous)
            if reason is not None and reason not in reasons:
                reasons.append(reason)
            given = list(inputs)
            outputs = call(inputs)  # a forward graph's outputs include inputs saved for its backward: not its own
            previous[:] = [weakref.ref(x) for x in outputs
                           if isinstance(x, torch.Tensor) and not any(x is y for y in given)]
            return outputs

        if call is not None:
            compiled.current_callable = checked_call
        return compiled

    return lambda gm, example_inputs: compile_fx(gm, example_inputs, inner_compile=inner)


@contextmanager
def compiled_as_with_cuda_graphs() -> Iterator[Skips]:
    """Everything compiled inside compiles as with `perf.cuda_graphs` on a CUDA device (marks included), with inductor
    for the CPU and the reasons it would skip each graph's CUDA graph collected (AOT autograd's cache is off: its hits
    skip inductor's compile)."""
    found: Skips = {}
    COPIED.clear()
    real_compile, real_choice = torch.compile, compile_module.use_cuda_graphs

    def compile_checked(fn: Callable[..., Any], **kwargs: Any) -> Any:
        if "backend" in kwargs:  # `graph_break`'s probe, which compiles nothing
            return real_compile(fn, **kwargs)
        name = getattr(fn, "__qualname__", type(fn).__qualname__)
        kwargs = {k: v for k, v in kwargs.items() if k not in ("mode", "options")}
        return real_compile(fn, backend=checking_backend(name, found), **kwargs)

    with pytest.MonkeyPatch.context() as patch, torch._dynamo.config.patch(disable=False), \
            functorch_config.patch(enable_autograd_cache=False), inductor_config.patch({"triton.cudagraph_trees": True}):
        patch.setattr(torch, "compile", compile_checked)
        patch.setattr(compile_module, "use_cuda_graphs", lambda perf, device: real_choice(perf, torch.device("cuda")))
        yield found


def trained_skips(cfg: TrainConfig) -> Skips:
    """The skip reasons of every graph one iteration of `cfg` compiles and runs, as with CUDA graphs."""
    cfg.iterations = 1
    with compiled_as_with_cuda_graphs() as found:
        Runner(cfg).learn()
    return found


def skipped(found: Skips) -> dict[str, list[str]]:
    """The graphs inductor would skip, each reason in one line: its first and the line of code it names."""
    def one_line(reason: str) -> str:
        lines = [line.strip() for line in reason.splitlines() if line.strip().strip("^")]
        return lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"

    return {name: [one_line(r) for r in reasons] for name, reasons in found.items() if reasons}


@pytest.fixture(scope="module")
def feedforward_step() -> Skips:
    """Point-mass, `compile=step` (shared: a module's graphs compile once)."""
    return trained_skips(small_config("point-mass", compile="step", cuda_graphs="auto"))


def test_the_check_sees_a_mutated_input_unless_its_address_is_static() -> None:
    def accumulate(x: torch.Tensor, total: torch.Tensor) -> None:
        total.add_(x)

    x, total = torch.ones(4), torch.zeros(4)
    with compiled_as_with_cuda_graphs() as found:
        torch.compile(accumulate, fullgraph=True, dynamic=False)(x, total)
    assert found["test_the_check_sees_a_mutated_input_unless_its_address_is_static.<locals>.accumulate"][0].startswith(
        "skipping cudagraphs due to mutated inputs (1 instances)")
    torch._dynamo.mark_static_address(total)
    with compiled_as_with_cuda_graphs() as found:
        torch.compile(accumulate, fullgraph=True, dynamic=False)(x, total)
    assert list(found.values()) == [[]]
    assert torch.equal(total, torch.full((4,), 2.0))


def test_every_graph_of_the_whole_step_trainer_would_replay(feedforward_step: Skips) -> None:
    """Point-mass, `compile=step`: the rollout step's two graphs, the env step, GAE and the whole-minibatch update."""
    assert set(feedforward_step) == {"FeedForwardPPO.act_step", "FeedForwardPPO.record_step",
                                     "TorchVecEnv._transition", "compute_gae", "MinibatchStep"}
    assert skipped(feedforward_step) == {}


def test_every_graph_of_the_hot_trainer_would_replay() -> None:
    """CartPole, `compile=hot`: the minibatch's forward and losses, and their backward, as graphs of their own."""
    found = trained_skips(small_config("cartpole", compile="hot", cuda_graphs="auto"))
    assert {"FeedForwardPPO.minibatch_losses", "FeedForwardPPO.minibatch_losses (backward)",
            "TorchVecEnv._transition"} <= set(found)
    assert skipped(found) == {}


def test_every_graph_of_the_recurrent_trainer_would_replay() -> None:
    """The recurrent algorithm's graphs and the env step; the rollout step reads the agents' states where they stay,
    not the previous step's outputs."""
    found = trained_skips(recurrent_config("pendulum", compile="hot", cuda_graphs="auto"))
    assert set(found) == {"RecurrentMLPPolicy.step", "RecurrentPPO.minibatch_loss",
                          "RecurrentPPO.minibatch_loss (backward)", "TorchVecEnv._transition"}
    assert skipped(found) == {}


@pytest.mark.parametrize("algorithm", ["SAC", "TD3"])
def test_off_policy_graphs_would_replay_reading_the_batch_in_place(algorithm: str) -> None:
    """SAC and TD3, `compile=hot`: the critics' loss and the actor's (each with its backward), and the env step. The
    losses' graphs read the batch where the buffer gathers it (static), so a replay copies none of their inputs in."""
    from test_offpolicy import small

    cfg = small(algorithm.lower(), compile="hot", cuda_graphs="auto")
    cfg.learner.learning_starts = 0  # gradient steps in the one iteration
    found = trained_skips(cfg)
    losses = [f"{algorithm}.critic_loss", f"{algorithm}.actor_losses" if algorithm == "SAC" else "TD3.actor_loss"]
    assert set(found) == {*losses, *(f"{loss} (backward)" for loss in losses), "TorchVecEnv._transition"}
    assert skipped(found) == {}
    assert {loss: COPIED[loss] for loss in losses} == {loss: [] for loss in losses}


@pytest.mark.parametrize("algorithm", ["SAC", "TD3"])
def test_off_policy_whole_steps_would_replay_updating_their_state_in_place(algorithm: str) -> None:
    """SAC and TD3, `compile=step`: a gradient step is one graph (TD3's two: the critics' step alone, and with the
    actor's), and the env step another. Each would replay: every input it updates (parameters, targets, moments,
    step counts, learning rates, statistics) keeps its address, and it copies in none of its inputs."""
    from test_offpolicy import small

    cfg = small(algorithm.lower(), compile="step", cuda_graphs="auto")
    cfg.learner.learning_starts = 0  # gradient steps in the one iteration (TD3's actor steps on every second)
    found = trained_skips(cfg)
    steps = [f"{algorithm}.whole_gradient_step", *(["TD3.whole_critic_step"] if algorithm == "TD3" else [])]
    assert set(found) == {*steps, "TorchVecEnv._transition"}
    assert skipped(found) == {}
    assert {step: COPIED[step] for step in steps} == {step: [] for step in steps}


@pytest.mark.parametrize("num_envs", [13, 20])
def test_an_env_count_off_the_alignment_replays_every_step_and_compiles_once(num_envs: int) -> None:
    """Point-mass, `compile=step`, with `num_envs` not a multiple of 16 (nor of 8): every step's storage rows and the
    env's tensors stay static and aligned (inductor drops an unaligned static input, and then skips a graph that
    writes it: with 13 envs the step graphs write one aligned row, copied into the step's row after them), and a
    second iteration compiles nothing more."""
    cfg = small_config("point-mass", compile="step", cuda_graphs="auto")
    cfg.env.num_envs = num_envs
    cfg.iterations = 2
    with compiled_as_with_cuda_graphs() as found:
        runner = Runner(cfg)
        runner.learn(until=1)
        warm = compile_counts()
        runner.learn()
    assert compile_counts() == warm
    assert skipped(found) == {}
    staged, last = runner.algorithm._staged, runner.algorithm.storage.rows[-1]
    assert (staged is not None) == (num_envs % 4 != 0)
    if staged is not None:  # the last step's row holds what the graphs wrote
        assert all(torch.equal(a, b) for a, b in zip(staged, last, strict=True))
