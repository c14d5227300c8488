"""The off-policy learners (`sac`, `td3`): TD3 learns pendulum; the replay buffer's n-step returns are the
discounted sums they claim; each off-policy switch computes what its conventional path computes (bitwise where the
arithmetic is the same, within float32 rounding where it is not) and saves what it says it saves (host reads,
allocations, ops); `save_buffer` resumes a run exactly; bad settings are one line."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest
import torch

from conftest import assert_same_state, assert_trains_as_shipped, straight_and_resumed, trained_host_reads
from syncfree.algo.offpolicy import OffPolicy, OffPolicyTrainConfig, soft_update
from syncfree.algo.replay import Batch, DeviceReplay, n_step_sums, n_step_sums_loop, replay_buffer
from syncfree.algo.td3 import TD3Config
from syncfree.bench.timing import count_iteration, warm_up
from syncfree.cli import main
from syncfree.config import PerfConfig
from syncfree.core.counters import Counts, count_syncs
from syncfree.errors import UserError
from syncfree.tasks import preset, with_algorithm
from syncfree.train import checkpoint
from syncfree.train.run import Run
from syncfree.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")

LEARNERS = ["sac", "td3"]


def small(algorithm: str, n_step: int = 1, iterations: int = 3, **perf: object) -> OffPolicyTrainConfig:
    """pendulum with 8 envs x 4 steps, 4 gradient steps of 32 from the second iteration on, MLPs of 32, `perf`
    given (compile off: these learners run eagerly)."""
    cfg = with_algorithm(preset("pendulum"), algorithm)
    assert isinstance(cfg, OffPolicyTrainConfig)
    cfg.seed, cfg.iterations, cfg.env.num_envs, cfg.log.progress = 3, iterations, 8, False
    cfg.env.max_episode_length = 10  # episodes end by time-out within the buffer
    cfg.policy = dataclasses.replace(cfg.policy, actor_hidden=[32, 32], critic_hidden=[32, 32])
    own = cfg.learner
    own.steps_per_env, own.updates_per_iteration, own.batch_size, own.learning_starts = 4, 4, 32, 32
    own.buffer_size, own.n_step = 512, n_step
    cfg.perf = PerfConfig(**{"compile": "off", **perf})
    return cfg


def trained(cfg: OffPolicyTrainConfig) -> tuple[Runner, list[dict]]:
    runner = Runner(cfg)
    records = [runner.learn(until=it) for it in range(1, cfg.iterations + 1)]
    return runner, records


def learner(runner: Runner) -> OffPolicy:
    algorithm = runner.algorithm
    assert isinstance(algorithm, OffPolicy)
    return algorithm


def assert_same_parameters(a: Runner, b: Runner) -> None:
    for (name, x), y in zip(a.policy.state_dict().items(), b.policy.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


def assert_close_parameters(a: Runner, b: Runner) -> None:
    for (name, x), y in zip(a.policy.state_dict().items(), b.policy.state_dict().values(), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, msg=name)


# -- TD3 --------------------------------------------------------------------------------------------------------

def test_td3_learns_pendulum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Pendulum's preset (256 envs) trained by TD3's defaults (3-step returns) for 150 iterations (153,600 env
    steps, 4,672 gradient steps of the critics): the deterministic actor's return rose from about -1,200 (untrained)
    to -251 on seed 0 (docs/off-policy.md)."""
    assert main(["train", "--task", "pendulum", "--algorithm", "td3", "--iterations", "150", "--log.dir",
                 str(tmp_path), "--log.run_name", "run", "--log.progress", "false"]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["gradient_steps"] for r in records) == (150 - 4) * 32  # none before 5,000 env steps
    assert all(math.isfinite(r["critic_loss"]) and math.isfinite(r["actor_loss"]) for r in records)
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run" / "latest.pt"), "--num_envs", "32"]) == 0
    out = capsys.readouterr().out
    assert float(out.split("mean return ")[1].split()[0]) > -600, out


def test_td3_delays_the_actor_and_moves_every_target_by_tau() -> None:
    runner, _ = trained(small("td3", iterations=2))
    td3 = learner(runner)
    assert td3.critic_steps % 2 == 0  # type: ignore[attr-defined]  # 4 so far
    actor, critics = [p.clone() for p in td3.policy.actor_params()], [p.clone() for p in td3.policy.critic_params()]
    targets = [p.clone() for p in td3.targets]
    td3.gradient_step()  # an odd step: the critics only
    assert all(torch.equal(a, p) for a, p in zip(actor, td3.policy.actor_params(), strict=True))
    assert all(torch.equal(a, t) for a, t in zip(targets, td3.targets, strict=True))
    assert not any(torch.equal(a, p) for a, p in zip(critics, td3.policy.critic_params(), strict=True))
    td3.gradient_step()  # an even one: the actor and every target (the critics' and the actor's) too
    assert not any(torch.equal(a, p) for a, p in zip(actor, td3.policy.actor_params(), strict=True))
    followed = td3.followed
    for before, target, source in zip(targets, td3.targets, followed, strict=True):
        torch.testing.assert_close(target, before + td3.cfg.tau * (source - before))


def mixed_noise(iterations: int = 2) -> OffPolicyTrainConfig:
    """`small`'s TD3 with FastTD3's mixed exploration noise: each env's standard deviation in [0.05, 0.4]."""
    cfg = small("td3", iterations=iterations)
    assert isinstance(cfg.learner, TD3Config)
    cfg.learner.exploration_noise, cfg.learner.exploration_noise_max = 0.05, 0.4
    return cfg


def test_td3_mixed_noise_gives_each_env_its_own_scale_drawn_again_when_its_episode_ends() -> None:
    """FastTD3's mixed noise: every env's standard deviation in the range and not all alike; a step redraws those of
    the envs whose episode ended (terminated or truncated) and keeps the others'; the exploring action is the actor's
    plus that env's noise. Without `exploration_noise_max` every env's is `exploration_noise`."""
    runner, _ = trained(mixed_noise())
    td3 = learner(runner)
    scales = td3.noise_scales.clone()  # type: ignore[attr-defined]
    assert scales.shape == (8, 1) and bool(((scales >= 0.05) & (scales <= 0.4)).all()) and scales.std() > 0
    ended = torch.tensor([True, False, False, True, False, False, False, False])
    with torch.no_grad():
        step = runner.env.step(td3.act(runner.obs, 0))
        step = step._replace(terminated=ended & torch.tensor([True] + [False] * 7),
                             truncated=ended & torch.tensor([False] * 3 + [True] + [False] * 4))
        td3.record(0, step)
        after = td3.noise_scales  # type: ignore[attr-defined]
        assert torch.equal(after[~ended], scales[~ended]) and not torch.equal(after[ended], scales[ended])
        assert bool(((after >= 0.05) & (after <= 0.4)).all())
        obs = td3.policy.actor_input(step.obs)
        torch.manual_seed(5)
        explored = td3.explore(obs)
        torch.manual_seed(5)
        expected = (td3.policy.unit_action(obs) + torch.randn(8, td3.policy.action_dim) * after).clamp(-1.0, 1.0)
    torch.testing.assert_close(explored, expected)
    plain = learner(trained(small("td3", iterations=1))[0])
    assert torch.equal(plain.noise_scales, torch.full((8, 1), 0.1))  # type: ignore[attr-defined]
    with pytest.raises(UserError, match=r"td3.exploration_noise_max=inf is invalid"):  # from Python, past the CLI
        TD3Config(exploration_noise_max=math.inf).validate()


