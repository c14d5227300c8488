"""`perf.autocast`: bfloat16 hidden layers against float32, within a stated tolerance; `auto` leaves small calls in
float32 bit for bit; the rollout's and the update's log-probs agree; exported graphs compute in float32."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import TEST_DEVICE, copy_trained_state, small_config, update_stats
from syncfree.policy.actor_critic import AUTO_MIN_WORK, mlp, native_bf16, set_autocast
from syncfree.tasks import TASKS
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
def test_export_computes_in_float32(tmp_path, monkeypatch) -> None:
    """A bfloat16 run's policy loads in bfloat16 (as it trained), and export's in float32."""
    pytest.importorskip("onnx")
    from syncfree import export
    from syncfree.train import checkpoint
    from syncfree.train.evaluate import load_policy

    trainer = bf16_trainer("bf16")
    checkpoint.save_run(trainer.state_dict(), tmp_path, trainer.iteration)
    loaded = load_policy(tmp_path / "latest.pt")
    assert any(getattr(m, "autocast_dtype", None) == torch.bfloat16 for m in loaded.policy.modules())

    exported = []

    def deployment(policy, rows):
        exported.append(policy)
        raise KeyboardInterrupt  # stop before writing anything

    monkeypatch.setattr(type(loaded.policy), "deployment", deployment)
    with pytest.raises(KeyboardInterrupt):
        export.export_checkpoint(tmp_path / "latest.pt", tmp_path / "out")
    assert all(getattr(m, "autocast_dtype", None) is None for m in exported[0].modules())


def test_recurrent_token_encoder_under_bf16_is_close_to_float32() -> None:
    """The gridworld policy's token encoder: bfloat16 MLP, float32 output close to float32's; `auto` leaves it in
    float32, and a call below the work threshold stays float32 bit for bit."""
    from syncfree.policy.recurrent import EMPTY_TOKEN, TokenEncoder

    torch.manual_seed(0)
    encoder = TokenEncoder(embed_dim=32, hidden=64, out_dim=64, max_tokens=64)
    tokens = torch.randint(0, 120, (256, 64, 3), dtype=torch.uint8)
    tokens[:, 40:] = EMPTY_TOKEN  # valid tokens first, then padding, as MettaGrid writes them
    reference = encoder(tokens)
    set_autocast(encoder, "bf16")
    out = encoder(tokens)
    assert out.dtype == torch.float32 and not torch.equal(out, reference)
    torch.testing.assert_close(out, reference, **TOLERANCE)
    out.sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in encoder.parameters())
    set_autocast(encoder, "auto", torch.device("cpu"))
    assert encoder.autocast_dtype is None and torch.equal(encoder(tokens), reference)  # not measured faster anywhere
    encoder.autocast_dtype = torch.bfloat16  # the work threshold, as `auto` would set it
    small = tokens[:4]  # 4 x 64 tokens x 64 wide: below AUTO_MIN_WORK
    assert AUTO_MIN_WORK > 4 * 64 * 64 and torch.equal(encoder(small), reference[:4])


def test_one_recurrent_minibatch_under_bf16_is_close_to_float32() -> None:
    """grid-arena's minibatch loss and gradients on the same rows and parameters, bfloat16 encoder against float32:
    losses within the tolerance, each parameter's gradient pointing the same way."""
    pytest.importorskip("mettagrid")
    from conftest import grid_config

    runner = Runner(grid_config(1, compile="off"))
    runner.learn()
    algorithm = runner.algorithm
    results = []
    for precision in ("off", "bf16"):
        set_autocast(runner.policy, precision)
        runner.policy.zero_grad()
        loss, parts, _ = algorithm.minibatch_loss(algorithm.minibatch(0, algorithm.buffer.segments // 2, 1.0))
        loss.backward()
        results.append((loss.detach(), torch.stack(parts).detach(),
                        {n: p.grad.clone() for n, p in runner.policy.named_parameters() if p.grad is not None}))
    (loss32, parts32, grads32), (loss16, parts16, grads16) = results
    torch.testing.assert_close(loss16, loss32, rtol=5e-2, atol=1e-2)
    torch.testing.assert_close(parts16, parts32, rtol=5e-2, atol=1e-2)
    assert grads32.keys() == grads16.keys() and grads32
    for name, g in grads32.items():
        if g.abs().max() > 0:
            cosine = torch.nn.functional.cosine_similarity(g.flatten(), grads16[name].flatten(), dim=0)
            assert cosine > 0.95, (name, cosine)


PROBED_TASKS = [*sorted(TASKS), "gym:Hopper-v5", "pendulum/recurrent", "g1-track/token"]
"""Every built-in task's preset, a Gymnasium task, and the other policy kinds (`task/kind`)."""


@pytest.mark.parametrize(("device", "fast_bf16"), [("cpu", True), ("cpu", False), ("cuda", False)],
                         ids=["cpu-with-bf16", "cpu-without-bf16", "cuda"])
@pytest.mark.parametrize("task_kind", PROBED_TASKS)
def test_what_switches_report_for_autocast_is_what_runs(task_kind: str, device: str, fast_bf16: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`syncfree switches` calls `autocast` live or inert from the config (before a policy exists) and from the
    built policy (a run's warning); a probe builds the task's policy, sets `autocast=auto` as a run does for the
    device (the device check simulated: a CPU with or without bfloat16 instructions, a CUDA device, where `auto`
    stays float32), and runs each of its networks at the run's largest call: the switch is live exactly when some
    matrix product then runs in bfloat16, and all three agree. `bf16` is live everywhere."""
    from test_switch_effects import DtypesOfMatmuls

    from syncfree.policy import actor_critic
    from syncfree.policy.actor_critic import MLP
    from syncfree.tasks import algorithm_for, make_task_env, preset, switch_scope, with_algorithm

    task, _, kind = task_kind.partition("/")
    if task == "grid-arena":
        pytest.importorskip("mettagrid")
    if task.startswith("gym:"):
        pytest.importorskip("gymnasium")
    cfg = preset(task)
    if kind == "recurrent":
        cfg = with_algorithm(cfg, "recurrent-ppo")
    elif kind:
        cfg.policy.kind = kind
    monkeypatch.setattr(actor_critic, "native_bf16", lambda d: fast_bf16 and d.type == "cpu")
    env = make_task_env(cfg, 1, torch.device("cpu"), 0)  # the task's env as its runs build it, one of them
    torch.manual_seed(0)
    policy = algorithm_for(cfg).build_policy(cfg, env)
    close = getattr(env, "close", None)
    if close is not None:
        close()
    set_autocast(policy, "auto", torch.device(device))
    declared, computed = (switch_scope(cfg, device, policy=p) for p in (None, policy))
    rows = declared.policy_rows
    assert rows == computed.policy_rows > 0
    networks = [m for m in policy.modules() if isinstance(m, MLP)]
    assert not [m for m in policy.modules() if hasattr(type(m), "autocast_dtype") and not isinstance(m, MLP)
                and getattr(type(m), "autocast_auto", True)], "a network `auto` lowers that the probe does not run"
    with torch.no_grad(), DtypesOfMatmuls() as mode:
        for net in networks:
            net(torch.randn(rows, net[0].in_features))
    probed_live = mode.dtypes[torch.bfloat16] > 0
    assert (cfg.perf.inert_reason("autocast", declared) is None) == probed_live, (rows, dict(mode.dtypes))
    assert (cfg.perf.inert_reason("autocast", computed) is None) == probed_live
    bf16 = dataclasses.replace(cfg.perf, autocast="bf16")
    assert bf16.inert_reason("autocast", declared) is None and bf16.inert_reason("autocast", computed) is None
