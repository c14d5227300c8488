"""`perf.compile=step`: the whole minibatch update as one function, run eagerly here (the compiled graph is
compared in tests/test_compile.py).

It computes gradients with `torch.func` and writes AdamW out by hand, so against the conventional update
(`.backward()`, `clip_grad_norm_`, `torch.optim.AdamW`) it is compared within a stated tolerance: the same
formulas in a different order of float32 operations, about one ulp per parameter after one iteration.
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import TEST_DEVICE, copy_trained_state, small_config, update_stats
from syncfree.algo.minibatch_step import (
    adamw_factors,
    adamw_update,
    global_norm_clip_coefficient,
    group_clip_coefficients,
)
from syncfree.algo.optim import PolicyOptimizer
from syncfree.algo.settings import PPOConfig
from syncfree.bench.timing import count_iteration
from syncfree.config import PerfConfig
from syncfree.core.memory import live_tensor_storages
from syncfree.train.runner import Runner

TOLERANCE = dict(rtol=1e-5, atol=1e-6)


def trained_pair(task: str, **perf) -> tuple[Runner, Runner]:
    """A conventional trainer after one iteration, and a `compile=step` one holding its state and rollout."""
    conventional = Runner(small_config(task, **perf))
    conventional.cfg.iterations = 1
    conventional.learn()
    whole = Runner(small_config(task, compile="step", **perf))
    copy_trained_state(conventional, whole)
    return conventional, whole


def update_both(pair: tuple[Runner, Runner], progress: float = 0.0) -> list[torch.Tensor]:
    stats = []
    for trainer in pair:
        torch.manual_seed(2)  # the same minibatch order
        stats.append(update_stats(trainer, progress))
    return stats


def assert_same_parameters_and_moments(a: Runner, b: Runner) -> None:
    for (name, x), y in zip(a.policy.named_parameters(), b.policy.parameters(), strict=True):
        torch.testing.assert_close(x, y, **TOLERANCE, msg=lambda m, name=name: f"{name}: {m}")
    state_a, state_b = a.algorithm.optim.optimizer.state_dict()["state"], b.algorithm.optim.optimizer.state_dict()["state"]
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(state_a[key][name], state_b[key][name].to(state_a[key][name].device),
                                       **TOLERANCE)


@pytest.mark.parametrize(("task", "schedule"), [("pendulum", "adaptive"), ("cartpole", "adaptive"),
                                                ("pendulum", "fixed"), ("pendulum", "linear")])
def test_one_update_matches_the_conventional_one(task: str, schedule: str) -> None:
    """Gaussian and categorical heads, the adaptive learning rate on the device, the fixed one and the linear one
    (half-way through the run: the graph must step at the halved rate the host set)."""
    pair = trained_pair(task)
    for trainer in pair:
        trainer.algorithm.optim.adaptive = schedule == "adaptive"
        trainer.algorithm.optim.annealed = schedule == "linear"
    conventional, whole = pair
    assert whole.algorithm.whole_step is not None and conventional.algorithm.whole_step is None
    before = {n: p.detach().clone() for n, p in whole.policy.named_parameters()}
    stats = update_both(pair, progress=0.5)
    if schedule == "linear":
        assert float(stats[1]["learning_rate"]) == whole.cfg.ppo.learning_rate / 2
    # the minibatch means, the learning rate the adaptive schedule reached and the skip count included
    torch.testing.assert_close(stats[0], stats[1], rtol=1e-4, atol=1e-7)
    assert_same_parameters_and_moments(conventional, whole)
    assert all(not torch.equal(p, before[n]) for n, p in whole.policy.named_parameters())


def test_adamw_update_is_torch_adamw() -> None:
    """Five steps of the hand-written AdamW (with weight decay and a float64 learning-rate tensor, as PPO keeps
    it) against `torch.optim.AdamW` on the same gradients."""
    g = torch.Generator().manual_seed(0)
    reference = torch.randn(7, 5, generator=g, requires_grad=True)
    optimizer = torch.optim.AdamW([reference], lr=3e-3, weight_decay=0.01)
    param, m, v = reference.detach().clone(), torch.zeros(7, 5), torch.zeros(7, 5)
    lr = torch.tensor(3e-3, dtype=torch.float64)
    for step in range(1, 6):
        grad = torch.randn(7, 5, generator=g)
        reference.grad = grad.clone()
        optimizer.step()
        factors = adamw_factors(torch.tensor([float(step)]), lr, torch.ones(1), (0.9, 0.999), 0.01)
        param, m, v = adamw_update(param, grad, m, v, factors[0], (0.9, 0.999), 1e-8)
    state = optimizer.state[reference]
    torch.testing.assert_close(param, reference.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(m, state["exp_avg"], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(v, state["exp_avg_sq"], rtol=1e-6, atol=1e-12)


def test_each_network_is_clipped_by_its_own_norm() -> None:
    """`ppo.grad_clip=per_network` (rsl_rl 5): a large critic gradient is clipped without shrinking the actor's;
    `global` scales both by one factor. The whole step's coefficients are the same arithmetic."""
    actor, critic = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    actor_grad, critic_grad = torch.tensor([0.3, 0.0, 0.4]), torch.tensor([60.0, 80.0])  # norms 0.5 and 100
    clipped = {}
    for mode, groups in (("per_network", [[actor], [critic]]), ("global", None)):
        optimizer = PolicyOptimizer([actor, critic], PPOConfig(max_grad_norm=1.0, grad_clip=mode), PerfConfig(),
                                    torch.device("cpu"), clip_groups=groups)
        actor.grad, critic.grad = actor_grad.clone(), critic_grad.clone()
        norm = optimizer.clip_gradients()
        torch.testing.assert_close(norm, torch.tensor(100.00125))  # the norm of all gradients, before clipping
        clipped[mode] = (actor.grad.clone(), critic.grad.clone())
    torch.testing.assert_close(clipped["per_network"][0], actor_grad)  # under its limit: untouched
    torch.testing.assert_close(clipped["per_network"][1].norm(), torch.tensor(1.0))
    torch.testing.assert_close(clipped["global"][0], actor_grad / 100.00125, rtol=1e-5, atol=0)
    total, factors = group_clip_coefficients([actor_grad, critic_grad], [[0], [1]], 1.0)
    torch.testing.assert_close(total, torch.tensor(100.00125))
    torch.testing.assert_close(actor_grad * factors[0], clipped["per_network"][0])
    torch.testing.assert_close(critic_grad * factors[1], clipped["per_network"][1])