def test_td3_mixed_noise_reads_the_host_never_per_step_and_resumes_exactly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The redraw is device ops (no host read, no allocation beyond the step's own); the scales ride in the
    checkpoint, so 2 + 1 iterations resumed give the scales and parameters of 3 in one run; a checkpoint without
    them (one noise for every env) or with scales outside the run's range resumes with fresh draws, said in a line."""
    plain_runner, mixed_runner = trained(small("td3", iterations=2))[0], trained(mixed_noise())[0]
    plain, mixed = rollout_step_counts(plain_runner), rollout_step_counts(mixed_runner)
    assert plain.syncs == mixed.syncs == 0
    assert mixed.allocations == plain.allocations, (mixed.allocations, plain.allocations)
    trainer, reads = trained_host_reads(mixed_noise(3))
    assert reads == (0, 0, 1) and learner(trainer).gradient_steps == 4

    def config(iterations: int) -> OffPolicyTrainConfig:
        cfg = mixed_noise(iterations)
        cfg.learner.save_buffer, cfg.save_every = True, 100
        return cfg

    straight, resumed, saved = straight_and_resumed(config, tmp_path / "split")
    assert "noise_scales" in saved["algorithm"]
    assert torch.equal(learner(straight).noise_scales, learner(resumed).noise_scales)  # type: ignore[attr-defined]
    assert_same_parameters(straight, resumed)
    caplog.set_level("INFO", logger="syncfree")
    without = {**saved["algorithm"]}
    del without["noise_scales"]
    for state in (without, {**saved["algorithm"], "noise_scales": torch.full((8, 1), 5.0)},
                  {**saved["algorithm"], "noise_scales": torch.full((8, 1), 0.2, dtype=torch.complex64)}):
        caplog.clear()
        fresh = Runner(config(3))
        drawn = learner(fresh).noise_scales.clone()  # type: ignore[attr-defined]
        fresh.algorithm.load_state_dict(state)
        assert torch.equal(learner(fresh).noise_scales, drawn)  # type: ignore[attr-defined]
        assert "td3: the run resumes with each env's exploration noise drawn afresh from [0.05, 0.4]" in caplog.text


@pytest.mark.parametrize("penalty", [0.0, 0.01])
@pytest.mark.parametrize("algorithm", LEARNERS)
def test_no_host_read_per_env_step_or_gradient_step(algorithm: str, penalty: float) -> None:
    cfg = small(algorithm)
    cfg.learner.pre_tanh_penalty = penalty
    trainer, reads = trained_host_reads(cfg)
    assert reads == (0, 0, 1)
    assert learner(trainer).gradient_steps == 4


@pytest.mark.parametrize(("extra", "says"), [
    (["--td3.policy_delay", "0"], "td3.policy_delay=0 is invalid"),
    (["--td3.noise_clip", "-1"], "td3.noise_clip=-1.0 is invalid"),
    (["--td3.pre_tanh_penalty", "-0.1"], "td3.pre_tanh_penalty=-0.1 is invalid"),
    (["--td3.pre_tanh_penalty", "inf"], "td3.pre_tanh_penalty='inf' is invalid"),
    (["--td3.n_step", "0"], "td3.n_step=0 is invalid"),
    (["--sac.policy_delay", "2"], "sac"),
    (["--task", "cartpole"], "algorithm=td3: task 'cartpole' has discrete actions"),
    (["--td3.num_atoms", "1"], "td3.num_atoms=1 is invalid"),
    (["--td3.v_min", "5", "--td3.v_max", "0"], "td3.v_max=0.0 is invalid"),
    (["--td3.critic", "c51"], "td3.critic"),
    (["--td3.n_step", "3", "--td3.buffer_size", "64", "--td3.batch_size", "60"],
     "td3.batch_size=60 is more than the 48 transitions a batch can draw"),
    (["--td3.exploration_noise", "0.2", "--td3.exploration_noise_max", "0.1"], "td3.exploration_noise_max=0.1 is "
                                                                               "invalid"),
])
def test_td3_bad_settings_are_one_line(extra: list[str], says: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--task", "pendulum", "--algorithm", "td3", "--env.num_envs", "8", "--iterations", "1",
                 "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false", *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "run").exists()


# -- the actor's pre-tanh penalty --------------------------------------------------------------------------------

def pre_tanh_after_steps(algorithm: str, penalty: float, steps: int = 300) -> torch.Tensor:
    """The actor's output before its tanh (SAC: the Gaussian's mean) on 64 observations after `steps` Adam steps of
    its loss (`pre_tanh_penalty=penalty`) against fixed linear critics whose Q is the sum of the action's
    components: they reward the ends of [-1, 1]. SAC's temperature is 1e-6, so that its entropy barely counts."""
    cfg = small(algorithm)
    cfg.learner.pre_tanh_penalty = penalty
    algo = learner(Runner(cfg))
    policy = algo.policy
    critic = torch.nn.Linear(policy.critic_obs_dim + policy.action_dim, 1).requires_grad_(False)
    policy.q1 = policy.q2 = critic
    with torch.no_grad():
        critic.weight.zero_()[:, -policy.action_dim:] = 1.0
        critic.bias.zero_()
        if algorithm == "sac":
            policy.log_alpha.fill_(math.log(1e-6))
    torch.manual_seed(0)
    obs = torch.randn(64, policy.actor_obs_dim)
    batch = Batch(obs={policy.actor_group: obs, algo.critic_group: obs}, actions=torch.empty(0),
                  returns=torch.empty(0), discounts=torch.empty(0), next_obs={})
    optimizer = torch.optim.Adam(policy.actor_params(), lr=1e-2)
    for _ in range(steps):
        loss = algo.actor_losses(batch)[0] if algorithm == "sac" else algo.actor_loss(batch)  # type: ignore[attr-defined]
        optimizer.zero_grad()
        loss.backward(inputs=policy.actor_params())
        optimizer.step()
    with torch.no_grad():
        return policy.mean_log_std(obs)[0] if algorithm == "sac" else policy.pre_tanh(obs)  # type: ignore[attr-defined]


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_the_pre_tanh_penalty_holds_the_actor_where_the_tanh_passes_gradient(algorithm: str) -> None:
    """Unpenalized, a critic that rewards the ends drives the actor's output before the tanh past 4, where the tanh
    passes under 0.2 % of its gradient (TD3's actor on g1-track: docs/off-policy.md); `pre_tanh_penalty=0.01` holds
    it near 2.24, where the critic's push (1 - tanh(u)^2) equals the penalty's pull (0.02 u), still moving
    toward the rewarded end."""
    free, held = pre_tanh_after_steps(algorithm, 0.0), pre_tanh_after_steps(algorithm, 0.01)
    assert float(free.abs().mean()) > 4.0
    assert float(held.min()) > 2.0 and float(held.max()) < 2.5


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_the_pre_tanh_penalty_adds_its_term_and_none_leaves_the_loss_as_it_is(algorithm: str) -> None:
    cfg = small(algorithm)
    algo = learner(Runner(cfg))
    loss, pre_tanh = torch.tensor(1.5), torch.tensor([[1.0, -2.0], [3.0, 0.0]])
    assert algo.penalized(loss, pre_tanh) is loss
    algo.cfg.pre_tanh_penalty = 0.1
    torch.testing.assert_close(algo.penalized(loss, pre_tanh), torch.tensor(1.5 + 0.1 * (5.0 + 9.0) / 2))


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_the_humanoid_presets_carry_the_penalty_and_the_others_leave_it_out(algorithm: str) -> None:
    """docs/off-policy.md: the g1-track and `mjlab:` presets (`humanoid_recipe`) set 0.01; the others keep CleanRL's
    loss."""
    from syncfree.tasks.configs import humanoid_recipe
    from syncfree.tasks.g1_track import G1TrackEnvConfig

    assert preset("g1-track", algorithm=algorithm).learner.pre_tanh_penalty == 0.01
    assert humanoid_recipe(algorithm, "mjlab:any", G1TrackEnvConfig(num_envs=8), 1, 64).learner.pre_tanh_penalty == 0.01
    for task in ("pendulum", "point-mass", "gym:Hopper-v5"):
        assert preset(task, algorithm=algorithm).learner.pre_tanh_penalty == 0.0, task


@pytest.mark.parametrize("key", ["pre_tanh_penalty", "exploration_noise", "policy_noise", "noise_clip"])
def test_a_noise_or_penalty_that_is_not_finite_is_refused_from_python_too(key: str) -> None:
    """The command line takes no `inf`; a config built in Python is checked the same way."""
    with pytest.raises(UserError, match=f"td3.{key}=inf is invalid"):
        TD3Config(**{key: math.inf}).validate("td3")


# -- n-step returns ---------------------------------------------------------------------------------------------

def test_n_step_sums_stop_at_the_episode_end_and_bootstrap_from_the_last_step() -> None:
    gamma = 0.5
    rewards = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [1.0, 2.0, 4.0]])
    done = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    terminated = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    # row 0: all three steps, the last terminated; row 1: two, terminated; row 2: one, a time-out; row 3: two, a
    # time-out at the second (its third step, of the next episode, is not summed)
    returns = torch.tensor([1 + 0.5 * 2 + 0.25 * 4, 1 + 0.5 * 2, 1.0, 1 + 0.5 * 2])
    discounts = torch.tensor([0.0, 0.0, 0.5, 0.25])
    last = torch.tensor([2, 1, 0, 1])
    for sums in (n_step_sums, n_step_sums_loop):
        got = sums(rewards, done, terminated, gamma)
        torch.testing.assert_close(got[0], returns)
        torch.testing.assert_close(got[1], discounts)
        assert torch.equal(got[2], last)


