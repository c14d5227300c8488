"""Multi-process training: 2 gloo processes on the CPU (`torch.multiprocessing` spawn, `file://` rendezvous).

One spawn trains 2 iterations and then checks, on the same process group, parameter identity across ranks, the
host syncs of a minibatch update, the normalizer merge, the equivalence of one 2-rank update with a
single-process update on the combined rollout, and a 2-process resume. Another spawn kills a rank mid-training.
The command line (torchrun) is run once, end to end.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from distributed_workers import (
    ROLLOUT_FIELDS,
    WORLD,
    _dead_rank_worker,
    _disagreeing_worker,
    _two_rank_grid_worker,
    _two_rank_offpolicy_worker,
    _two_rank_rnd_worker,
    _two_rank_worker,
    equivalence_config,
    identity_order,
)

from conftest import update_stats
from syncfree.cli import main
from syncfree.envs.motion.sampler import AdaptiveSampler
from syncfree.policy.normalizer import RunningNorm
from syncfree.train import checkpoint
from syncfree.train.runner import Runner

pytestmark = pytest.mark.slow  # each test starts processes (seconds each)

TOLERANCE = 1e-5
"""Parameters after one 2-rank update vs one single-process update on the combined rollout (absolute)."""


def _reference_update(tmp: Path) -> dict:
    """Record a 32-env rollout, write it for the ranks, and update on it in this process."""
    torch.manual_seed(0)
    steps = [torch.randn(8, 32, 3) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([3.0, -20.0, 0.5])
             for _ in range(2)]
    torch.save({"obs": steps}, tmp / "normalizer.pt")
    norm, reference_norm = RunningNorm(3), []
    for part in steps:
        for step in part:
            norm.update(step)
        reference_norm.append((norm.count.clone(), norm.mean.clone(), norm.var.clone()))

    recorder = Runner(equivalence_config(32))
    with torch.inference_mode():
        for t in range(recorder.cfg.ppo.steps_per_env):
            recorder.rollout_step(t)
    rollout = {name: getattr(recorder.algorithm.storage, name).clone() for name in ROLLOUT_FIELDS}
    rollout["last_critic_obs"] = recorder.obs["critic"].clone()
    rollout["policy"] = recorder.policy.state_dict()
    torch.save(rollout, tmp / "rollout.pt")

    single = Runner(equivalence_config(32))
    single.policy.load_state_dict(rollout["policy"])
    for name in ROLLOUT_FIELDS:
        getattr(single.algorithm.storage, name).copy_(rollout[name])
    single.obs = {"critic": rollout["last_critic_obs"]}
    single.algorithm.minibatch_order = identity_order
    before = [p.detach().clone() for p in single.policy.parameters()]
    with torch.inference_mode():
        single.algorithm.compute_returns(single.obs)
    stats = update_stats(single)
    return {"normalizer": reference_norm, "advantages": single.algorithm.storage.advantages.clone(), "update_stats": stats,
            "updated": [p.detach().clone() for p in single.policy.parameters()],
            "before": before}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("two_ranks")
    reference = _reference_update(tmp)
    mp.start_processes(_two_rank_worker, args=(str(tmp),), nprocs=WORLD, start_method="spawn")
    ranks = [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    return {"tmp": tmp, "ranks": ranks, "reference": reference}


def test_parameters_stay_identical_across_ranks(two_ranks: dict) -> None:
    v0, v1 = two_ranks["ranks"][0]["vectors"]
    assert v0.numel() > 1000 and torch.equal(v0, v1)  # parameters, normalizers and Adam moments, bitwise


def test_a_two_process_checkpoint_resumes_on_two_processes(two_ranks: dict) -> None:
    r0, r1 = two_ranks["ranks"]
    assert r0["resumed_at"] == r1["resumed_at"] == 2
    assert torch.equal(*r0["resumed"]) and torch.equal(*r0["resumed_trained"])
    assert not torch.equal(r0["resumed"][0], r0["resumed_trained"][0])


def test_sampler_statistics_are_summed_over_ranks() -> None:
    """Two ranks' adaptive samplers, reduced through `end_iteration`'s `reduce`, draw from the distribution a
    single sampler holding both ranks' counts would: the sum of decayed counts is the decayed sum."""
    clip_length = torch.tensor([120, 80])
    samplers = [AdaptiveSampler(clip_length, 4, torch.Generator().manual_seed(r)) for r in range(3)]
    for _ in range(3):
        visits = [torch.rand(samplers[0].num_bins) * 50 for _ in range(2)]
        failures = [v * torch.rand_like(v) * 0.2 for v in visits]
        for r in range(2):
            samplers[r].visits += visits[r]
            samplers[r].failures += failures[r]
        samplers[2].visits += visits[0] + visits[1]
        samplers[2].failures += failures[0] + failures[1]
        stacks = [torch.stack((s.visits, s.failures)) for s in samplers[:2]]
        for r in range(2):
            samplers[r].update_probabilities(reduce=lambda t, other=stacks[1 - r]: t.add_(other))
        samplers[2].update_probabilities()
        for r in range(2):
            torch.testing.assert_close(samplers[r].probabilities, samplers[2].probabilities)


