"""The recurrent trainer on MettaGrid (grid-arena): switch equivalence, the full-log-probs gate, teacher losses,
host-sync budgets, checkpoints and the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("mettagrid")

from conftest import assert_same_state, grid_config, recurrent_config
from syncfree.algo.recurrent import RecurrentPPO
from syncfree.algo.settings import LossesConfig
from syncfree.bench.timing import count_iteration
from syncfree.cli import main
from syncfree.config import PerfConfig, TrainConfig
from syncfree.errors import UserError
from syncfree.tasks import preset, switch_scope
from syncfree.train import checkpoint
from syncfree.train.run import Run
from syncfree.train.runner import Runner

GRID_SWITCHES = ("gate_full_log_probs", "preallocated_last_actions", "cpu_time_index",
                 "cached_minibatch_indices")


pytestmark = pytest.mark.usefixtures("one_thread")


def trained(cfg: TrainConfig) -> Runner:
    trainer = Runner(cfg)
    assert isinstance(trainer.algorithm, RecurrentPPO)
    trainer.learn()
    return trainer


def snapshot(trainer: Runner) -> dict:
    state = trainer.state_dict()
    data = {k: v for k, v in trainer.algorithm.buffer.data.items() if k != "full_log_probs"}
    return {"policy": state["policy"], "optimizer": state["algorithm"], "buffer": data,
            "advantages": trainer.algorithm.buffer.advantages, "episodes": state["episodes"]}


@pytest.mark.parametrize("switch", [*GRID_SWITCHES, "zero_grad_set_to_none", "deferred_episode_stats"])
def test_each_grid_switch_changes_nothing_but_speed(switch: str) -> None:
    """Buffers, advantages, parameters, optimizer state and episode statistics are bitwise equal with the switch
    on and off."""
    off = PerfConfig.switches_by_name()[switch].metadata["baseline"]
    a, b = trained(grid_config(**{switch: off})), trained(grid_config())
    assert_same_state(snapshot(a), snapshot(b))
    assert len(b.monitors.episodes.recent_returns) > 0  # episodes ended (2 iterations x 8 steps, 16-step episodes)


ENCODER_CUTS = ("token_embedding_tables", "sparse_token_max")
"""The token encoder's exact arithmetic cuts: the same function, sums in another order."""