def filled_buffer(on_device: bool, n_step: int, vectorized: bool = True, envs: int = 4) -> DeviceReplay:
    """A ring of 6 slots x `envs` written 9 times (it wrapped), rewards numbering the steps, every third step a
    time-out and every fifth terminated."""
    buffer = replay_buffer(on_device, {"policy": 2}, 1, envs, 6 * envs, 16, n_step, 0.9, torch.device("cpu"),
                           vectorized)
    for t in range(9):
        obs = {"policy": torch.full((envs, 2), float(t))}
        buffer.write_obs(obs, torch.full((envs, 1), t / 8))  # an action in [-1, 1], as a rollout writes
        buffer.write_step(torch.full((envs,), float(t)), torch.full((envs,), t % 5 == 4),
                          torch.full((envs,), t % 3 == 2), {"policy": torch.full((envs, 2), t + 0.5)})
    return buffer


@pytest.mark.parametrize("on_device", [True, False])
def test_a_batch_is_drawn_from_the_written_steps_and_its_n_step_return_is_theirs(on_device: bool) -> None:
    torch.manual_seed(0)
    buffer = filled_buffer(on_device, n_step=3)
    assert buffer.filled == 6 and buffer.position == 3 and buffer.sampleable() == 4 * 4
    batch = buffer.sample()
    steps = batch.obs["policy"][:, 0]
    assert set(steps.tolist()) <= {3.0, 4.0, 5.0, 6.0}  # the oldest four slots: the newest two lack later steps
    for t, ret, discount, bootstrap in zip(steps.tolist(), batch.returns.tolist(), batch.discounts.tolist(),
                                           batch.next_obs["policy"][:, 0].tolist(), strict=True):
        total, k = 0.0, 0
        while True:  # the rewards are the step numbers; a step ends the sum when done or the n-th
            total += 0.9 ** k * (t + k)
            end = (t + k) % 3 == 2 or (t + k) % 5 == 4
            if end or k == 2:
                break
            k += 1
        assert ret == pytest.approx(total) and bootstrap == t + k + 0.5
        assert discount == pytest.approx(0.0 if (t + k) % 5 == 4 else 0.9 ** (k + 1))


# -- switches: on == off ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", LEARNERS)
@pytest.mark.parametrize("n_step", [1, 3])
def test_replay_on_device_is_bitwise_equivalent(algorithm: str, n_step: int) -> None:
    """The host buffer draws its indices from torch's CPU generator, as the device buffer does on the CPU: the same
    batches, the same run."""
    on, on_records = trained(small(algorithm, n_step, replay_on_device=True))
    off, off_records = trained(small(algorithm, n_step, replay_on_device=False))
    assert_same_parameters(on, off)
    assert learner(on).gradient_steps == 4
    drop = ("steps_per_s", "iteration_seconds")
    assert [{k: v for k, v in r.items() if k not in drop} for r in on_records] == \
           [{k: v for k, v in r.items() if k not in drop} for r in off_records]


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_device_loss_stats_is_bitwise_equivalent_in_training_and_close_in_its_means(algorithm: str) -> None:
    on, on_records = trained(small(algorithm, device_loss_stats=True))
    off, off_records = trained(small(algorithm, device_loss_stats=False))
    assert_same_parameters(on, off)
    for a, b in zip(on_records, off_records, strict=True):
        for name in learner(on).stat_names:  # float32 device sums against float64 host sums
            assert a[name] == pytest.approx(b[name], rel=1e-5, abs=1e-6), name


@pytest.mark.parametrize("algorithm", LEARNERS)
@pytest.mark.parametrize("switch", ["vectorized_n_step", "fused_target_update"])
def test_switch_agrees_within_float32_rounding(algorithm: str, switch: str) -> None:
    """The n-step sums in another order; lerp rounding once where `tau * p + (1 - tau) * t` rounds three times."""
    on, _ = trained(small(algorithm, n_step=3, **{switch: True}))
    off, _ = trained(small(algorithm, n_step=3, **{switch: False}))
    assert_close_parameters(on, off)