def test_only_rank_0_writes_and_steps_count_all_ranks(two_ranks: dict) -> None:
    tmp = two_ranks["tmp"]
    assert not (tmp / "run1").exists()
    lines = [json.loads(line) for line in (tmp / "run0" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in lines] == [1, 2, 3]
    assert lines[-1]["env_steps"] == 3 * WORLD * 32 * 8  # iterations x ranks x envs per rank x steps
    state = checkpoint.load(tmp / "run0" / "latest.pt")
    assert state["world_size"] == WORLD and state["num_envs"] == 32


def test_minibatch_update_is_one_collective_and_no_host_sync(two_ranks: dict) -> None:
    syncs, reads, sync_ops, all_reduces = two_ranks["ranks"][0]["update_counts"]
    assert (syncs, reads, sync_ops) == (0, {}, {})
    assert all_reduces == 1  # gradients and the KL in one flat buffer
    syncs, reads, sync_ops = two_ranks["ranks"][0]["iteration_syncs"]
    assert syncs == 1, (reads, sync_ops)  # the iteration's one host transfer, as in one process


def test_normalizer_merge_counts_every_sample_once(two_ranks: dict) -> None:
    for rank in two_ranks["ranks"]:
        for (count, mean, var), (ref_count, ref_mean, ref_var) in zip(rank["normalizer"],
                                                                       two_ranks["reference"]["normalizer"],
                                                                       strict=True):
            assert int(count) == int(ref_count)
            torch.testing.assert_close(mean, ref_mean, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(var, ref_var, rtol=1e-5, atol=1e-5)


def test_two_rank_update_equals_single_process_update_on_the_combined_rollout(two_ranks: dict) -> None:
    """Each rank holds half of the envs; with the identity sample order and minibatches of whole time steps,
    minibatch k of the single process is the union of the ranks' minibatches k. The two differ only in the
    order of floating-point sums (per-rank means averaged vs one mean; merged vs direct advantage statistics)."""
    ref, (r0, r1) = two_ranks["reference"], two_ranks["ranks"]
    torch.testing.assert_close(torch.cat((r0["advantages"], r1["advantages"]), dim=1), ref["advantages"],
                               rtol=0, atol=TOLERANCE)
    for a, b, single in zip(r0["updated"], r1["updated"], ref["updated"], strict=True):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, single, rtol=0, atol=TOLERANCE)
    moved = max((a - b).abs().max().item() for a, b in zip(ref["updated"], ref["before"], strict=True))
    assert moved > 100 * TOLERANCE  # the update did move the parameters
    torch.testing.assert_close(r0["update_stats"]["learning_rate"], ref["update_stats"]["learning_rate"])


def test_rnd_trains_on_two_ranks_with_its_gradients_averaged(tmp_path: Path) -> None:
    """RND with several processes: the random target, the predictor, its normalizers and Adam moments stay equal
    across ranks through training and a resume; one predictor step on each rank's half of a minibatch equals one
    step on the whole minibatch in one process (its gradients averaged over ranks)."""
    from syncfree.algo.rnd import RND
    from syncfree.algo.settings import RNDConfig
    from syncfree.config import PerfConfig

    obs = torch.randn(8, 4, generator=torch.Generator().manual_seed(3))
    torch.save(obs, tmp_path / "rnd_obs.pt")
    mp.start_processes(_two_rank_rnd_worker, args=(str(tmp_path),), nprocs=WORLD, start_method="spawn")
    r0, r1 = (torch.load(tmp_path / f"rnd_rank{r}.pt", weights_only=False) for r in range(WORLD))
    for key in ("rnd", "policy", "resumed_rnd"):
        v0, v1 = r0[key]
        assert v0.numel() > 100 and torch.equal(v0, v1), key
    for record in (r0["record"], r0["resumed_record"]):
        assert math.isfinite(record["rnd_loss"]) and record["rnd_reward"] > 0
    assert r0["resumed_record"]["iteration"] == 3 and not (tmp_path / "rnd1").exists()

    torch.manual_seed(0)
    single = RND(RNDConfig(enabled=True, weight=1.0, state_normalization=False), 4, 8, PerfConfig(compile="off"),
                 torch.device("cpu"))
    single.begin_update()
    single.train(obs)
    for rank in (r0, r1):
        assert rank["step_counts"] == (0, {}, 1), rank["step_counts"]  # one collective, no host read
        params, stats = rank["step"]
        for a, b in zip(params, single.module.predictor.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(stats, single.stats, rtol=1e-5, atol=1e-6)


def test_sac_and_td3_train_on_two_ranks_with_their_gradients_averaged(tmp_path: Path) -> None:
    """Each rank fills its own replay buffer and draws its own batches (they differ), the gradients are averaged
    (one collective per optimizer group that steps, no host read), so networks, targets, normalizers and every
    optimizer's moments stay bitwise equal across ranks."""
    mp.start_processes(_two_rank_offpolicy_worker, args=(str(tmp_path),), nprocs=WORLD, start_method="spawn")
    r0 = torch.load(tmp_path / "offpolicy_rank0.pt", weights_only=False)
    for algorithm, collectives in (("sac", 2 * 2), ("td3", 2 + 1)):  # TD3's actor steps on every second step
        start, after = r0[f"{algorithm}_start"], r0[f"{algorithm}_after"]
        assert torch.equal(*start) and torch.equal(*after), algorithm
        assert not torch.equal(start[0], after[0]), algorithm  # the two gradient steps moved them
        assert not torch.equal(*r0[f"{algorithm}_batch"]), algorithm  # each rank's own batch
        assert r0[f"{algorithm}_counts"] == (0, collectives), algorithm
        assert r0[f"{algorithm}_record"]["gradient_steps"] == 4
    assert not (tmp_path / "sac1").exists() and (tmp_path / "sac0" / "latest.pt").exists()


def test_the_recurrent_algorithm_trains_on_two_ranks(tmp_path: Path) -> None:
    """grid-arena on 2 gloo ranks: parameters and Adam moments stay bitwise equal across ranks (with the learning
    rate adapted per update on the ranks' mean KL), a minibatch is one all-reduce and no host read, an iteration one
    host read, agent steps count both ranks, only rank 0 writes, and the 2-process checkpoint resumes on 2
    processes."""
    pytest.importorskip("mettagrid")
    mp.start_processes(_two_rank_grid_worker, args=(str(tmp_path),), nprocs=WORLD, start_method="spawn")
    r0, r1 = (torch.load(tmp_path / f"grid_rank{r}.pt", weights_only=False) for r in range(WORLD))
    v0, v1 = r0["vectors"]
    assert v0.numel() > 1000 and torch.equal(v0, v1)
    assert torch.equal(*r0["after_counted"])
    assert r0["update_counts"] == r1["update_counts"] == (0, 1)
    assert r0["iteration_syncs"] == r1["iteration_syncs"] == 1
    assert r0["record"]["env_steps"] == 2 * WORLD * 8 * 8  # iterations x ranks x agents per rank x steps
    assert 0 <= r0["record"]["reward_per_agent_step"] <= 1
    assert r0["record"]["learning_rate"] == r1["record"]["learning_rate"] == pytest.approx(3e-3 / 1.5**2)
    assert not (tmp_path / "grid1").exists()
    assert checkpoint.load(tmp_path / "grid0" / "latest.pt")["world_size"] == WORLD
    assert r0["resumed_at"] == r1["resumed_at"] == 2 and torch.equal(*r0["resumed_trained"])


def test_a_dead_rank_makes_the_other_fail_with_a_clear_error(tmp_path: Path) -> None:
    context = mp.start_processes(_dead_rank_worker, args=(str(tmp_path),), nprocs=WORLD, join=False,
                                 start_method="spawn")
    start = time.monotonic()
    try:
        for process in context.processes:
            process.join(timeout=max(1.0, 60 - (time.monotonic() - start)))
        assert time.monotonic() - start < 60
        assert [p.exitcode for p in context.processes] == [0, 1]
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    seconds, outcome = (tmp_path / "rank0.txt").read_text().split("\n", 1)
    assert outcome.startswith("DistributedError: rank 0/2: gradient all-reduce failed"), outcome
    assert "peer process exited" in outcome and "timeout (30 s)" in outcome and "\n" not in outcome
    assert "Connection closed by peer" in outcome or "Connection reset" in outcome, outcome
    assert float(seconds) < 30  # the closed connection is noticed at once, not after the timeout


def test_torchrun_trains_and_resumes_across_world_sizes(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}",
           "-m", "syncfree", "train", "--task", "pendulum", "--iterations", "2", "--env.num_envs", "16",
           "--ppo.steps_per_env", "8", "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    # rank 0 only; torchrun sets OMP_NUM_THREADS=1 for its workers
    assert result.stderr.count("; on cpu, 1 thread (OMP_NUM_THREADS), ") == 1
    assert ": 2 ranks x 16 envs x 8 steps" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records] == [256, 512]

    # 2 -> 1: the trainer state continues in one process, an iteration now collects 16 x 8 env steps
    latest = tmp_path / "run" / "latest.pt"
    saved = checkpoint.load(latest)
    assert main(["train", "--resume", str(latest), "--resume_in_place", "true", "--iterations", "3",
                 "--log.progress", "false"]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["iteration"], r["env_steps"]) for r in records] == [(1, 256), (2, 512), (3, 640)]
    one = checkpoint.load(latest)
    assert one["world_size"] == 1 and not torch.equal(one["policy"]["actor.0.weight"], saved["policy"]["actor.0.weight"])

    # 1 -> 2: the single process's checkpoint goes on under torchrun
    resume = [*cmd[: cmd.index("train") + 1], "--resume", str(latest), "--resume_in_place", "true", "--iterations", "4",
              "--log.progress", "false"]
    result = subprocess.run(resume, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "written by 1 process, resumed by 2" in result.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["iteration"], r["env_steps"]) for r in records] == [(1, 256), (2, 512), (3, 640), (4, 896)]
    assert checkpoint.load(latest)["world_size"] == WORLD