@pytest.mark.parametrize("grad_clip", ["per_network", "global"])
def test_the_policy_clips_as_configured(grad_clip: str) -> None:
    """The MLP policy's groups: the critic network, and the actor with its action distribution."""
    cfg = small_config("pendulum")
    cfg.ppo.grad_clip = grad_clip
    optim = Runner(cfg).algorithm.optim
    if grad_clip == "global":
        assert len(optim.clip_groups) == 1
        return
    actor, critic = optim.clip_groups
    policy = Runner(cfg).policy
    assert len(critic) == len(list(policy.critic.parameters()))
    assert len(actor) + len(critic) == len(optim.params) and any(p.shape == (1,) for p in actor)  # log std


def test_global_norm_clip_is_clip_grad_norm() -> None:
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(4, 3, generator=g) * 5, torch.randn(6, generator=g)]
    params = [torch.zeros_like(x, requires_grad=True) for x in grads]
    for p, x in zip(params, grads, strict=True):
        p.grad = x.clone()
    expected_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
    norm, coefficient = global_norm_clip_coefficient(grads, 1.0)
    assert torch.equal(norm, expected_norm)
    for p, x in zip(params, grads, strict=True):
        assert torch.equal(x * coefficient, p.grad)
    assert global_norm_clip_coefficient(grads, 1e6)[1] == 1.0  # never scales up


def test_a_non_finite_gradient_skips_the_step_like_fused_adamw() -> None:
    """NaN advantages give NaN gradients on every minibatch: parameters and AdamW state stay as they were and
    every step is counted as skipped, as the conventional update with `grad_finite_from_norm` does."""
    pair = trained_pair("pendulum")
    assert pair[1].algorithm.whole_step.skip_nonfinite
    for trainer in pair:
        trainer.algorithm.storage.advantages.fill_(float("nan"))
    conventional, whole = pair
    before = {n: p.detach().clone() for n, p in whole.policy.named_parameters()}
    moments = {k: {n: t.clone() for n, t in s.items()} for k, s in whole.algorithm.optim.optimizer.state_dict()["state"].items()}
    stats = update_both(pair)
    updates = whole.cfg.ppo.num_epochs * whole.cfg.ppo.num_minibatches
    assert stats[0]["skipped_steps"] == stats[1]["skipped_steps"] == updates
    assert stats[0]["longest_skip_run"] == stats[1]["longest_skip_run"] == updates  # every path tracks the run
    assert all(torch.equal(p, before[n]) for n, p in whole.policy.named_parameters())
    for key, state in whole.algorithm.optim.optimizer.state_dict()["state"].items():
        for name, value in state.items():
            assert torch.equal(value.cpu(), moments[key][name].cpu()), name
    assert_same_parameters_and_moments(conventional, whole)