def test_the_soft_updates_agree_within_float32_rounding() -> None:
    torch.manual_seed(0)
    sources = [torch.randn(64, 32), torch.randn(32)]
    fused, loop = [torch.randn(64, 32), torch.randn(32)], []
    loop = [t.clone() for t in fused]
    soft_update(fused, sources, 0.005, fused=True)
    soft_update(loop, sources, 0.005, fused=False)
    for a, b in zip(fused, loop, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


# -- switches: effects ------------------------------------------------------------------------------------------

def count(fn, times: int = 1) -> Counts:
    with count_syncs() as counts:
        for _ in range(times):
            fn()
    return counts


def rollout_step_counts(runner: Runner, steps: int = 4) -> Counts:
    with torch.inference_mode(), count_syncs() as counts:
        for t in range(steps):
            runner.rollout_step(t)
    return counts


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_replay_on_device_reads_and_allocates_nothing_per_step_or_sample(algorithm: str) -> None:
    """On: the rollout step's buffer writes and a batch's draw and gathers read the host 0 times and allocate
    nothing (the ring and the batch are preallocated). Off: every tensor of a step is copied to the host (2 groups,
    the actions, the reward, 2 flags x 2 and the 2 next groups: 9 reads or more), and a batch is indexed there and
    copied in."""
    on, _ = trained(small(algorithm, replay_on_device=True, iterations=2))
    off, _ = trained(small(algorithm, replay_on_device=False, iterations=2))
    on_step, off_step = rollout_step_counts(on), rollout_step_counts(off)
    assert on_step.syncs == 0, on_step.host_reads
    assert off_step.syncs >= 9 * 4, off_step.host_reads
    buffer = learner(on).buffer
    flags = torch.zeros(8, dtype=torch.bool)  # as the env gives them
    writes = count(lambda: (buffer.write_obs(on.obs, buffer.actions[0]),
                            buffer.write_step(buffer.rewards[0], flags, flags, on.obs)))
    assert writes.allocations == 0 and writes.syncs == 0, writes.ops
    sample = count(buffer.sample, 3)
    assert sample.allocations == 0 and sample.syncs == 0, sample.ops
    host_sample = count(learner(off).buffer.sample, 3)
    # a batch's tensors made from NumPy arrays: 2 groups, actions, rewards, flags and 2 next groups, each sample
    assert host_sample.syncs >= 3 and host_sample.ops["aten::lift_fresh"] == 3 * 7, host_sample


def test_vectorized_n_step_dispatches_the_same_ops_whatever_n() -> None:
    """One gather of the `n` steps and one masked sum: a batch of a run's buffer takes as many ops with n = 5 as with
    n = 2. Off, the loop's ops grow with `n`."""
    def ops(n_step: int, vectorized: bool) -> int:
        runner, _ = trained(small("td3", n_step, iterations=2, vectorized_n_step=vectorized))
        return count(learner(runner).buffer.sample).num_ops

    assert ops(2, True) == ops(5, True)
    assert ops(5, False) > ops(2, False) > ops(2, True)


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_fused_target_update_runs_one_kernel_for_every_target(algorithm: str) -> None:
    """On: one `_foreach_lerp_` for all the target parameters. Off: CleanRL's four ops per parameter."""
    for fused in (True, False):
        runner = Runner(small(algorithm, fused_target_update=fused))
        algo = learner(runner)
        counts = count(algo.soft_update)
        if fused:
            assert counts.ops == {"aten::_foreach_lerp_": 1}, counts.ops
        else:
            assert counts.num_ops >= 3 * len(algo.targets) and "aten::_foreach_lerp_" not in counts.ops


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_device_loss_stats_reads_no_statistic_per_gradient_step(algorithm: str) -> None:
    assert_statistics_unread_per_gradient_step(algorithm)


def assert_statistics_unread_per_gradient_step(algorithm: str) -> None:
    """`device_loss_stats` on: 0 host reads in a gradient step. Off: each statistic the learner logs read with
    `.item()` (also run by the switch's effect test, `test_switch_effects.py`)."""
    for on in (True, False):
        runner, _ = trained(small(algorithm, iterations=2, device_loss_stats=on))
        algo = learner(runner)
        counts = count(algo.gradient_step, 2)
        expected = {} if on else {"item": 2 * len(algo.stat_names)}
        assert dict(counts.host_reads) == expected and counts.sync_ops.total() == 0, counts.host_reads


# -- checkpoints ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", LEARNERS)
def test_save_buffer_resumes_exactly(algorithm: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """With the buffer in the checkpoint, 2 + 2 iterations give the parameters of 4 in one run, bit for bit."""
    section = f"--{algorithm}."
    args = ["--task", "pendulum", "--algorithm", algorithm, "--env.num_envs", "8", "--log.dir", str(tmp_path),
            "--log.progress", "false", "--perf.compile", "off", f"{section}learning_starts", "32",
            f"{section}batch_size", "32", f"{section}updates_per_iteration", "2", f"{section}buffer_size", "256",
            f"{section}save_buffer", "true", f"{section}n_step", "2"]
    assert main(["train", *args, "--iterations", "4", "--log.run_name", "whole"]) == 0
    assert main(["train", *args, "--iterations", "2", "--log.run_name", "half"]) == 0
    caplog.set_level("INFO", logger="syncfree")
    assert main(["train", "--resume", str(tmp_path / "half" / "latest.pt"), "--iterations", "4",
                 "--log.run_name", "resumed", "--log.progress", "false"]) == 0
    assert "resumes with the checkpoint's replay buffer (64 transitions)" in caplog.text
    whole, resumed = (checkpoint.load(tmp_path / run / "latest.pt") for run in ("whole", "resumed"))
    assert_same_state(whole["policy"], resumed["policy"], "policy")
    assert_same_state(whole["algorithm"], resumed["algorithm"], "algorithm")  # the optimizers and the buffer


# -- optimizers --------------------------------------------------------------------------------------------------

def resumable(algorithm: str, optimizer: str, iterations: int) -> OffPolicyTrainConfig:
    """`small` with `optimizer` for the actor and the critics, the buffer saved, one checkpoint at the end."""
    cfg = small(algorithm, n_step=2, iterations=iterations)
    cfg.learner.optimizer, cfg.learner.save_buffer, cfg.save_every = optimizer, True, 100
    return cfg


@pytest.mark.parametrize("optimizer", ["adamw", "muon", "schedule_free_adamw"])
@pytest.mark.parametrize("algorithm", LEARNERS)
def test_each_optimizer_trains_without_host_reads_saves_its_state_and_resumes_exactly(
        algorithm: str, optimizer: str, tmp_path: Path) -> None:
    """2 + 1 iterations resumed from a checkpoint give the parameters and optimizer state of 3 in one run, bit for
    bit; then an iteration reads the host once, never per env step or gradient step. SAC's temperature stays on
    Adam."""
    straight, second, saved = straight_and_resumed(lambda n: resumable(algorithm, optimizer, n), tmp_path / "split")
    actor_state = saved["algorithm"]["actor_optimizer"]
    kind = {"adamw": "exp_avg", "muon": "momentum_buffer", "schedule_free_adamw": "z"}[optimizer]
    assert kind in actor_state["state"][0]
    assert actor_state["param_groups"][-1]["weight_decay"] == (0.01 if optimizer == "adamw" else 0.0)
    if algorithm == "sac":
        assert type(learner(straight).alpha_optimizer) is torch.optim.Adam
    if optimizer == "schedule_free_adamw":  # the policy saved is the average, the acting weights ride along
        assert not torch.equal(saved["policy"]["actor.2.weight"], saved["algorithm"]["acting_weights"][2])
    assert_same_parameters(straight, second)
    assert_same_state(straight.algorithm.state_dict(), second.algorithm.state_dict(), "algorithm")
    reads = count_iteration(second)
    assert (reads["syncs_per_step"], reads["syncs_per_minibatch"], reads["syncs_per_iteration"]) == (0, 0, 1)
    assert learner(second).gradient_steps == 4


def test_a_checkpoint_of_another_optimizer_and_muon_without_hidden_matrices_are_one_line(tmp_path: Path) -> None:
    run = Run(resumable("td3", "muon", 1), tmp_path / "muon")
    run.learn()
    run.close()
    saved = checkpoint.load(tmp_path / "muon" / "latest.pt")
    with pytest.raises(UserError, match=re.escape("its optimizer state is td3.optimizer=muon's but this run has "
                                                  "td3.optimizer=adam; resume with td3.optimizer=muon")):
        Runner(resumable("td3", "adam", 1)).load_state_dict(saved)
    cfg = resumable("sac", "muon", 1)
    cfg.policy.actor_hidden = [32]
    with pytest.raises(UserError, match=re.escape("sac.optimizer='muon' is invalid here: the actor has no hidden")):
        Runner(cfg)


# -- perf.compile ------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.usefixtures("compile_enabled")
@pytest.mark.parametrize("algorithm", LEARNERS)
def test_compiled_losses_match_eager_and_compile_once(algorithm: str) -> None:
    """`perf.compile=hot`: the critics' loss and the actor's (each forward with its backward) are whole graphs; with
    inductor drawing random numbers as eager code does, two iterations train the parameters eager ones train,
    within float32 rounding, and a third compiles nothing more."""
    import torch._inductor.config as inductor_config

    from syncfree.core.compile import compile_counts

    runners = []
    with inductor_config.patch(fallback_random=True):
        for mode in ("off", "hot"):
            runner, _ = trained(small(algorithm, n_step=3, iterations=2, compile=mode))
            runners.append(runner)
        eager, compiled = runners
        for (name, x), y in zip(eager.policy.state_dict().items(), compiled.policy.state_dict().values(), strict=True):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, msg=name)
        assert learner(compiled)._critic_loss is not learner(compiled).critic_loss  # the compiled wrapper runs
        warm = compile_counts()
        compiled.cfg.iterations = 3
        compiled.learn()
    assert compile_counts() == warm


def profiled_names(fn) -> Counter:
    """Every event `fn` profiles, by name (aten ops, autograd's backward functions, `Optimizer.step` calls)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()
    return Counter(event.name for event in profile.events())


def with_variant(cfg: OffPolicyTrainConfig, variant: str) -> OffPolicyTrainConfig:
    """`small`'s config, or with distributional critics, a cosine schedule, AdamW and the pre-tanh penalty
    (`variant="distributional"`), or with the hidden layers in bfloat16 (`"bf16"`: `perf.autocast=bf16`)."""
    if variant == "distributional":
        own = cfg.learner
        own.critic, own.v_min, own.v_max, own.schedule, own.optimizer = "distributional", -400.0, 0.0, "cosine", "adamw"
        own.pre_tanh_penalty = 0.01
    if variant == "bf16":
        cfg.perf = dataclasses.replace(cfg.perf, autocast="bf16")
    return cfg


@pytest.mark.parametrize("variant", ["scalar", "distributional", "bf16"])
@pytest.mark.parametrize("algorithm", LEARNERS)
def test_compile_step_trains_as_the_conventional_step_without_its_backward_and_optimizer_calls(algorithm: str,
                                                                                               variant: str) -> None:
    """`compile=step` (run eagerly here, compiled below): each gradient step is one function of device tensors, its
    gradients from `torch.func` and its Adam(W) steps written out (`syncfree.algo.offpolicy_step`). Three iterations
    train the parameters and the optimizers' moments and step counts the conventional step (`.backward()`, torch's
    optimizers) trains, within float32 rounding (the same formulas in another order), with 0 host reads per gradient
    step; and its gradient steps call no optimizer's `step`, run no fused Adam kernel and leave every `.grad` unset,
    where the conventional step does all three at every step. Also with distributional critics, the learning rates
    on a cosine schedule (set per update from the host), AdamW's weight decay and the pre-tanh penalty; and with the
    hidden layers in bfloat16 (`perf.autocast=bf16`, which `auto` picks for large layers on a CPU with native
    bfloat16): the whole step runs them in bfloat16 too (with float32 layers its parameters end 7e-4 to 2e-3 away, far outside the
    tolerance)."""
    eager, _ = trained(with_variant(small(algorithm, n_step=3), variant))
    whole, _ = trained(with_variant(small(algorithm, n_step=3, compile="step"), variant))
    assert learner(eager)._whole_step is None and learner(whole)._whole_step is not None
    for (name, x), y in zip(eager.policy.state_dict().items(), whole.policy.state_dict().values(), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6, msg=name)
    for name, optimizer in learner(eager).named_optimizers().items():
        other = learner(whole).named_optimizers()[name]
        for a, b in zip(optimizer.state.values(), other.state.values(), strict=True):
            for key in ("step", "exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(a[key], b[key].reshape(a[key].shape), rtol=1e-5, atol=1e-6, msg=key)
    names = {mode: profiled_names(lambda r=r: [learner(r).gradient_step() for _ in range(2)])
             for mode, r in (("conventional", eager), ("whole", whole))}

    def optimizer_work(seen: Counter) -> int:
        return sum(n for name, n in seen.items() if "Optimizer.step" in name or name.startswith("aten::_fused_adam"))

    assert optimizer_work(names["conventional"]) >= 4, names["conventional"]
    assert optimizer_work(names["whole"]) == 0, names["whole"]
    assert any(p.grad is not None for p in eager.policy.parameters())
    assert all(p.grad is None for p in whole.policy.parameters())
    counts = count(learner(whole).gradient_step, 2)
    assert not counts.host_reads and counts.sync_ops.total() == 0, counts.host_reads


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_compile_step_resumes_exactly(algorithm: str, tmp_path: Path) -> None:
    """Under `compile=step` 2 + 1 iterations resumed from a checkpoint (the buffer in it) give the parameters and
    optimizer state of 3 in one run, bit for bit: the whole step takes the loaded optimizers' state, not the one it
    was built with."""
    def config(iterations: int) -> OffPolicyTrainConfig:
        cfg = resumable(algorithm, "adam", iterations)
        cfg.perf.compile = "step"
        return cfg

    straight, second, _ = straight_and_resumed(config, tmp_path / "split")
    assert learner(second)._whole_step is not None
    assert_same_parameters(straight, second)
    assert_same_state(straight.algorithm.state_dict(), second.algorithm.state_dict(), "algorithm")


@pytest.mark.parametrize(("optimizer", "reason"), [("muon", "sac.optimizer=muon"),
                                                   ("schedule_free_adamw", "sac.optimizer=schedule_free_adamw")])
def test_compile_step_says_in_one_line_when_the_step_cannot_be_one_graph(optimizer: str, reason: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="syncfree")
    cfg = small("sac", compile="step")
    cfg.learner.optimizer = optimizer
    runner = Runner(cfg)
    assert learner(runner)._whole_step is None
    lines = [r.getMessage() for r in caplog.records if "perf.compile=step" in r.getMessage()]
    assert lines == [f"perf.compile=step: sac's gradient step is compiled as with perf.compile=hot ({reason}: the "
                     "whole-step graph steps adam and adamw only)"]
    cfg = small("td3", compile="step", device_loss_stats=False)
    assert learner(Runner(cfg))._whole_step is None


@pytest.mark.slow
@pytest.mark.usefixtures("compile_enabled")
@pytest.mark.parametrize("algorithm", LEARNERS)
def test_compiled_whole_step_matches_eager_compiles_once_and_leaves_little_outside_its_graph(algorithm: str) -> None:
    """`compile=step` compiled: with inductor drawing random numbers as eager code does, two iterations train what
    eager ones train (within float32 rounding); a third compiles nothing more (SAC's step one graph, TD3's two: the
    critics' step alone, and with the actor's); and outside its graph a gradient step dispatches only the ops of
    drawing its batch, where `hot`'s also run their optimizer steps, backward calls and soft update eagerly."""
    import torch._inductor.config as inductor_config

    from conftest import ops_outside_graphs
    from syncfree.core.compile import compile_counts

    with inductor_config.patch(fallback_random=True):
        runners = {mode: trained(small(algorithm, n_step=3, iterations=2, compile=mode))[0]
                   for mode in ("off", "step", "hot")}
        assert learner(runners["step"])._whole_step is not None
        assert_close_parameters(runners["off"], runners["step"])
        warm = compile_counts()
        runners["step"].cfg.iterations = 3
        runners["step"].learn()
        assert compile_counts() == warm
        outside = {mode: ops_outside_graphs(lambda r=runners[mode]: [learner(r).gradient_step() for _ in range(2)])
                   for mode in ("hot", "step")}
        outside["draws"] = ops_outside_graphs(lambda: [learner(runners["step"]).sample_batch() for _ in range(2)])
    assert outside["step"] == outside["draws"] and outside["hot"] >= 2 * outside["draws"], outside