def test_torchrun_trains_grid_arena(tmp_path: Path) -> None:
    """The recurrent algorithm from the command line on 2 ranks: each steps its own MettaGrid simulation, the
    agent steps are summed over ranks."""
    pytest.importorskip("mettagrid")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}",
           "-m", "syncfree", "train", "--task", "grid-arena", "--iterations", "2", "--env.num_envs", "1",
           "--ppo.steps_per_env", "16", "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.count("2 ranks x 4 agents (1 simulations x 4) x 16 steps") == 1, result.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records] == [128, 256]
    assert all(math.isfinite(r["surrogate_loss"]) for r in records)
    # 2 -> 1 with the recurrent algorithm: its trainer state continues in one process (4 agents x 16 steps more)
    assert main(["train", "--resume", str(tmp_path / "run" / "latest.pt"), "--resume_in_place", "true",
                 "--iterations", "3", "--log.progress", "false"]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records] == [128, 256, 320] and math.isfinite(records[-1]["surrogate_loss"])


def test_ranks_started_with_different_settings_stop_with_one_line(tmp_path: Path) -> None:
    mp.start_processes(_disagreeing_worker, args=(str(tmp_path),), nprocs=WORLD, join=True, start_method="spawn")
    outcomes = [(tmp_path / f"rank{rank}.txt").read_text() for rank in range(WORLD)]
    expected = ("UserError: ranks disagree: rank 1 has config.policy.actor_hidden=(16,), rank 0 has (32, 32); every "
                "rank must be started with the same settings")
    assert outcomes == [expected, expected]
