"""Every perf switch: on == off. Bitwise where the arithmetic is the same, a stated tolerance where kernels differ."""

from __future__ import annotations

import copy

import pytest
import torch

from conftest import TEST_DEVICE, small_config, train_iterations
from syncfree.algo.storage import Batch
from syncfree.config import PerfConfig
from syncfree.train.runner import Runner

SAME_ARITHMETIC = ["deferred_episode_stats", "deferred_nonfinite_check", "grad_finite_from_norm",
                   "device_adaptive_lr", "validate_distributions", "zero_grad_set_to_none"]
RATE_ROUNDED = TEST_DEVICE == "cuda"
"""CUDA's fused AdamW reads a learning-rate tensor as float32, and a Python-float rate as a double: there
`device_adaptive_lr` steps with the rate rounded to float32, and agrees with the host schedule within that rounding
(`test_device_adaptive_lr_agrees_within_the_float32_rounding_of_the_rate`), not bit for bit."""


def train(task: str, **perf: bool) -> tuple[Runner, list[tuple[float, float]], list[dict]]:
    return train_iterations(small_config(task, **perf))


def assert_same_run(a: tuple, b: tuple) -> None:
    (ta, ea, ra), (tb, eb, rb) = a, b
    for (name, pa), pb in zip(ta.policy.state_dict().items(), tb.policy.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    for name, x in ta.algorithm.storage.state_tensors().items():
        assert torch.equal(x, getattr(tb.algorithm.storage, name)), name
    assert ea == eb and len(ea) > 0
    drop = ("steps_per_s", "iteration_seconds")
    assert [{k: v for k, v in r.items() if k not in drop} for r in ra] == \
           [{k: v for k, v in r.items() if k not in drop} for r in rb]


def test_switch_catalogue_declares_both_polarities() -> None:
    for f in PerfConfig.switches():
        assert {"baseline", "optimized", "seed"} <= set(f.metadata), f.name
        # the optimized value is the default, but where the default chooses per run (compile=auto)
        assert f.default == f.metadata["optimized"] or f.name == "compile", f"{f.name}: optimized must be the default"
        # a check (validation) is off in both presets, as in rsl_rl; every optimization differs between them
        assert (f.metadata["baseline"] == f.metadata["optimized"]) == f.metadata["check"], f.name
    assert PerfConfig(compile="step") == PerfConfig.preset("optimized")
    assert PerfConfig().compile == "auto"


@pytest.mark.parametrize("task", ["cartpole", "pendulum"])
@pytest.mark.parametrize("switch", SAME_ARITHMETIC)
def test_switch_is_bitwise_equivalent(task: str, switch: str) -> None:
    if RATE_ROUNDED and switch == "device_adaptive_lr":
        pytest.skip("the rate is rounded to float32 on this device: compared within that rounding below")
    f = PerfConfig.switches_by_name()[switch]
    other = not f.metadata["optimized"] if f.metadata["check"] else f.metadata["baseline"]
    assert_same_run(train(task), train(task, **{switch: other}))


@pytest.mark.parametrize("task", ["cartpole", "pendulum"])
def test_the_seeds_before_of_the_gradient_check_is_bitwise_equivalent(task: str) -> None:
    """`grad_finite_from_norm=seed_before` reads every gradient and skips a step the optimized check skips: on
    finite gradients it steps as both other values do, bit for bit (a NaN update: the effect test)."""
    assert_same_run(train(task), train(task, grad_finite_from_norm="seed_before"))


def test_the_seeds_before_preset_is_the_baseline_plus_the_seeds_extra_code() -> None:
    before, baseline = PerfConfig.preset("seed_before"), PerfConfig.preset("baseline")
    differs = {f.name for f in PerfConfig.switches() if getattr(before, f.name) != getattr(baseline, f.name)}
    assert differs == {"grad_finite_from_norm", "preallocated_last_actions"}
    assert all(getattr(before, name) == "seed_before" for name in differs)


def test_all_baseline_equals_all_optimized_except_the_fused_kernel() -> None:
    """Everything but the optimizer kernel and the host's sums of the logged losses (which round differently:
    `test_loss_statistics_read_on_the_host_match_the_device_sums`) at its baseline value reproduces the optimized
    run bit for bit."""
    perf = PerfConfig.preset("baseline")
    perf.fused_adamw = True
    perf.device_loss_stats = True
    perf.deterministic = False
    perf.device_adaptive_lr = perf.device_adaptive_lr or RATE_ROUNDED
    assert_same_run(train("pendulum"), train("pendulum", **vars(perf)))


@pytest.mark.parametrize("task", ["cartpole", "pendulum"])
def test_device_adaptive_lr_agrees_within_the_float32_rounding_of_the_rate(task: str) -> None:
    """On every device: the rate kept on the device and the host schedule's agree over a short run, parameters and
    stored rollouts within 1e-5 (bit for bit on a CPU, `test_switch_is_bitwise_equivalent`)."""
    (ta, ea, ra), (tb, eb, rb) = train(task), train(task, device_adaptive_lr=False)
    for (name, pa), pb in zip(ta.policy.state_dict().items(), tb.policy.state_dict().values(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-5, msg=name)
    for name, x in ta.algorithm.storage.state_tensors().items():
        torch.testing.assert_close(x, getattr(tb.algorithm.storage, name), rtol=1e-5, atol=1e-5, msg=name)
    assert len(ea) == len(eb) > 0  # the same episodes ended
    assert [r["learning_rate"] for r in ra] == pytest.approx([r["learning_rate"] for r in rb], rel=1e-6)


@pytest.mark.parametrize("lr_on_device", [False, True])
def test_fused_adamw_matches_plain_adamw_for_one_step(lr_on_device: bool) -> None:
    """Kernels differ: one step from identical parameters and gradients agrees within 1e-6 (float32 rounding)."""
    results = []
    for fused in (False, True):
        trainer = Runner(small_config("pendulum", fused_adamw=fused, device_adaptive_lr=lr_on_device))
        trainer.cfg.iterations = 1
        trainer.learn()  # fills storage and optimizer state
        results.append(trainer)
    plain, fused = results
    fused.policy.load_state_dict(plain.policy.state_dict())
    fused.algorithm.load_state_dict(copy.deepcopy(plain.algorithm.state_dict()))  # no shared moment tensors
    assert fused.algorithm.optim.optimizer.param_groups[0]["fused"]
    mb = Batch(*(x[:64] for x in plain.algorithm.storage.flat()))
    before = [p.detach().clone() for p in plain.policy.parameters()]
    torch.manual_seed(0)
    plain.algorithm.minibatch_update(mb)
    torch.manual_seed(0)
    fused.algorithm.minibatch_update(mb)
    for (name, a), b in zip(plain.policy.named_parameters(), fused.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    assert all(not torch.equal(b, a) for b, a in zip(before, plain.policy.parameters(), strict=True))


def test_set_to_none_every_parameter_gets_a_gradient_each_minibatch() -> None:
    """`zero_grad(set_to_none=True)` equals zeroing only if no parameter is ever left without a gradient."""
    trainer = Runner(small_config("pendulum"))
    trainer.cfg.iterations = 1
    trainer.learn()
    data = trainer.algorithm.storage.flat()
    for start in (0, 64, 128):
        trainer.algorithm.minibatch_update(Batch(*(x[start : start + 64] for x in data)))
        missing = [n for n, p in trainer.policy.named_parameters() if p.grad is None]
        assert not missing


def test_deterministic_mode_reruns_identically() -> None:
    a = train("pendulum", deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    b = train("pendulum", deterministic=True)
    assert_same_run(a, b)


@pytest.mark.parametrize("fused_adamw", [True, False])
@pytest.mark.parametrize("task", ["pendulum", "g1-track"])
def test_non_finite_gradient_skips_the_step_and_counts_it(fused_adamw: bool, task: str) -> None:
    """`grad_finite_from_norm` (its off path, rsl_rl's, checks nothing: tests/test_switch_effects.py)."""
    trainer = Runner(small_config(task, fused_adamw=fused_adamw))
    trainer.cfg.iterations = 1
    trainer.learn()
    params = {n: p.detach().clone() for n, p in trainer.policy.named_parameters()}
    opt_state = copy.deepcopy(trainer.algorithm.optim.optimizer.state_dict()["state"])
    skipped = int(trainer.algorithm.optim.skipped_steps)
    hook = trainer.policy.critic[0].weight.register_hook(lambda g: torch.full_like(g, float("nan")))
    trainer.algorithm.minibatch_update(Batch(*(x[:64] for x in trainer.algorithm.storage.flat())))
    hook.remove()
    assert int(trainer.algorithm.optim.skipped_steps) == skipped + 1
    for n, p in trainer.policy.named_parameters():
        assert torch.equal(p, params[n]), n
    for key, state in trainer.algorithm.optim.optimizer.state_dict()["state"].items():
        for name, value in state.items():
            assert torch.equal(value, opt_state[key][name]), (key, name)
    # a finite step afterwards goes through and moves the parameters
    trainer.algorithm.minibatch_update(Batch(*(x[:64] for x in trainer.algorithm.storage.flat())))
    assert int(trainer.algorithm.optim.skipped_steps) == skipped + 1
    assert not torch.equal(trainer.policy.critic[0].weight, params["critic.0.weight"])


def test_loss_statistics_read_on_the_host_match_the_device_sums() -> None:
    """`device_loss_stats` off sums rsl_rl's three logged losses on the host (float64 sums of float32 values) instead
    of on the device (float32): the training is bitwise the same, the logged means agree to float32 rounding."""
    (ta, ea, ra), (tb, eb, rb) = train("pendulum"), train("pendulum", device_loss_stats=False)
    for (name, pa), pb in zip(ta.policy.state_dict().items(), tb.policy.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    assert ea == eb and len(ra) == len(rb) == 3
    host_summed = {"surrogate_loss", "value_loss", "entropy"}
    for a, b in zip(ra, rb, strict=True):
        assert a.keys() == b.keys()
        for key in a.keys() - host_summed - {"steps_per_s", "iteration_seconds"}:
            assert a[key] == b[key], key
        for key in host_summed:
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), key


def test_skipped_steps_are_reported_in_the_iteration_record() -> None:
    trainer = Runner(small_config("pendulum"))
    trainer.policy.actor[0].weight.register_hook(lambda g: torch.full_like(g, float("inf")))
    trainer.cfg.iterations = 1
    record = trainer.learn()
    assert record["skipped_steps"] == trainer.cfg.ppo.num_epochs * trainer.cfg.ppo.num_minibatches