# -- perf.autocast -----------------------------------------------------------------------------------------------

def linear_outputs(policy: torch.nn.Module) -> tuple[Counter, list]:
    """Forward hooks on every linear layer of `policy`'s MLPs: (whether it is its MLP's output layer, the dtype it
    gave) per call, and the hooks (to remove)."""
    from syncfree.policy.actor_critic import MLP

    seen: Counter = Counter()
    hooks = []
    for mlp in (m for m in policy.modules() if isinstance(m, MLP)):
        layers = [layer for layer in mlp if isinstance(layer, torch.nn.Linear)]
        for layer in layers:
            last = layer is layers[-1]
            hooks.append(layer.register_forward_hook(
                lambda module, args, out, last=last: seen.update([(last, out.dtype)])))
    return seen, hooks


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_autocast_runs_a_gradient_steps_hidden_layers_in_bfloat16_and_steps_as_float32_does(algorithm: str) -> None:
    """`perf.autocast=bf16` on the actor and the twin critics (and their targets): in a gradient step every hidden
    layer gives bfloat16 and every output layer float32 (off: all float32), the parameters and their moments stay
    float32; one gradient step on the same batch from the same state moves every parameter tensor the way float32's
    step does (cosine > 0.95) and gives losses within 5 %."""
    runners = []
    for autocast in ("off", "bf16"):
        cfg = small(algorithm, iterations=1, autocast=autocast)
        cfg.learner.learning_starts = 10**6  # no gradient step in the iteration: its random actions fill the buffer
        runner = Runner(cfg)
        runner.learn(until=1)  # the same transitions in both
        runners.append(runner)
    full, half = runners
    assert_same_state(learner(full).storage_tensors(), learner(half).storage_tensors())
    assert_same_state(full.policy.state_dict(), half.policy.state_dict())
    before = {name: p.detach().clone() for name, p in full.policy.named_parameters()}
    stats, outputs = [], []
    for runner in runners:
        seen, hooks = linear_outputs(runner.policy)
        torch.manual_seed(5)  # the same batch, the same noises
        learner(runner).stats.zero_()
        learner(runner).gradient_step()
        for hook in hooks:
            hook.remove()
        stats.append(learner(runner).stats.clone())
        outputs.append(seen)
    assert set(outputs[0]) == {(False, torch.float32), (True, torch.float32)}
    assert set(outputs[1]) == {(False, torch.bfloat16), (True, torch.float32)}
    assert sum(outputs[0].values()) == sum(outputs[1].values())  # the same layers ran
    assert all(p.dtype == torch.float32 for p in half.policy.parameters())
    for optimizer in learner(half).optimizers():
        assert all(t.dtype == torch.float32 for state in optimizer.state.values() for t in state.values()
                   if isinstance(t, torch.Tensor) and t.is_floating_point())
    torch.testing.assert_close(stats[1], stats[0], rtol=5e-2, atol=1e-2)
    moved = 0
    for name, p in half.policy.named_parameters():
        step_full, step_half = full.policy.get_parameter(name) - before[name], p.detach() - before[name]
        if step_full.abs().max() > 0:
            cosine = torch.nn.functional.cosine_similarity(step_full.flatten(), step_half.flatten(), dim=0)
            assert cosine > 0.95, (name, cosine)
            moved += 1
    assert moved >= 12  # the actor's and both critics' layers (three each, weights and biases), at least


def test_a_saved_buffer_out_of_range_is_refused() -> None:
    buffer = filled_buffer(True, n_step=2)
    state = buffer.state_dict()
    for bad in ({"position": buffer.slots}, {"filled": -1}, {"position": "3"}, {"tensors": "x"}):
        with pytest.raises(ValueError):
            buffer.load_state_dict({**state, **bad})
    buffer.load_state_dict(state)  # its own state loads
    assert (buffer.position, buffer.filled) == (state["position"], state["filled"])


@pytest.mark.parametrize("index, value, says", [(-1, -3.0, "done flags"), (-2, 7.0, "terminated flags"),
                                                (-4, 50.0, "actions outside [-1, 1]")])
