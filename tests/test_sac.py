"""Soft Actor-Critic (`--algorithm sac`): it learns pendulum, its rollout step and gradient step read the host 0 times,
it resumes (with an empty replay buffer, said in one line), evaluates and exports its deterministic actor, and refuses
what it cannot train in one line."""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from conftest import trained_host_reads
from syncfree.algo.sac import SAC
from syncfree.cli import main
from syncfree.envs.api import ActionSpec
from syncfree.policy.sac import SquashedGaussianActorCritic
from syncfree.policy.settings import PolicyConfig
from syncfree.tasks import preset, with_algorithm

pytestmark = pytest.mark.usefixtures("one_thread")


def sac_args(log_dir: Path, run: str, envs: int = 16) -> list[str]:
    return ["--task", "pendulum", "--algorithm", "sac", "--env.num_envs", str(envs), "--log.dir", str(log_dir),
            "--log.run_name", run, "--log.progress", "false"]


def mean_return(eval_line: str) -> float:
    match = re.match(r"pendulum: mean return (-?[\d.]+)", eval_line)
    assert match, eval_line
    return float(match.group(1))


def test_sac_learns_pendulum_from_its_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Pendulum's SAC preset (256 envs, 3-step returns) for 90 iterations (92,160 env steps, 2,752 gradient steps):
    the deterministic actor's return rises from about -1,200 (untrained) above -700 (the preset's 240 iterations
    reach -150: docs/off-policy.md)."""
    assert main(["train", "--task", "pendulum", "--algorithm", "sac", "--iterations", "90", "--log.dir",
                 str(tmp_path), "--log.run_name", "run", "--log.progress", "false"]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] == 90 * 256 * 4
    assert sum(r["gradient_steps"] for r in records) == (90 - 4) * 32  # none before 5,000 env steps
    assert all(math.isfinite(r["critic_loss"]) and math.isfinite(r["actor_loss"]) for r in records)
    assert records[-1]["alpha"] < 0.5  # the temperature fell from 1 toward the target entropy
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run" / "latest.pt"), "--num_envs", "32"]) == 0
    assert mean_return(capsys.readouterr().out) > -700


def test_no_host_read_per_env_step_or_gradient_step_one_per_iteration() -> None:
    cfg = with_algorithm(preset("pendulum"), "sac")
    cfg.env.num_envs, cfg.sac.steps_per_env, cfg.sac.updates_per_iteration, cfg.sac.batch_size = 16, 4, 3, 32
    cfg.sac.learning_starts = 0
    cfg.log.progress = False
    trainer, reads = trained_host_reads(cfg)
    assert reads == (0, 0, 1)
    assert trainer.algorithm.gradient_steps == 3  # the counted iteration took its gradient steps


def test_a_resume_starts_an_empty_buffer_says_so_and_its_checkpoint_evaluates_and_exports(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--sac.learning_starts", "128", "--sac.batch_size", "100", "--sac.updates_per_iteration", "2",
            "--sac.n_step", "1"]
    assert main(["train", *sac_args(tmp_path, "run"), *args, "--iterations", "2"]) == 0
    with caplog.at_level(logging.INFO, logger="syncfree"):
        assert main(["train", "--resume", str(tmp_path / "run" / "latest.pt"), "--iterations", "4",
                     "--log.run_name", "resumed", "--log.progress", "false"]) == 0
    assert caplog.text.count("sac: the run resumes with an empty replay buffer") == 1
    records = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3, 4]
    # 64 env steps per iteration: random actions and no update until the second; the resumed run counts on from the
    # checkpoint's env steps (no random actions) and updates once its empty buffer holds a batch of 100
    assert [r["gradient_steps"] for r in records] == [0, 2, 0, 2]
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "resumed" / "latest.pt"), "--num_envs", "4"]) == 0
    assert mean_return(capsys.readouterr().out) < 0
    if importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxscript"):  # the export extra
        assert main(["export", str(tmp_path / "resumed" / "latest.pt"), "--out", str(tmp_path / "onnx")]) == 0
        sidecar = json.loads((tmp_path / "onnx" / "pendulum-actor.json").read_text())
        assert sidecar["policy_kind"] == "sac" and "tanh" in sidecar["action"]["note"]


@pytest.mark.parametrize(("extra", "says"), [
    (["--sac.batch_size", "512", "--sac.buffer_size", "256"], "sac.batch_size=512 is invalid"),
    (["--sac.updates_per_iteration", "0"], "sac.updates_per_iteration=0 is invalid"),
    (["--sac.learning_starts", "-1"], "sac.learning_starts=-1 is invalid"),
    (["--sac.gamma", "1.5"], "sac.gamma=1.5 is invalid"),
    (["--sac.actor_learning_rate", "0"], "sac.actor_learning_rate=0.0 is invalid"),
    (["--sac.log_std_max", "-6"], "sac.log_std_max=-6.0 is invalid"),
    (["--sac.actor_init", "xavier"], "sac.actor_init"),
    (["--task", "cartpole"], "algorithm=sac: task 'cartpole' has discrete actions"),
])
def test_bad_settings_and_discrete_actions_are_one_line(extra: list[str], says: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", *sac_args(tmp_path, "run"), "--iterations", "1", *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "run").exists()


def test_the_squashed_log_prob_is_the_tanh_transformed_gaussians() -> None:
    torch.manual_seed(0)
    policy = SquashedGaussianActorCritic(3, 3, ActionSpec("continuous", 2), PolicyConfig(normalize_obs=False), 1.0)
    obs = torch.randn(64, 3)
    torch.manual_seed(1)
    actions, log_prob = policy.sample(obs)
    mean, log_std = policy.mean_log_std(obs)
    reference = TransformedDistribution(Normal(mean, log_std.exp()), TanhTransform())
    expected = reference.log_prob(actions.clamp(-1 + 1e-6, 1 - 1e-6)).sum(-1)
    torch.testing.assert_close(log_prob, expected, rtol=1e-3, atol=1e-3)
    assert actions.abs().max() < 1 and torch.equal(policy.act_deterministic(obs), torch.tanh(mean))


def test_fastsacs_actor_starts_at_the_mean_action_zero_with_its_narrower_exploration(tmp_path: Path) -> None:
    """`sac.actor_init=zero` and `sac.log_std_max=0` (FastSAC's): before any gradient step the actor's mean action is
    0 in every state and its log standard deviation -2.5, the middle of [-5, 0]; samples spread by exp(-2.5) before
    the tanh; training moves the zeroed layer; a checkpoint's actor comes back with its range. The defaults keep
    PyTorch's initialization and CleanRL's [-5, 2]."""
    from syncfree.train.evaluate import load_policy

    cfg = with_algorithm(preset("pendulum"), "sac")
    cfg.sac.actor_init, cfg.sac.log_std_max = "zero", 0.0
    env_shape = SimpleNamespace(action_spec=ActionSpec("continuous", 1), obs_shapes={"policy": (3,), "critic": (3,)})
    policy = SAC.build_policy(cfg, env_shape).requires_grad_(False)
    obs = torch.randn(256, 3) * 5
    mean, log_std = policy.mean_log_std(obs)
    assert torch.equal(mean, torch.zeros_like(mean)) and torch.equal(log_std, torch.full_like(log_std, -2.5))
    assert torch.equal(policy.act_deterministic(obs), torch.zeros(256, 1))
    torch.manual_seed(0)
    spread = torch.atanh(policy.sample(obs)[0]).std()
    assert abs(float(spread) - math.exp(-2.5)) < 0.02
    default = SAC.build_policy(with_algorithm(preset("pendulum"), "sac"), env_shape)
    assert default.log_std_range == (-5.0, 2.0) and default.actor[-1].weight.abs().sum() > 0

    args = ["--sac.actor_init", "zero", "--sac.log_std_max", "0", "--sac.learning_starts", "64",
            "--sac.batch_size", "64", "--sac.updates_per_iteration", "2", "--iterations", "2"]
    assert main(["train", *sac_args(tmp_path, "run"), *args]) == 0
    loaded = load_policy(tmp_path / "run" / "latest.pt").policy
    assert loaded.log_std_range == (-5.0, 0.0) and loaded.actor[-1].weight.abs().sum() > 0  # trained away from 0


def test_a_gradient_step_moves_the_targets_by_tau_and_leaves_the_critics_out_of_the_actors_loss() -> None:
    cfg = with_algorithm(preset("pendulum"), "sac")
    cfg.env.num_envs, cfg.sac.learning_starts, cfg.log.progress = 8, 0, False
    from syncfree.train.runner import Runner

    runner = Runner(cfg)
    runner.learn(until=1)
    sac = runner.algorithm
    assert isinstance(sac, SAC)
    targets = [p.clone() for p in sac.targets]
    sac.gradient_step()
    for before, target, critic in zip(targets, sac.targets, sac.critic_params, strict=True):
        torch.testing.assert_close(target, before + cfg.sac.tau * (critic - before))
    assert all(p.grad is None for p in sac.targets)
    assert all(p.grad is not None for p in [*sac.actor_params, sac.policy.log_alpha])


def test_auto_weighs_the_learners_own_compile_figures_not_its_tasks() -> None:
    """`perf.compile=auto` on SAC weighs the warm-up and iterations measured for SAC's gradient step (the shipped
    table's `learners`), over the iterations that take gradient steps; PPO's figures for the task are not used."""
    from syncfree.train.compile_choice import choose_compile, payback_table

    table = payback_table()
    for algorithm in ("sac", "td3"):
        figures = table["learners"][algorithm]["pendulum"]
        assert figures != table["tasks"]["pendulum"]
        cfg = with_algorithm(preset("pendulum"), algorithm)
        idle = cfg.iterations_before_learning()
        assert idle == 4  # 5,000 random env steps at 1,024 per iteration
        cfg.iterations = idle + figures["break_even"]
        choice = choose_compile(cfg, torch.device("cpu"))
        assert choice.mode == "step", choice
        assert choice.reason == (f"auto: {algorithm}'s {figures['warmup_s']:.0f} s warm-up pays back after "
                                 f"{figures['break_even']} iterations that update (the first after 4 without)")
        cfg.iterations -= 1
        assert choose_compile(cfg, torch.device("cpu")).mode == "off"


@pytest.mark.parametrize(("algorithm", "own", "idle"), [
    ("sac", {"learning_starts": 40, "batch_size": 32, "n_step": 1}, 2),  # the random steps last longest
    ("td3", {"learning_starts": 0, "batch_size": 64, "n_step": 3}, 4),  # filling a batch does
    ("sac", {"learning_starts": 0, "batch_size": 8, "n_step": 5}, 2),  # the n-step returns' wait does
])
def test_the_iterations_before_learning_are_those_a_run_takes_without_gradient_steps(
        tmp_path: Path, algorithm: str, own: dict[str, int], idle: int) -> None:
    from syncfree.train.run import Run

    cfg = with_algorithm(preset("pendulum"), algorithm)
    cfg.env.num_envs, cfg.log.progress = 8, False
    learner = getattr(cfg, algorithm)
    learner.steps_per_env, learner.updates_per_iteration = 2, 1
    for key, value in own.items():
        setattr(learner, key, value)
    assert cfg.iterations_before_learning() == idle
    cfg.iterations = idle + 2
    run = Run(cfg, tmp_path / "run")
    trainer = run.runner.algorithm
    try:
        left = []
        for iteration in range(1, cfg.iterations + 1):
            left.append(trainer.iterations_before_update())  # the live count, from the steps and the buffer
            run.learn(until=iteration)
    finally:
        run.close()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["gradient_steps"] for r in records] == [0] * idle + [1, 1]
    assert left == [*range(idle, 0, -1), 0, 0]