def test_checkpoints_move_between_modes() -> None:
    """The moments live in the optimizer's state: a `step` run resumes in the conventional mode and back."""
    whole = Runner(small_config("pendulum", compile="step"))
    whole.cfg.iterations = 2
    whole.learn()
    conventional = Runner(small_config("pendulum"))
    copy_trained_state(whole, conventional)
    again = Runner(small_config("pendulum", compile="step"))
    copy_trained_state(conventional, again)
    torch.manual_seed(5)
    for trainer in (conventional, again):
        torch.manual_seed(5)
        trainer.algorithm.update()
    assert_same_parameters_and_moments(conventional, again)


def test_without_the_finiteness_check_every_step_is_taken_as_conventionally() -> None:
    """`grad_finite_from_norm` off (rsl_rl): the whole step takes non-finite steps as the conventional update does,
    and both agree on finite ones."""
    pair = trained_pair("pendulum", grad_finite_from_norm=False)
    conventional, whole = pair
    assert whole.algorithm.whole_step is not None and not whole.algorithm.whole_step.skip_nonfinite
    stats = update_both(pair)
    torch.testing.assert_close(stats[0], stats[1], rtol=1e-4, atol=1e-7)
    assert_same_parameters_and_moments(conventional, whole)
    for trainer in pair:
        trainer.algorithm.storage.advantages.fill_(float("nan"))
    stats = update_both(pair)
    for trainer_stats in stats:  # no step skipped: the NaN reaches the parameters, as in rsl_rl
        assert trainer_stats["skipped_steps"] == 0 and trainer_stats["non_finite_parameters"] == 1


@pytest.mark.parametrize(("perf", "reason"), [({"device_loss_stats": False}, "device_loss_stats"),
                                              ({"device_adaptive_lr": False}, "device_adaptive_lr")])
def test_switches_with_host_reads_keep_the_conventional_update(perf: dict, reason: str) -> None:
    """Their off paths read the host inside the minibatch update, which a whole graph cannot hold."""
    trainer = Runner(small_config("pendulum", compile="step", **perf))
    assert trainer.algorithm.whole_step is None
    assert reason in trainer.algorithm.whole_step_fallback()


@pytest.mark.parametrize("task", ["pendulum", "cartpole"])
def test_no_host_sync_and_constant_allocations(task: str) -> None:
    trainer = Runner(small_config(task, compile="step"))
    trainer.cfg.iterations = 2
    trainer.learn()
    first = count_iteration(trainer)
    later = count_iteration(trainer)
    assert first["syncs_per_minibatch"] == 0 and first["syncs_per_iteration"] == 1
    assert first["phases"]["update.step"]["ops"] > 0  # the counted phase is the whole minibatch
    assert "update.backward" not in first["phases"]
    for key in ("allocations_per_minibatch", "ops_per_minibatch"):
        assert later[key] == first[key], key


def test_memory_count_skips_torch_func_wrappers() -> None:
    """Compiled `torch.func` code leaves wrapper tensors for the garbage collector (the bench counts live memory
    after it); they have no storage of their own, and asking for one raises."""
    kept = []

    def loss(x: torch.Tensor) -> torch.Tensor:
        kept.append(x)  # a wrapper outliving the transform
        return x.square().sum()

    torch.func.grad(loss)(torch.ones(3))
    assert torch._C._functorch.is_functorch_wrapped_tensor(kept[0])
    count, _ = live_tensor_storages()
    assert count >= 1


@pytest.mark.skipif(TEST_DEVICE != "cpu", reason="reads the C++ that torch.compile generates for a CPU")
def test_the_compiled_step_takes_adamws_scalars_from_a_table_not_per_element(compile_enabled) -> None:
    """torch.compile's CPU code recomputes a value inside each reader's per-element loop unless it keeps it in
    memory (`adamw_factors`): the compiled step must compute the bias corrections in one loop, over the parameters
    (`log(beta1)` in one loop of the generated code, not in each parameter's loop over its elements), and never
    raise the betas to the step count per element (`std::pow`), as it did when the factors were inlined (4x the
    time of the AdamW step on a 560k-parameter policy, one CPU thread)."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code

    _, whole = trained_pair("pendulum")
    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        _, code = run_and_get_code(whole.algorithm.update, 0.0)
    source = "\n".join(code)
    assert "lerp" in source  # the AdamW kernels were generated here (not taken from a cache)
    beta1 = whole.algorithm.optim.optimizer.param_groups[0]["betas"][0]
    assert len(list(whole.policy.parameters())) > 1
    loops = source.split("for(int64_t x0=")[1:]  # each outer loop of the C++ kernels, to the next one
    assert len([loop for loop in loops if repr(math.log(beta1)) in loop]) == 1
    assert "std::pow" not in source