def test_a_saved_buffer_of_flags_or_actions_no_rollout_writes_is_refused(index: int, value: float,
                                                                        says: str) -> None:
    """The n-step sums index by the done flags: a crafted checkpoint's -3 would fail deep inside a gradient step,
    its 7 or its actions of 50 would train on what no rollout wrote; each is refused, the buffer left as it was."""
    buffer = filled_buffer(True, n_step=2)
    state = buffer.state_dict()
    tensors = [t.clone() for t in state["tensors"]]
    tensors[index][0, 0] = value
    before = [t.clone() for t in buffer.tensors()]
    with pytest.raises(ValueError, match=re.escape(says)):
        buffer.load_state_dict({**state, "tensors": tensors})
    assert all(torch.equal(a, b) for a, b in zip(before, buffer.tensors(), strict=True))


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_save_buffer_may_change_on_resume(algorithm: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A run resumed with `save_buffer` turned on starts an empty buffer and saves it from then on; turned off, it
    leaves the checkpoint's buffer unread (its size may then change) and saves none."""
    section = f"--{algorithm}."
    args = ["--task", "pendulum", "--algorithm", algorithm, "--env.num_envs", "8", "--log.dir", str(tmp_path),
            "--log.progress", "false", f"{section}learning_starts", "32", f"{section}batch_size", "32",
            f"{section}updates_per_iteration", "2", f"{section}buffer_size", "256"]
    caplog.set_level("INFO", logger="syncfree")
    assert main(["train", *args, "--iterations", "2", "--log.run_name", "without"]) == 0
    assert main(["train", "--resume", str(tmp_path / "without" / "latest.pt"), "--iterations", "3",
                 f"{section}save_buffer", "true", "--log.run_name", "on", "--log.progress", "false"]) == 0
    assert "empty replay buffer (the checkpoint does not hold it; this run's checkpoints will)" in caplog.text
    assert "replay_buffer" in checkpoint.load(tmp_path / "on" / "latest.pt")["algorithm"]
    assert main(["train", "--resume", str(tmp_path / "on" / "latest.pt"), "--iterations", "4", f"{section}save_buffer",
                 "false", f"{section}buffer_size", "512", "--log.run_name", "off", "--log.progress", "false"]) == 0
    assert f"empty replay buffer (--{algorithm}.save_buffer false: the checkpoint's is not read)" in caplog.text
    assert "replay_buffer" not in checkpoint.load(tmp_path / "off" / "latest.pt")["algorithm"]


@pytest.mark.parametrize("extra, says", [
    (["--sac.learning_starts", "100000"], "its 96 env steps stay below sac.learning_starts=100,000"),
    (["--sac.batch_size", "256", "--sac.buffer_size", "4096"],
     "its buffer holds 80 transitions to draw by then, fewer than sac.batch_size=256"),
])
def test_a_run_that_would_never_take_a_gradient_step_says_so(extra: list[str], says: str, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="syncfree")
    assert main(["train", "--task", "pendulum", "--algorithm", "sac", "--env.num_envs", "8", "--iterations", "3",
                 "--sac.steps_per_env", "4", "--sac.n_step", "3", "--sac.learning_starts", "0", "--log.dir",
                 str(tmp_path), "--log.progress", "false", *extra]) == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in warned if m.startswith("sac: no gradient step in the 3 iterations the run has left: " + says)]
    records = [json.loads(line) for line in next(tmp_path.glob("*/metrics.jsonl")).read_text().splitlines()]
    assert [r["gradient_steps"] for r in records] == [0, 0, 0]


def test_a_run_that_trains_is_not_warned(caplog: pytest.LogCaptureFixture) -> None:
    """Where the run's iterations reach `learning_starts` and a batch, the start-up lines say nothing of it."""
    from syncfree.train.run import start

    caplog.set_level("INFO", logger="syncfree")
    run = start(small("sac", iterations=2), None)  # 2 x 4 steps of 8 envs: 64 env steps and transitions, batch 32
    run.close()
    assert "training pendulum with SAC" in caplog.text and "no gradient step" not in caplog.text
    caplog.clear()
    run = start(small("sac", iterations=1), None)  # 32 env steps, 32 transitions: learning_starts 32 is reached
    run.close()
    assert "training pendulum with SAC" in caplog.text and "no gradient step" not in caplog.text


# -- presets ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", LEARNERS)
def test_a_task_with_a_preset_for_the_algorithm_starts_from_it(algorithm: str) -> None:
    """`--algorithm sac` on point-mass starts from point-mass's SAC preset (its env count, batch and iterations);
    on a task without one (cartpole-continuous), from the PPO preset's shared settings; the Python API agrees."""
    from syncfree.api import configured
    from syncfree.train.arguments import parse_train_config

    cfg = parse_train_config(["--task", "point-mass", "--algorithm", algorithm])
    assert isinstance(cfg, OffPolicyTrainConfig) and cfg.algorithm == algorithm
    own = preset("point-mass", algorithm=algorithm)
    assert isinstance(own, OffPolicyTrainConfig)
    ppo = preset("point-mass")
    assert (cfg.env.num_envs, cfg.iterations, cfg.learner.batch_size) == (own.env.num_envs, own.iterations,
                                                                          own.learner.batch_size)
    assert (cfg.env.num_envs, cfg.iterations) != (ppo.env.num_envs, ppo.iterations)
    assert configured("point-mass", None, {"algorithm": algorithm}) == cfg
    converted = parse_train_config(["--task", "cartpole-continuous", "--algorithm", algorithm])
    base = preset("cartpole-continuous")
    assert isinstance(converted, OffPolicyTrainConfig)
    assert (converted.env.num_envs, converted.iterations, converted.learner.gamma) == (
        base.env.num_envs, base.iterations, base.ppo.gamma)  # type: ignore[attr-defined]


@pytest.mark.parametrize("task", ["pendulum", "point-mass", "gym:Pendulum-v1", "g1-track"])
@pytest.mark.parametrize("algorithm", LEARNERS)
def test_every_off_policy_preset_trains(task: str, algorithm: str, tmp_path: Path) -> None:
    """Each SAC and TD3 preset validates and trains (shrunk to 4 iterations of 4 envs, batches of 8 from a buffer of
    64, its other settings kept)."""
    if task.startswith("gym:"):
        pytest.importorskip("gymnasium")
    args = ["train", "--task", task, "--algorithm", algorithm, "--env.num_envs", "4", "--iterations", "4",
            f"--{algorithm}.learning_starts", "4", f"--{algorithm}.batch_size", "8", f"--{algorithm}.buffer_size",
            "64", f"--{algorithm}.updates_per_iteration", "2", "--log.dir", str(tmp_path), "--log.run_name", "run",
            "--log.progress", "false"]
    assert main(args) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["gradient_steps"] == 2


@pytest.mark.parametrize("task", ["pendulum", "point-mass", "gym:Hopper-v5", "g1-track"])
@pytest.mark.parametrize("algorithm", LEARNERS)
def test_every_off_policy_preset_takes_gradient_steps_as_shipped(task: str, algorithm: str) -> None:
    """The presets unchanged (their env count, buffer and batch): a run of one takes gradient steps (one whose
    batch a full buffer cannot hold is refused at the start)."""
    if task.startswith("gym:"):
        pytest.importorskip("gymnasium")
    assert_trains_as_shipped(preset(task, algorithm=algorithm))


def test_a_task_cannot_give_its_own_algorithm_a_second_preset() -> None:
    from syncfree.tasks import get_task

    spec = get_task("pendulum")
    with pytest.raises(ValueError, match="its own algorithm 'ppo' takes the default preset"):
        dataclasses.replace(spec, algorithm_presets={"ppo": spec.presets["default"]})


# -- distributional critics -------------------------------------------------------------------------------------

def projected_by_loop(probs: torch.Tensor, values: torch.Tensor, support: tuple[float, float, int]) -> torch.Tensor:
    """C51's projection written out mass by mass (the paper's Algorithm 1), in float64."""
    v_min, v_max, k = support
    delta = (v_max - v_min) / (k - 1)
    out = torch.zeros(probs.shape, dtype=torch.float64)
    for i in range(probs.shape[0]):
        for j in range(k):
            b = (min(max(float(values[i, j]), v_min), v_max) - v_min) / delta
            low, high = math.floor(b), math.ceil(b)
            p = float(probs[i, j])
            if low == high:
                out[i, low] += p
            else:
                out[i, low] += p * (high - b)
                out[i, high] += p * (b - low)
    return out


def test_the_projection_is_c51s_keeping_mass_and_mean_inside_the_support() -> None:
    from syncfree.algo.offpolicy import project_onto_atoms

    support = (-10.0, 10.0, 11)
    atoms = torch.linspace(*support)
    gen = torch.Generator().manual_seed(0)
    probs = torch.rand(6, 11, generator=gen).softmax(-1)
    returns = torch.tensor([0.3, -1.7, 4.0, 0.0, 25.0, -3.0])  # one atom exactly, one far above the support
    discounts = torch.tensor([0.9, 0.81, 0.0, 1.0, 0.9, 0.5])
    values = returns[:, None] + discounts[:, None] * atoms
    projected = project_onto_atoms(probs, values, support)
    torch.testing.assert_close(projected.double(), projected_by_loop(probs, values, support), rtol=0, atol=1e-6)
    torch.testing.assert_close(projected.sum(-1), torch.ones(6))
    inside = ((values >= -10) & (values <= 10)).all(-1)
    assert inside.tolist() == [True, True, True, True, False, True]
    torch.testing.assert_close((projected @ atoms)[inside], (probs * values).sum(-1)[inside], rtol=0, atol=1e-5)
    assert projected[4, -1] == pytest.approx(1.0)  # above the support: all at its top atom
    assert projected[2, 7] == pytest.approx(1.0)  # terminated (discount 0) at a return of 4: the atom 4


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_distributional_critics_train_without_a_host_read_and_their_q_is_the_mean(algorithm: str,
                                                                                   tmp_path: Path) -> None:
    cfg = small(algorithm)
    cfg.learner.critic, cfg.learner.num_atoms, cfg.learner.v_min, cfg.learner.v_max = "distributional", 21, -100, 0
    trainer, reads = trained_host_reads(cfg)
    assert reads == (0, 0, 1)
    policy = learner(trainer).policy
    assert policy.q1[-1].out_features == 21
    obs, actions = torch.randn(5, policy.critic_obs_dim), torch.rand(5, policy.action_dim) * 2 - 1
    logits = policy.q_logits(obs, actions)
    for q, z in zip(policy.q_values(obs, actions), logits, strict=True):
        torch.testing.assert_close(q, (z.softmax(-1) * torch.linspace(-100, 0, 21)).sum(-1))
    record = trainer.iterate()
    assert math.isfinite(record["critic_loss"]) and -100 <= record["q_mean"] <= 0
    own = f"--{algorithm}."
    assert main(["train", "--task", "pendulum", "--algorithm", algorithm, "--env.num_envs", "4", "--iterations", "2",
                 f"{own}critic", "distributional", f"{own}learning_starts", "4", f"{own}batch_size", "8",
                 "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false"]) == 0
    checkpoint_path = str(tmp_path / "run" / "latest.pt")
    assert main(["eval", checkpoint_path, "--num_envs", "2"]) == 0  # the checkpoint rebuilds the critics' atoms
    assert main(["train", "--resume", checkpoint_path, "--iterations", "3", "--log.run_name", "resumed",
                 "--log.progress", "false"]) == 0