def first_minibatch_gradients(trainer: Runner) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    algo = trainer.algorithm
    algo.optim.optimizer.zero_grad(set_to_none=True)
    loss = algo.minibatch_loss(algo.minibatch(0, algo.buffer.segments // 2, 1.0))[0]
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in trainer.policy.named_parameters()}


@pytest.mark.parametrize("switch", ENCODER_CUTS)
def test_each_encoder_cut_computes_the_update_within_float_tolerance(switch: str) -> None:
    """On the same stored rollout and parameters, a minibatch's loss is within 1e-6 (relative) and every gradient
    within 1e-5 of its largest entry with the switch on and off. The sparse max takes the same maxima as `max`,
    so its rollout (actions, values, log-probs, states) is bitwise the conventional one."""
    off = trained(grid_config(iterations=1, **{switch: False}))
    on = Runner(grid_config(iterations=1, **{switch: True}))
    copy_trained_state(off, on)
    (loss_off, grads_off), (loss_on, grads_on) = first_minibatch_gradients(off), first_minibatch_gradients(on)
    torch.testing.assert_close(loss_on, loss_off, rtol=1e-6, atol=0)
    for name, grad in grads_on.items():
        scale = grads_off[name].abs().max().item()
        torch.testing.assert_close(grad, grads_off[name], rtol=0, atol=1e-5 * scale, msg=name)
    if switch == "sparse_token_max":  # the first iteration's rollout, from the same initial parameters
        rollout_on = trained(grid_config(iterations=1, **{switch: True})).algorithm.buffer
        assert_same_state({"data": rollout_on.data, "states": rollout_on.states, "advantages": rollout_on.advantages},
                          {"data": off.algorithm.buffer.data, "states": off.algorithm.buffer.states,
                           "advantages": off.algorithm.buffer.advantages})


def test_encoder_cuts_act_on_the_token_policy_and_the_tables_in_float32_only() -> None:
    grid = grid_config()
    assert {name: grid.perf.inert_reason(name, switch_scope(grid)) for name in ENCODER_CUTS} == dict.fromkeys(
        ENCODER_CUTS)
    bf16 = grid_config(autocast="bf16")
    assert "autocast=bf16" in bf16.perf.inert_reason("token_embedding_tables", switch_scope(bf16))
    assert bf16.perf.inert_reason("sparse_token_max", switch_scope(bf16)) is None
    flat = recurrent_config()  # the recurrent MLP policy on flat observations
    assert all("recurrent token policy" in flat.perf.inert_reason(name, switch_scope(flat)) for name in ENCODER_CUTS)


def copy_trained_state(source: Runner, target: Runner) -> None:
    """`target` gets `source`'s trainer state and its stored rollout (segments, states, advantages)."""
    target.load_state_dict(source.state_dict())
    for name, x in source.algorithm.buffer.data.items():
        target.algorithm.buffer.data[name].copy_(x)
    for a, b in zip(source.algorithm.buffer.states, target.algorithm.buffer.states, strict=True):
        b.copy_(a)
    target.algorithm.buffer.advantages.copy_(source.algorithm.buffer.advantages)
    target.algorithm.returns.copy_(source.algorithm.returns)


def test_every_parameter_gets_a_gradient_every_minibatch() -> None:
    """What makes `zero_grad_set_to_none` bitwise-neutral: no parameter is ever left without a gradient."""
    trainer = trained(grid_config(iterations=1))
    batch = trainer.algorithm.minibatch(0, trainer.algorithm.buffer.segments // 2, 1.0)
    trainer.algorithm.optim.optimizer.zero_grad(set_to_none=True)
    trainer.algorithm.minibatch_loss(batch)[0].backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in trainer.policy.parameters())


@pytest.mark.parametrize("which", ["baseline", "seed_before"])
def test_all_grid_switches_off_match_the_optimized_trainer(which: str) -> None:
    """Every grid switch at its baseline, or at the seeds' before (`PerfConfig.preset("seed_before")`)."""
    off = {name: PerfConfig.switches_by_name()[name].metadata[which] for name in GRID_SWITCHES}
    assert_same_state(snapshot(trained(grid_config(**off))), snapshot(trained(grid_config())))


def test_full_log_probs_are_stored_only_when_a_loss_needs_them(tmp_path: Path) -> None:
    gated = Runner(grid_config())
    assert not gated.policy.emit_full_log_probs and "full_log_probs" not in gated.algorithm.buffer.data
    always = Runner(grid_config(gate_full_log_probs=False))
    assert always.policy.emit_full_log_probs and "full_log_probs" in always.algorithm.buffer.data
    cfg = grid_config()
    cfg.losses.supervised = 0.5
    supervised = Runner(cfg)
    assert supervised.policy.emit_full_log_probs and {"full_log_probs", "teacher_actions"} <= supervised.algorithm.buffer.data.keys()


def test_a_loss_that_needs_full_log_probs_fails_loudly_without_them() -> None:
    cfg = grid_config(iterations=1)
    cfg.losses.supervised = 0.5
    trainer = Runner(cfg)
    trainer.policy.emit_full_log_probs = False
    with pytest.raises(UserError, match=r"losses\.supervised needs the policy's full log-probabilities"):
        trainer.learn()


def test_supervised_loss_imitates_the_scripted_teacher() -> None:
    """With only the supervised loss, updates on one stored rollout raise the student's agreement with the
    teacher's actions there (and leave PPO's statistics out of the record)."""
    cfg = grid_config(iterations=1)
    cfg.losses = LossesConfig(ppo=0.0, supervised=1.0)
    trainer = Runner(cfg)
    assert "surrogate_loss" not in trainer.learn()
    agreement = []
    for _ in range(15):
        trainer.algorithm.update()
        agreement.append(trainer.algorithm.statistics()["teacher_agreement"].item())
    assert agreement[-1] > agreement[0] + 0.25, agreement


def test_kickstarter_and_behavior_cloning_read_a_teacher_checkpoint(tmp_path: Path) -> None:
    teacher_run = Run(grid_config(iterations=1), tmp_path / "teacher")
    teacher_run.learn()
    cfg = grid_config(iterations=2)
    cfg.losses = LossesConfig(ppo=1.0, kickstarter=1.0, kickstarter_value=0.5, behavior_cloning=0.5,
                              teacher=str(tmp_path / "teacher" / "latest.pt"))
    student = Runner(cfg)
    assert student.algorithm.teacher is not None and not any(p.requires_grad for p in student.algorithm.teacher.parameters())
    assert {"teacher_log_probs", "teacher_values"} <= student.algorithm.buffer.data.keys()
    assert "teacher_actions" not in student.algorithm.buffer.data
    record = student.learn()
    for key in ("kickstarter_kl", "kickstarter_value_loss", "behavior_cloning_loss", "surrogate_loss"):
        assert key in record and record[key] == record[key]  # present and not NaN
    assert record["kickstarter_kl"] > 0
    stored = student.algorithm.buffer.data["teacher_log_probs"]
    torch.testing.assert_close(stored.logsumexp(-1), torch.zeros(stored.shape[:-1]), rtol=0, atol=1e-5)
    assert not torch.equal(stored, student.algorithm.buffer.data["full_log_probs"])  # the teacher's, not the student's


def test_teacher_checkpoint_errors_name_the_culprit(tmp_path: Path) -> None:
    cfg = grid_config()
    cfg.losses = LossesConfig(kickstarter=1.0, teacher=str(tmp_path / "missing.pt"))
    with pytest.raises(UserError, match=r"missing\.pt: no such file"):
        Runner(cfg)
    cfg.losses = LossesConfig(kickstarter=1.0)
    with pytest.raises(UserError, match=r"losses\.teacher"):
        Runner(cfg)


@pytest.mark.parametrize(("advantage", "sampler"), [("vtrace", "sequential"), ("gae", "prioritized")])
def test_vtrace_and_prioritized_sampling_train(advantage: str, sampler: str) -> None:
    cfg = grid_config()
    cfg.ppo.advantage, cfg.ppo.minibatch_sampler = advantage, sampler
    trainer = trained(cfg)
    assert ("ratio" in trainer.algorithm.buffer.data) == (advantage == "vtrace")
    if advantage == "vtrace":  # the ratios of the latest policy were written back, so they moved off 1
        assert not torch.equal(trainer.algorithm.buffer.data["ratio"], torch.ones_like(trainer.algorithm.buffer.data["ratio"]))
    assert all(torch.isfinite(p).all() for p in trainer.policy.parameters())


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_host_sync_budget(core: str) -> None:
    """No host read per rollout step (MettaGrid on the CPU is the env boundary) or per minibatch; the
    conventional time index reads the device once per step."""
    cfg = grid_config()
    cfg.policy.recurrent.core = core
    counts = count_iteration(trained(cfg))
    assert counts["syncs_per_step"] == 0
    assert counts["syncs_per_minibatch"] == 0
    assert counts["syncs_per_iteration"] <= 1
    conventional = count_iteration(trained(grid_config(cpu_time_index=False)))
    assert conventional["phases"]["store"]["syncs"] == 8  # one per rollout step


def test_resume_restores_the_trainer_state(tmp_path: Path) -> None:
    first = Run(grid_config(iterations=2), tmp_path / "run")
    first.learn()
    saved = checkpoint.load(tmp_path / "run" / "latest.pt")
    resumed = Runner(grid_config(iterations=3))
    resumed.load_state_dict(saved)
    assert resumed.iteration == 2 and resumed.env_steps == first.runner.env_steps
    assert_same_state(resumed.state_dict()["policy"], first.state_dict()["policy"])
    assert_same_state(resumed.algorithm.state_dict(), first.runner.algorithm.state_dict())
    assert resumed.learn()["iteration"] == 3
    other = grid_config()
    other.env.num_envs = 3
    with pytest.raises(UserError, match=re.escape("written with 8 env rows but this run has 12 agents (3 simulations x 4)")):
        Runner(other).load_state_dict(saved, source="ckpt")


def test_cli_trains_grid_arena_and_resumes(tmp_path: Path, capsys) -> None:
    args = ["--task", "grid-arena", "--env.num_envs", "2", "--ppo.steps_per_env", "8", "--ppo.bptt_horizon", "4",
            "--ppo.num_minibatches", "2", "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress",
            "false"]
    assert main(["train", "--iterations", "2", *args]) == 0
    assert main(["train", "--resume", str(tmp_path / "run" / "latest.pt"), "--resume_in_place", "true",
                 "--iterations", "3"]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3]
    assert records[-1]["env_steps"] == 3 * 8 * 8 and 0 <= records[-1]["reward_per_agent_step"] <= 1
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run" / "latest.pt"), "--num_envs", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("grid-arena: mean return ") and "over the first episodes of 8 agents (2 simulations x 4)" in out
    assert main(["eval", str(tmp_path / "run" / "latest.pt"), "--num_envs", "2", "--sample"]) == 0
    assert "of 8 agents (2 simulations x 4), sampled actions" in capsys.readouterr().out
    assert main(["export", str(tmp_path / "run" / "latest.pt")]) == 0  # its actor, the state carried by the caller
    assert capsys.readouterr().out.splitlines() == [f"wrote {tmp_path / 'run' / 'grid-arena-actor.onnx'}",
                                                    f"wrote {tmp_path / 'run' / 'grid-arena-actor.json'}"]


@pytest.mark.parametrize(("args", "culprit"), [
    (["--policy.kind", "mlp"], "policy.kind='mlp' is invalid"),
    (["--env.map", "maze"], "env.map"),
    (["--ppo.bptt_horizon", "5"], "ppo.bptt_horizon=5 is invalid"),
    (["--ppo.num_minibatches", "7"], "ppo.num_minibatches=7 is invalid"),
    (["--losses.supervised", "1", "--env.map", "arena"], "losses.supervised=1.0 is invalid"),
    (["--losses.kickstarter", "1"], "losses.teacher='' is invalid"),
    (["--policy.actor_hidden", "[8]"], "policy.actor_hidden=[8] is invalid"),  # the recurrent policy does not read it
])
def test_bad_grid_config_is_one_line(args: list[str], culprit: str, capsys) -> None:
    assert main(["train", "--task", "grid-arena", "--iterations", "1", *args]) == 2
    err = capsys.readouterr().err
    assert culprit in err and err.count("\n") == 1


def test_observations_with_unread_tokens_are_counted() -> None:
    """The log says what share of observations held more valid tokens than `policy.recurrent.max_tokens`: none
    at the preset's bound, most of them at a bound of 8."""
    default = Runner(grid_config(iterations=1))
    assert default.learn()["obs_over_max_tokens"] == 0.0
    cfg = grid_config(iterations=1)
    cfg.policy.recurrent.max_tokens = 8
    assert Runner(cfg).learn()["obs_over_max_tokens"] > 0.5


def test_teacher_losses_are_refused_outside_grid_arena(capsys) -> None:
    """Only the recurrent algorithm's config type has a `losses` section."""
    assert main(["train", "--task", "cartpole", "--losses.supervised", "1"]) == 2
    err = capsys.readouterr().err
    assert "losses.supervised" in err and err.count("\n") == 1


def test_grid_switch_list_is_complete() -> None:
    gridworld = {f.name for f in PerfConfig.switches() if f.metadata["seed"].startswith("gridworld:")}
    assert gridworld == set(GRID_SWITCHES) | {"zero_grad_set_to_none", "deterministic"}
    inert = PerfConfig().inert_switches(switch_scope(preset("grid-arena")))
    assert not set(GRID_SWITCHES) & set(inert) and "device_adaptive_lr" in inert
    assert "compile" not in inert
    assert inert["autocast"].startswith("autocast=auto keeps this policy in float32")  # its token encoder


def test_grid_arena_without_mettagrid_is_one_line(monkeypatch, capsys) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "syncfree.envs.adapters.mettagrid", None)  # as if mettagrid were missing
    assert main(["train", "--task", "grid-arena", "--iterations", "1", "--log.progress", "false"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["syncfree: error: task grid-arena needs MettaGrid: pip install 'syncfree[grid]'"]
