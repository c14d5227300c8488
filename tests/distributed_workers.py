"""Code run in the spawned processes of `test_distributed.py` (a module of its own, so that spawn can import it
whichever way pytest imported the test file)."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from conftest import small_config, update_stats
from syncfree.algo.storage import Batch
from syncfree.core.counters import count_syncs
from syncfree.errors import DistributedError, UserError
from syncfree.policy.normalizer import RunningNorm
from syncfree.train import checkpoint
from syncfree.train.distributed import Distributed, NormalizerSync
from syncfree.train.run import Run
from syncfree.train.runner import Runner

WORLD = 2
ROLLOUT_FIELDS = ("actor_obs", "critic_obs", "actions", "log_probs", "values", "dist_params", "rewards", "dones")


def equivalence_config(num_envs: int):
    """8 steps x 2 minibatches: a minibatch is 4 whole time steps of every env, on one rank or on two."""
    cfg = small_config("pendulum")
    cfg.env.num_envs = num_envs
    cfg.ppo.num_epochs, cfg.ppo.num_minibatches = 2, 2
    return cfg


def identity_order(batch_size: int) -> torch.Tensor:
    return torch.arange(batch_size)


def _join(tmp: str, rank: int, timeout: float) -> None:
    torch.set_num_threads(1)  # as torchrun does: 2 processes on 2 cores
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=timeout))


def _policy_vector(trainer: Runner) -> torch.Tensor:
    """Parameters, buffers and optimizer moments, flattened (float64 holds the int64 counts exactly)."""
    tensors = [*trainer.policy.parameters(), *trainer.policy.buffers()]
    for state in trainer.algorithm.optim.optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return torch.cat([t.detach().reshape(-1).double() for t in tensors])


def _gather(x: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.zeros_like(x) for _ in range(WORLD)]
    dist.all_gather(out, x)
    return out


def _two_rank_worker(rank: int, tmp: str) -> None:
    _join(tmp, rank, timeout=60)
    out: dict = {}
    try:
        # 1. train 2 iterations; both ranks are given a run folder, only rank 0 may write one
        cfg = small_config("pendulum")
        cfg.iterations = 2
        trainer = Run(cfg, Path(tmp) / f"run{rank}")
        out["record"] = trainer.learn()
        out["vectors"] = _gather(_policy_vector(trainer.runner))

        # 2. host syncs: one minibatch update (a collective) and one more iteration
        mb = Batch(*(x[:64] for x in trainer.runner.algorithm.storage.flat()))
        with count_syncs() as update:
            trainer.runner.algorithm.minibatch_update(mb)
        trainer.cfg.iterations, trainer.run_dir = 3, None  # a third iteration, logged but not saved
        with count_syncs() as iteration:
            trainer.learn()
        trainer.close()
        out["update_counts"] = (update.syncs, dict(update.host_reads), dict(update.sync_ops),
                                update.ops["c10d::allreduce_"])
        out["iteration_syncs"] = (iteration.syncs, dict(iteration.host_reads), dict(iteration.sync_ops))

        # 3. normalizer merge over two "iterations" of 8 steps: rank r sees rows [16r, 16r + 16) of each step
        data = torch.load(Path(tmp) / "normalizer.pt")
        norm = RunningNorm(3)
        sync = NormalizerSync([norm], Distributed.current())
        merged = []
        for part in data["obs"]:
            for step in part:
                norm.update(step[16 * rank : 16 * rank + 16])
            sync.merge()
            merged.append((norm.count.clone(), norm.mean.clone(), norm.var.clone()))
        out["normalizer"] = merged

        # 4. one update from stored rollouts: rank r holds envs [16r, 16r + 16) of the combined 32-env rollout
        rollout = torch.load(Path(tmp) / "rollout.pt")
        trainer = Runner(equivalence_config(16))
        trainer.policy.load_state_dict(rollout["policy"])
        envs = slice(16 * rank, 16 * rank + 16)
        for name in ROLLOUT_FIELDS:
            getattr(trainer.algorithm.storage, name).copy_(rollout[name][:, envs])
        trainer.obs = {"critic": rollout["last_critic_obs"][envs]}
        trainer.algorithm.minibatch_order = identity_order
        with torch.inference_mode():
            trainer.algorithm.compute_returns(trainer.obs)
        stats = update_stats(trainer)
        out["advantages"] = trainer.algorithm.storage.advantages.clone()
        out["update_stats"] = stats
        out["updated"] = [p.detach().clone() for p in trainer.policy.parameters()]

        # 5. resume the 2-process checkpoint of step 1 on both ranks, then train a third iteration
        cfg = small_config("pendulum")
        cfg.iterations = 3
        resumed = Runner(cfg)
        resumed.load_state_dict(checkpoint.load(Path(tmp) / "run0" / "latest.pt"))
        out["resumed_at"] = resumed.iteration
        out["resumed"] = _gather(_policy_vector(resumed))
        resumed.learn()
        out["resumed_trained"] = _gather(_policy_vector(resumed))
    finally:
        torch.save(out, Path(tmp) / f"rank{rank}.pt")
        dist.destroy_process_group()


def _dead_rank_worker(rank: int, tmp: str) -> None:
    _join(tmp, rank, timeout=30)
    cfg = small_config("pendulum")
    cfg.iterations = 100
    trainer = Runner(cfg, dist=Distributed.current(timeout=30))
    if rank == 1:
        end_iteration = trainer.env.end_iteration

        def die_in_iteration_2(*args, **kwargs):
            if trainer.iteration == 1:
                os._exit(1)
            return end_iteration(*args, **kwargs)

        trainer.env.end_iteration = die_in_iteration_2
    start = time.monotonic()
    try:
        trainer.learn()
        outcome = "finished"
    except DistributedError as e:
        outcome = f"DistributedError: {e}"
    except Exception as e:
        outcome = f"{type(e).__name__}: {e}"
    (Path(tmp) / f"rank{rank}.txt").write_text(f"{time.monotonic() - start:.1f}\n{outcome}")
    dist.destroy_process_group()  # as the command line does on its way out


def _disagreeing_worker(rank: int, tmp: str) -> None:
    """Rank 1 is started with other network sizes: both ranks stop with the same line before any collective of
    the policy."""
    _join(tmp, rank, timeout=30)
    cfg = small_config("pendulum")
    if rank == 1:
        cfg.policy.actor_hidden = [16]
    try:
        Runner(cfg, dist=Distributed.current(timeout=30))
        outcome = "started"
    except UserError as e:
        outcome = f"UserError: {e}"
    except Exception as e:
        outcome = f"{type(e).__name__}: {e}"
    (Path(tmp) / f"rank{rank}.txt").write_text(outcome)
    dist.destroy_process_group()


def grid_config(iterations: int):
    """The recurrent algorithm on 2 MettaGrid simulations x 4 agents per rank, 8 steps in rows of 4; the learning
    rate adapted once per update, divided by 1.5 each time (the ranks must agree on the update's KL)."""
    import dataclasses

    from syncfree.tasks import preset

    cfg = preset("grid-arena")
    cfg.seed, cfg.iterations, cfg.log.progress = 5, iterations, False
    cfg.env.num_envs, cfg.env.max_steps = 2, 16
    cfg.policy.recurrent = dataclasses.replace(cfg.policy.recurrent, hidden=16, embed_dim=8, encoder_hidden=16)
    cfg.ppo = dataclasses.replace(cfg.ppo, steps_per_env=8, bptt_horizon=4, num_epochs=2, num_minibatches=2,
                                  schedule="adaptive", kl_adapt_every="update", desired_kl=1e-9)
    return cfg


def _two_rank_grid_worker(rank: int, tmp: str) -> None:
    """The recurrent algorithm on 2 ranks: 2 iterations, then one minibatch and one iteration counted, then a
    resume of the 2-process checkpoint."""
    _join(tmp, rank, timeout=60)
    out: dict = {}
    try:
        trainer = Run(grid_config(2), Path(tmp) / f"grid{rank}")
        out["record"] = trainer.learn()
        out["vectors"] = _gather(_policy_vector(trainer.runner))
        algorithm = trainer.runner.algorithm
        batch = algorithm.minibatch(0, algorithm.buffer.segments // 2, 1.0)
        with count_syncs() as update:
            loss, _, kl_mean = algorithm.minibatch_loss(batch)
            algorithm.optim.zero_grad()
            loss.backward()
            algorithm.optim.step(kl_mean)
        out["update_counts"] = (update.syncs, update.ops["c10d::allreduce_"])
        trainer.cfg.iterations, trainer.run_dir = 3, None
        with count_syncs() as iteration:
            trainer.learn()
        out["iteration_syncs"] = iteration.syncs
        out["after_counted"] = _gather(_policy_vector(trainer.runner))
        trainer.close()
        resumed = Runner(grid_config(3))
        resumed.load_state_dict(checkpoint.load(Path(tmp) / "grid0" / "latest.pt"))
        out["resumed_at"] = resumed.iteration
        resumed.learn()
        out["resumed_trained"] = _gather(_policy_vector(resumed))
        resumed.close()
    finally:
        torch.save(out, Path(tmp) / f"grid_rank{rank}.pt")
        dist.destroy_process_group()


def rnd_config(iterations: int):
    """point-mass-goal with RND (state and reward normalization on, the weight annealed), 16 envs a rank."""
    import dataclasses

    cfg = small_config("point-mass-goal")
    cfg.iterations, cfg.env.num_envs = iterations, 16
    cfg.rnd = dataclasses.replace(cfg.rnd, enabled=True, weight=0.5, weight_schedule="linear", final_step=1000,
                                  num_outputs=8, predictor_hidden=[16], target_hidden=[16], state_normalization=True,
                                  reward_normalization=True)
    return cfg


def _rnd_vector(trainer: Runner) -> torch.Tensor:
    """The RND networks, normalizers (not the per-env discounted sums: each rank's own envs) and Adam moments."""
    rnd = trainer.algorithm.rnd
    tensors = [t for name, t in rnd.module.state_dict().items() if not name.endswith("discounted")]
    for state in rnd.optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return torch.cat([t.detach().reshape(-1).double() for t in tensors])


def _two_rank_rnd_worker(rank: int, tmp: str) -> None:
    """RND on 2 ranks: 2 iterations, a resume of the 2-process checkpoint and one more; then one predictor step on
    each rank's half of a minibatch (gradients averaged over ranks)."""
    from syncfree.algo.rnd import RND
    from syncfree.algo.settings import RNDConfig
    from syncfree.config import PerfConfig

    _join(tmp, rank, timeout=60)
    out: dict = {}
    try:
        trainer = Run(rnd_config(2), Path(tmp) / f"rnd{rank}")
        out["record"] = trainer.learn()
        out["rnd"] = _gather(_rnd_vector(trainer.runner))
        out["policy"] = _gather(_policy_vector(trainer.runner))
        trainer.close()
        resumed = Runner(rnd_config(3))
        resumed.load_state_dict(checkpoint.load(Path(tmp) / "rnd0" / "latest.pt"))
        out["resumed_record"] = resumed.learn()
        out["resumed_rnd"] = _gather(_rnd_vector(resumed))
        resumed.close()

        torch.manual_seed(0)  # the same networks on both ranks
        rnd = RND(RNDConfig(enabled=True, weight=1.0, state_normalization=False), 4, 8, PerfConfig(compile="off"),
                  torch.device("cpu"), Distributed.current())
        obs = torch.load(Path(tmp) / "rnd_obs.pt")
        rnd.begin_update()
        with count_syncs() as counts:
            rnd.train(obs[4 * rank : 4 * rank + 4])
        out["step"] = ([p.detach().clone() for p in rnd.module.predictor.parameters()], rnd.stats.clone())
        out["step_counts"] = (counts.syncs, dict(counts.host_reads), counts.ops["c10d::allreduce_"])
    finally:
        torch.save(out, Path(tmp) / f"rnd_rank{rank}.pt")
        dist.destroy_process_group()


def offpolicy_config(algorithm: str):
    """pendulum by SAC or TD3: 8 envs a rank, 4 gradient steps of 32 per iteration from the second on."""
    import dataclasses

    from syncfree.config import PerfConfig
    from syncfree.tasks import preset, with_algorithm

    cfg = with_algorithm(preset("pendulum"), algorithm)
    cfg.seed, cfg.iterations, cfg.env.num_envs, cfg.log.progress = 3, 3, 8, False
    cfg.policy = dataclasses.replace(cfg.policy, actor_hidden=[32, 32], critic_hidden=[32, 32])
    own = cfg.learner
    own.steps_per_env, own.updates_per_iteration, own.batch_size, own.learning_starts, own.buffer_size = 4, 4, 32, 32, 512
    cfg.perf = PerfConfig(compile="off")
    return cfg


def _offpolicy_vector(trainer: Runner) -> torch.Tensor:
    """Parameters, buffers (targets, normalizers) and every optimizer's moments, flattened."""
    tensors = [*trainer.policy.parameters(), *trainer.policy.buffers()]
    for optimizer in trainer.algorithm.optimizers():
        for state in optimizer.state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return torch.cat([t.detach().reshape(-1).double() for t in tensors])


def _two_rank_offpolicy_worker(rank: int, tmp: str) -> None:
    """SAC and TD3 on 2 ranks, each with its own replay buffer: 3 iterations, then two more gradient steps counted."""
    _join(tmp, rank, timeout=60)
    out: dict = {}
    try:
        for algorithm in ("sac", "td3"):
            trainer = Run(offpolicy_config(algorithm), Path(tmp) / f"{algorithm}{rank}")
            out[f"{algorithm}_record"] = trainer.learn()
            runner = trainer.runner
            out[f"{algorithm}_start"] = _gather(_offpolicy_vector(runner))
            out[f"{algorithm}_batch"] = _gather(runner.algorithm.buffer.batch.actions.clone())
            with count_syncs() as counts:
                runner.algorithm.gradient_step()
                runner.algorithm.gradient_step()
            out[f"{algorithm}_counts"] = (counts.syncs, counts.ops["c10d::allreduce_"])
            out[f"{algorithm}_after"] = _gather(_offpolicy_vector(runner))
            trainer.close()
    finally:
        torch.save(out, Path(tmp) / f"offpolicy_rank{rank}.pt")


def _two_rank_muon_worker(rank: int, tmp: str) -> None:
    """`ppo.optimizer=muon` on 2 ranks: 2 iterations, then one minibatch update counted."""
    _join(tmp, rank, timeout=60)
    out: dict = {}
    try:
        cfg = small_config("pendulum")
        cfg.iterations, cfg.ppo.optimizer = 2, "muon"
        trainer = Runner(cfg)
        out["record"] = trainer.learn()
        out["vectors"] = _gather(_policy_vector(trainer))
        mb = Batch(*(x[:64] for x in trainer.algorithm.storage.flat()))
        with count_syncs() as update:
            trainer.algorithm.minibatch_update(mb)
        out["update_counts"] = (update.syncs, update.ops["c10d::allreduce_"])
        trainer.close()
    finally:
        torch.save(out, Path(tmp) / f"muon_rank{rank}.pt")
        dist.destroy_process_group()