@pytest.mark.parametrize("algorithm", LEARNERS)
@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_a_schedule_sets_both_rates_from_the_host_along_the_run(algorithm: str, schedule: str) -> None:
    cfg = small(algorithm, iterations=4)
    own = cfg.learner
    own.schedule, own.final_learning_rate_fraction = schedule, 0.2
    trainer, reads = trained_host_reads(cfg, iterations=3)
    assert reads == (0, 0, 1)
    progress = [0, 0.25, 0.5, 0.75]  # the iteration's place in the run when it updates (the 4th was counted)
    expected = [0.2 + 0.8 * (1 - p) if schedule == "linear" else 0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * p))
                for p in progress]
    optimizers = learner(trainer).named_optimizers()
    assert optimizers["actor_optimizer"].param_groups[0]["lr"] == pytest.approx(own.actor_learning_rate * expected[-1])
    assert optimizers["critic_optimizer"].param_groups[0]["lr"] == pytest.approx(
        own.critic_learning_rate * expected[-1])
    assert learner(trainer).learning_rate == pytest.approx(own.critic_learning_rate * expected[-1])
    if algorithm == "sac":  # the temperature keeps its rate
        assert optimizers["alpha_optimizer"].param_groups[0]["lr"] == own.alpha_learning_rate  # type: ignore[attr-defined]


