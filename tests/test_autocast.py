"""`perf.autocast`: bfloat16 hidden layers against float32, within a stated tolerance; `auto` leaves small calls in
float32 bit for bit; the rollout's and the update's log-probs agree; exported graphs compute in float32."""

from __future__ import annotations

import pytest
import torch

from conftest import TEST_DEVICE, copy_trained_state, small_config, update_stats
from syncfree.policy.actor_critic import AUTO_MIN_WORK, mlp, native_bf16, set_autocast
from syncfree.train.runner import Runner

TOLERANCE = dict(rtol=2e-2, atol=2e-2)
"""bfloat16 keeps 8 significant bits: hidden activations round by up to 0.4 %, outputs move by about 0.1-0.5 %."""


def test_bf16_outputs_are_float32_and_close_to_float32() -> None:
    torch.manual_seed(0)
    net = mlp(48, [256, 128], 6, "elu")
    x = torch.randn(512, 48)
    reference = net(x)
    set_autocast(net, "bf16")
    out = net(x)
    assert out.dtype == torch.float32
    assert not torch.equal(out, reference)
    torch.testing.assert_close(out, reference, **TOLERANCE)
    out.sum().backward()  # gradients reach the float32 parameters
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in net.parameters())


def test_auto_keeps_small_calls_in_float32_bit_for_bit() -> None:
    torch.manual_seed(0)
    net = mlp(16, [64, 64], 2, "elu")
    small = torch.randn(AUTO_MIN_WORK // 64 - 1, 16)  # just under the threshold
    large = torch.randn(AUTO_MIN_WORK // 64, 16)
    reference_small, reference_large = net(small), net(large)
    set_autocast(net, "auto", torch.device("cpu"))
    assert torch.equal(net(small), reference_small)
    if native_bf16(torch.device("cpu")):
        assert not torch.equal(net(large), reference_large)
        torch.testing.assert_close(net(large), reference_large, **TOLERANCE)
    else:  # no bfloat16 instructions: auto stays float32
        assert torch.equal(net(large), reference_large)
    set_autocast(net, "auto", torch.device("cuda"))  # not measured on GPUs: auto stays off there
    assert net.autocast_dtype is None


def bf16_trainer(autocast: str, normalize_obs: bool = True) -> Runner:
    cfg = small_config("pendulum", autocast=autocast)
    cfg.policy.actor_hidden = cfg.policy.critic_hidden = [128, 128]
    cfg.policy.normalize_obs = normalize_obs
    return Runner(cfg)


def test_rollout_and_update_log_probs_agree_under_bf16() -> None:
    """The update's first evaluation of a stored step gives the log-prob the rollout stored: PPO's ratio starts
    at 1 (bfloat16 products here do not depend on the batch they are computed in). Without the normalizer, which
    moves during the rollout."""
    trainer = bf16_trainer("bf16", normalize_obs=False)
    with torch.inference_mode():
        for t in range(trainer.cfg.ppo.steps_per_env):
            trainer.rollout_step(t)
    s = trainer.algorithm.storage
    with torch.no_grad():
        ev = trainer.policy.evaluate(s.actor_obs.flatten(0, 1), s.critic_obs.flatten(0, 1), s.actions.flatten(0, 1))
    torch.testing.assert_close(ev.log_prob, s.log_probs.flatten(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ev.value, s.values.flatten(), rtol=1e-5, atol=1e-5)


def test_one_bf16_update_on_an_identical_rollout_is_close_to_float32() -> None:
    full, half = bf16_trainer("off"), bf16_trainer("bf16")
    full.cfg.iterations = 1
    full.learn()
    copy_trained_state(full, half)
    before = {n: p.detach().clone() for n, p in full.policy.named_parameters()}
    stats = []
    for trainer in (full, half):
        torch.manual_seed(2)  # the same minibatch order
        stats.append(update_stats(trainer))
    torch.testing.assert_close(stats[0], stats[1], rtol=5e-2, atol=1e-2)
    for name, p in half.policy.named_parameters():
        step_full, step_half = full.policy.get_parameter(name) - before[name], p - before[name]
        if step_full.abs().max() > 0:  # the update moved the parameters the same way
            cosine = torch.nn.functional.cosine_similarity(step_full.flatten(), step_half.flatten(), dim=0)
            assert cosine > 0.95, (name, cosine)


@pytest.mark.skipif(TEST_DEVICE != "cpu", reason="exports from a CPU run")
def test_export_computes_in_float32(tmp_path) -> None:
    pytest.importorskip("onnx")
    from syncfree.export import load_policy
    from syncfree.train import checkpoint

    trainer = bf16_trainer("bf16")
    trainer.run_dir = tmp_path
    trainer.save()
    policy, _ = load_policy(checkpoint.load(tmp_path / "latest.pt"), tmp_path / "latest.pt")
    assert all(getattr(m, "autocast_dtype", None) is None for m in policy.modules())