@pytest.mark.parametrize("on_device", [True, False])
def test_a_buffer_larger_than_the_memory_available_is_one_line_before_it_is_allocated(
        on_device: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import syncfree.algo.offpolicy as offpolicy
    from syncfree.algo.replay import ring_bytes

    dims = {"policy": 3, "critic": 5}
    ring = replay_buffer(on_device, dims, 2, 8, 100, 4, 3, 0.9, torch.device("cpu"))
    assert sum(t.numel() * t.element_size() for t in ring.tensors()) == ring_bytes(dims, 2, 8, 100, 3)
    monkeypatch.setattr(offpolicy, "available_memory", lambda: 2**25)
    code = main(["train", "--task", "pendulum", "--algorithm", "sac", "--env.num_envs", "8", "--iterations", "1",
                 "--perf.replay_on_device", str(on_device).lower(), "--log.dir", str(tmp_path), "--log.run_name",
                 "run", "--log.progress", "false"])  # 1M transitions of 16 floats: 61 MiB
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "sac.buffer_size=1,000,000 needs 61 MiB of host memory" in err and "32 MiB available" in err, err


def test_a_distributional_or_schedule_setting_without_its_feature_is_said(caplog: pytest.LogCaptureFixture) -> None:
    from syncfree.algo.scope import warn_inert_switches
    from syncfree.tasks import switch_scope

    cfg = small("sac")
    cfg.learner.v_min, cfg.learner.final_learning_rate_fraction = -400.0, 0.1
    with caplog.at_level("WARNING", logger="syncfree"):
        named = warn_inert_switches(cfg, switch_scope(cfg), preset("pendulum", algorithm="sac"))
    assert named == ["sac.v_min", "sac.final_learning_rate_fraction"]
    assert "sac.v_min=-400.0 changes nothing: sac.critic is scalar" in caplog.text
    cfg.learner.critic, cfg.learner.schedule = "distributional", "cosine"
    assert warn_inert_switches(cfg, switch_scope(cfg), preset("pendulum", algorithm="sac")) == []


# -- action bounds ----------------------------------------------------------------------------------------------

def bounded_pendulum(cfg: OffPolicyTrainConfig, low: float | None, high: float | None) -> tuple[object, list]:
    """The config's pendulum envs declaring `[low, high]` as their action bounds (None: declaring none), and the
    actions each step takes, as the env got them."""
    from syncfree.tasks import make_task_env

    env = make_task_env(cfg, cfg.env.num_envs, torch.device("cpu"), cfg.seed)
    if low is not None:
        env.action_bounds = (torch.tensor([low]), torch.tensor([high]))
    taken: list[torch.Tensor] = []
    step = env.step

    def recording(actions: torch.Tensor):  # type: ignore[no-untyped-def]
        taken.append(actions.clone())
        return step(actions)

    env.step = recording
    return env, taken


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_the_env_takes_actions_mapped_onto_its_declared_bounds_and_the_buffer_keeps_them_in_unit_range(
        algorithm: str) -> None:
    """Random warm-up and the actor's actions alike reach the env mapped from [-1, 1] onto [-0.5, 0.25]; the buffer
    (and the critics, and the noises) keep [-1, 1]; evaluation and the exported actor act in the env's range."""
    cfg = small(algorithm)
    cfg.learner.action_bounds = "env"
    env, taken = bounded_pendulum(cfg, -0.5, 0.25)
    runner = Runner(cfg, env)
    checked = len(taken)  # the env's check, before training, steps it with zeros
    runner.learn()
    actions = torch.stack(taken[checked:])  # [steps, envs, 1]: the first iteration random, then the actor's
    assert actions.min() >= -0.5 and actions.max() <= 0.25
    assert actions[:4].min() < -0.4 and actions[:4].max() > 0.15 and actions[4:].std() > 0.01
    stored = learner(runner).buffer.actions[: len(actions)]
    assert stored.min() >= -1.0 and stored.max() <= 1.0
    torch.testing.assert_close(actions, -0.125 + 0.375 * stored)
    policy = runner.policy
    obs = torch.randn(64, policy.actor_obs_dim) * 3
    with torch.no_grad():
        acted = policy.act_deterministic(obs)
        assert acted.min() >= -0.5 and acted.max() <= 0.25
        torch.testing.assert_close(policy.deployment(64).graphs[0].module(obs), acted)


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_bounds_of_minus_one_to_one_and_unit_bounds_train_bitwise_as_no_bounds(algorithm: str) -> None:
    """The map is the identity on [-1, 1] (no rounding), and `action_bounds=unit`, the default, ignores the env's
    bounds."""
    runs = []
    for low, high, bounds in ((None, None, "env"), (-1.0, 1.0, "env"), (-0.5, 0.25, "unit"), (-0.5, 0.25, None)):
        cfg = small(algorithm)
        if bounds is not None:
            cfg.learner.action_bounds = bounds
        runner = Runner(cfg, bounded_pendulum(cfg, low, high)[0])
        runner.learn()
        runs.append(runner)
    assert learner(runs[1])._env_actions is not None
    assert learner(runs[2])._env_actions is None and learner(runs[3])._env_actions is None
    for run in runs[1:]:
        assert_same_parameters(runs[0], run)


def test_a_policys_bounds_come_back_from_its_state_and_older_states_act_in_unit_range() -> None:
    """A policy rebuilt from a checkpoint's shape (no env) takes the bounds from the saved state; a state saved
    before policies kept bounds loads as [-1, 1]."""
    from syncfree.algo.sac import SAC
    from syncfree.train.evaluate import CheckpointShape

    cfg = small("sac")
    cfg.learner.action_bounds = "env"
    env, _ = bounded_pendulum(cfg, -0.5, 0.25)
    trained_policy = SAC.build_policy(cfg, env)
    state = trained_policy.state_dict()
    shape = CheckpointShape(dict(env.obs_shapes), env.action_spec)
    rebuilt = SAC.build_policy(cfg, shape)
    assert torch.equal(rebuilt.action_scale, torch.ones(1))
    rebuilt.load_state_dict(state)
    assert torch.equal(rebuilt.action_scale, torch.tensor([0.375]))
    assert torch.equal(rebuilt.action_bias, torch.tensor([-0.125]))
    older = {k: v for k, v in state.items() if k not in ("action_scale", "action_bias")}
    rebuilt.load_state_dict(older)
    assert torch.equal(rebuilt.action_scale, torch.ones(1)) and torch.equal(rebuilt.action_bias, torch.zeros(1))


@pytest.mark.parametrize("bounds", [((0.5,), (0.5,)), ((0.0, 1.0), (1.0, 2.0)), ((float("-inf"),), (1.0,))])
def test_bad_action_bounds_are_one_line(bounds: tuple) -> None:
    cfg = small("td3")
    cfg.learner.action_bounds = "env"
    env, _ = bounded_pendulum(cfg, None, None)
    env.action_bounds = tuple(torch.tensor(b) for b in bounds)
    with pytest.raises(UserError, match=r"^env: action_bounds must be two finite tensors of 1 values"):
        Runner(cfg, env)


def test_g1_tracks_bounds_are_its_joint_limits_as_actions() -> None:
    from syncfree.tasks import make_task_env

    cfg = preset("g1-track")
    env = make_task_env(cfg, 2, torch.device("cpu"), 0)
    low, high = env.action_bounds
    lower, upper = (limit.to(torch.float32) for limit in (env.robot.joint_lower, env.robot.joint_upper))
    limited = torch.isfinite(lower) & torch.isfinite(upper)
    default, scale = env.default_joint_pos, env.action.scale
    torch.testing.assert_close((default + scale * low)[limited], lower[limited])
    torch.testing.assert_close((default + scale * high)[limited], upper[limited])
    assert bool(limited.any()) and bool((low < 0).all() and (high > 0).all())


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_symmetric_bounds_keep_zero_at_zero_and_reach_the_farther_bound(algorithm: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """`symmetric` (FastSAC's joint-limit-aware bounds): declared [-0.5, 0.25], the env takes `0.5 x` the actor's
    [-1, 1], 0 stays 0 (the default pose), the random warm-up reaches past the nearer bound; on g1-track the map's
    scale is each joint's farther limit from its default pose, in actions, and its bias 0."""
    from syncfree.tasks import make_task_env

    cfg = small(algorithm)
    cfg.learner.action_bounds = "symmetric"
    env, taken = bounded_pendulum(cfg, -0.5, 0.25)
    runner = Runner(cfg, env)
    checked = len(taken)
    runner.learn()
    actions = torch.stack(taken[checked:])
    stored = learner(runner).buffer.actions[: len(actions)]
    torch.testing.assert_close(actions, 0.5 * stored, rtol=0, atol=0)
    assert actions[:4].max() > 0.3 and actions.min() >= -0.5 and actions.max() <= 0.5
    assert torch.equal(runner.policy.action_bias, torch.zeros(1))

    plain = small(algorithm)  # an env declaring no bounds: [-1, 1], said in one line
    plain.learner.action_bounds = "symmetric"
    with caplog.at_level(logging.WARNING, logger="syncfree"):
        unbounded = Runner(plain)
    assert learner(unbounded)._env_actions is None
    assert f"{algorithm}.action_bounds=symmetric: the env declares no action bounds" in caplog.text

    g1 = with_algorithm(preset("g1-track"), algorithm)
    g1.learner.action_bounds = "symmetric"
    low, high = make_task_env(g1, 2, torch.device("cpu"), 0).action_bounds
    policy = type(learner(runner)).build_policy(g1, make_task_env(g1, 2, torch.device("cpu"), 0))
    torch.testing.assert_close(policy.action_scale, torch.maximum(-low, high))
    assert torch.equal(policy.action_bias, torch.zeros_like(low))


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_the_map_onto_the_bounds_costs_one_op_per_step_and_no_allocation_or_host_read(algorithm: str) -> None:
    counts = []
    for low, high in ((None, None), (-0.5, 0.25)):
        cfg = small(algorithm, iterations=2)
        cfg.learner.action_bounds = "env"
        runner = Runner(cfg, bounded_pendulum(cfg, low, high)[0])
        runner.learn()
        counts.append(rollout_step_counts(runner))
    plain, bounded = counts
    assert bounded.syncs == plain.syncs == 0
    assert bounded.allocations == plain.allocations, (bounded.allocations, plain.allocations)
    extra = {op: n - plain.ops.get(op, 0) for op, n in bounded.ops.items() if n != plain.ops.get(op, 0)}
    assert extra == {"aten::addcmul": 4}, extra  # one per step of the 4


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_the_bench_warms_a_learner_up_until_it_has_taken_gradient_steps(algorithm: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A batch of 64 with 3-step returns needs 64 + 2 x 8 rows: the third iteration of 8 envs x 4 steps is the first
    to train, so the bench's one warm-up iteration becomes three, and its timed iterations all train."""
    cfg = small(algorithm, n_step=3, iterations=10)
    cfg.learner.batch_size, cfg.learner.learning_starts = 64, 0
    runner = Runner(cfg)
    warm_up(runner, 0)
    assert runner.iteration == 0
    with caplog.at_level(logging.INFO, logger="syncfree"):
        warm_up(runner, 1)
    assert (runner.iteration, runner.algorithm.updated(), learner(runner).gradient_steps) == (3, True, 4)
    assert "bench: no gradient step in 1 warm-up iteration(s)" in caplog.text
    warm_up(runner, 1)  # already training: one iteration, as asked
    assert runner.iteration == 4
    ppo = Runner(dataclasses.replace(preset("pendulum"), iterations=10))
    ppo.cfg.log.progress = False
    warm_up(ppo, 1)
    assert ppo.iteration == 1 and ppo.algorithm.updated()


def test_the_bench_reports_gradient_steps_per_second_beside_env_steps(tmp_path: Path) -> None:
    """Each configuration's gradient steps/s: its `updates_per_iteration` over its median timed iteration (the
    timings its env steps/s come from); the report says them."""
    settings = {"sac.learning_starts": 0, "sac.batch_size": 32, "sac.updates_per_iteration": 3,
                "sac.buffer_size": 1024}
    assert main(["bench", "--task", "pendulum", "--algorithm", "sac", "--num_envs", "[4]", "--repeats", "2",
                 "--iterations", "1", "--min_seconds", "0", "--compile", "false", "--threads", "1",
                 "--settings", json.dumps(settings), "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    size = result["sizes"][0]
    for config in size["configs"].values():
        assert config["gradient_steps_per_s"] == pytest.approx(3 / statistics.median(config["seconds_per_iteration"]))
    from syncfree.bench.report import _fmt

    optimized = size["configs"]["optimized"]["gradient_steps_per_s"]
    baseline = size["configs"]["baseline"]["gradient_steps_per_s"]
    assert f"update): optimized {_fmt(optimized)}, baseline {_fmt(baseline)}." in (tmp_path / "results.md").read_text()


def test_td3_eval_sample_says_it_plays_the_deterministic_actor_and_a_resume_keeps_its_algorithm(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--task", "pendulum", "--algorithm", "td3", "--env.num_envs", "4", "--iterations", "1",
                 "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false"]) == 0
    capsys.readouterr()
    latest = str(tmp_path / "run" / "latest.pt")
    assert main(["eval", latest, "--num_envs", "2", "--sample"]) == 0
    out = capsys.readouterr().out
    assert "deterministic actions (td3's actor draws none: --sample changes nothing)" in out, out
    assert main(["eval", latest, "--num_envs", "2"]) == 0
    returns = re.compile(r"mean return \S+ ± \S+")
    assert returns.findall(out) == returns.findall(capsys.readouterr().out) != []  # the same returns either way
    code = main(["train", "--resume", latest, "--algorithm", "sac", "--iterations", "2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (f"syncfree: error: resume: {latest} was trained with td3; a resumed run keeps its "
                                 "algorithm (drop algorithm='sac', or train a new run with it)")


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_a_resume_keeps_the_runs_own_optimizer_options(algorithm: str, tmp_path: Path) -> None:
    """The optimizers' options (learning rate, betas, eps, the fused kernel) are the run's config's, whatever the
    checkpoint holds: its moments are loaded, checked; its options would reach Adam's kernel unchecked."""
    first = Run(small(algorithm, iterations=2), tmp_path / "run")
    first.learn()
    first.close()
    state = checkpoint.load(tmp_path / "run" / "latest.pt")
    for name in ("actor_optimizer", "critic_optimizer"):
        state["algorithm"][name]["param_groups"][0].update(lr="corrupt", betas=(-1.0, 2.0), eps="x")
    again = Run(small(algorithm, iterations=3), None)
    again.runner.load_state_dict(state)
    fresh = Run(small(algorithm, iterations=3), None)
    for name, optimizer in learner(again.runner).named_optimizers().items():
        own = learner(fresh.runner).named_optimizers()[name].param_groups
        assert [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups] == \
            [{k: v for k, v in g.items() if k != "params"} for g in own], name
    again.learn()  # the moments loaded, the steps taken with the run's options
    for run in (again, fresh):
        run.close()
