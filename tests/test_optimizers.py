"""`ppo.optimizer`: Adam stays today's AdamW; Muon steps as torch's Muon and AdamW do by hand, without host reads,
skips non-finite steps on the device, resumes exactly and trains on two ranks."""

from __future__ import annotations

import copy
import logging
import re
from pathlib import Path
from typing import cast

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from conftest import small_config, straight_and_resumed
from syncfree.algo.optim import MuonAdamW, PolicyOptimizer, ScheduleFreeAdamW, hidden_matrices, make_optimizer
from syncfree.algo.settings import PPOConfig
from syncfree.cli import main
from syncfree.config import PerfConfig
from syncfree.core.counters import count_syncs
from syncfree.errors import UserError
from syncfree.train import checkpoint
from syncfree.train.run import Run
from syncfree.train.runner import Runner

LR = 3e-3


def network() -> nn.Module:
    """An actor-critic's shape: two MLPs of two hidden layers and a free parameter."""
    torch.manual_seed(0)
    net = nn.Module()
    net.actor = nn.Sequential(nn.Linear(3, 16), nn.ELU(), nn.Linear(16, 16), nn.ELU(), nn.Linear(16, 2))
    net.critic = nn.Sequential(nn.Linear(3, 16), nn.ELU(), nn.Linear(16, 12), nn.ELU(), nn.Linear(12, 1))
    net.log_std = nn.Parameter(torch.zeros(2))
    return net


def set_gradients(params: list[nn.Parameter], step: int) -> None:
    generator = torch.Generator().manual_seed(step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator)


def policy_optimizer(net: nn.Module, schedule: str, **perf) -> PolicyOptimizer:
    cfg = PPOConfig(optimizer="muon", schedule=schedule, learning_rate=LR, max_grad_norm=1e9, weight_decay=0.01)
    return PolicyOptimizer(list(net.parameters()), cfg, PerfConfig(**perf), torch.device("cpu"),
                           matrices=hidden_matrices(net))


def by_hand(net: nn.Module) -> tuple[torch.optim.Muon, torch.optim.AdamW]:
    hidden = {id(p) for p in hidden_matrices(net)}
    muon = torch.optim.Muon([p for p in net.parameters() if id(p) in hidden], lr=LR, weight_decay=0.01,
                            adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW([p for p in net.parameters() if id(p) not in hidden], lr=LR, weight_decay=0.01,
                              fused=True)
    return muon, adamw


def test_muon_takes_the_hidden_matrices_and_adamw_the_rest() -> None:
    net = network()
    assert hidden_matrices(net) == [net.actor[2].weight, net.critic[2].weight]
    optimizer = make_optimizer(list(net.parameters()), "muon", LR, matrices=hidden_matrices(net))
    assert isinstance(optimizer, MuonAdamW)
    assert optimizer.muon.param_groups[0]["params"] == hidden_matrices(net)
    assert len(optimizer.adamw.param_groups[0]["params"]) == len(list(net.parameters())) - 2


def test_muon_step_equals_torch_muon_and_adamw_stepped_by_hand() -> None:
    """A fixed rate: the trainer's step (clip, skip check on the device, step) is torch's, bit for bit."""
    ours, theirs = network(), network()
    optim = policy_optimizer(ours, "fixed")
    muon, adamw = by_hand(theirs)
    for step in range(3):
        set_gradients(list(ours.parameters()), step)
        set_gradients(list(theirs.parameters()), step)
        optim.step()
        muon.step()
        adamw.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b), name
    assert not torch.equal(ours.actor[2].weight, network().actor[2].weight)


def test_muon_with_the_rate_on_the_device_reads_nothing_and_matches_the_host_rate() -> None:
    """The adaptive schedule's rate in a device tensor: Muon's step scaled by it afterwards (within rounding), no
    host read in the step."""
    ours, theirs = network(), network()
    optim = policy_optimizer(ours, "adaptive", device_adaptive_lr=True)
    assert isinstance(optim.optimizer, MuonAdamW) and isinstance(optim.optimizer.lr, torch.Tensor)
    muon, adamw = by_hand(theirs)
    kl = torch.tensor(optim.cfg.desired_kl)  # at the target: the rate stays
    for step in range(3):
        set_gradients(list(ours.parameters()), step)
        set_gradients(list(theirs.parameters()), step)
        with count_syncs() as counts:
            optim.step(kl)
        assert counts.syncs == 0, (dict(counts.host_reads), dict(counts.sync_ops))
        muon.step()
        adamw.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7, msg=name)


def test_a_non_finite_gradient_leaves_muon_and_adamw_alone_without_a_host_read() -> None:
    net = network()
    optim = policy_optimizer(net, "adaptive", device_adaptive_lr=True)
    params = list(net.parameters())
    for first in (True, False):  # before any state exists, and after
        if not first:
            set_gradients(params, 0)
            optim.step(torch.tensor(0.01))
        before = [p.detach().clone() for p in params]
        state = copy.deepcopy(optim.optimizer.state_dict()["state"])
        set_gradients(params, 1)
        params[3].grad[0, 0] = float("nan")
        with count_syncs() as counts:
            optim.step(torch.tensor(0.01))
        assert counts.syncs == 0
        assert all(torch.equal(a, b) for a, b in zip(params, before, strict=True))
        after = optim.optimizer.state_dict()["state"]
        for index, entry in state.items():
            assert all(torch.equal(entry[k], after[index][k]) for k in entry)
        assert all(not torch.any(v).item() for entry in after.values() for k, v in entry.items()
                   if k == "momentum_buffer") == first
    assert int(optim.skipped_steps) == 2


def test_adam_is_the_default_and_steps_as_before() -> None:
    """`adam`: torch's AdamW with `ppo.weight_decay` (0: Adam), as the trainer stepped before the setting; `adamw`
    decays by torch's default when the decay is 0."""
    assert PPOConfig().optimizer == "adam" and PPOConfig().decay() == 0.0
    assert PPOConfig(optimizer="adamw").decay() == 0.01 and PPOConfig(optimizer="adamw", weight_decay=0.1).decay() == 0.1
    runner = Runner(small_config("pendulum"))
    optimizer = runner.algorithm.optim.optimizer
    assert type(optimizer) is torch.optim.AdamW and optimizer.param_groups[0]["weight_decay"] == 0.0
    assert runner.algorithm.optim.state_params() == runner.algorithm.optim.params


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("compile", ["off", "step"])
@pytest.mark.parametrize("optimizer", ["muon", "schedule_free_adamw"])
def test_other_optimizers_train_with_no_host_read_per_minibatch(optimizer: str, compile: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """The optimized switches (the adaptive rate on the device, the skip on non-finite gradients); `compile=step`
    runs the update as `hot` does, and says so."""
    from syncfree.bench.timing import count_iteration

    cfg = small_config("pendulum", compile=compile)
    cfg.ppo.optimizer, cfg.iterations = optimizer, 2
    with caplog.at_level(logging.INFO, logger="syncfree"):
        runner = Runner(cfg)
    assert runner.algorithm.whole_step is None
    if compile == "step":
        assert f"ppo.optimizer={optimizer}: the whole-step graph steps AdamW only" in caplog.text
    before = runner.policy.actor[2].weight.detach().clone()
    runner.learn()
    counts = count_iteration(runner)
    assert (counts["syncs_per_step"], counts["syncs_per_minibatch"], counts["syncs_per_iteration"]) == (0, 0, 1)
    assert not torch.equal(before, runner.policy.actor[2].weight)


def test_a_muon_run_resumes_exactly_and_refuses_another_optimizer(tmp_path: Path) -> None:
    def config(iterations: int, optimizer: str = "muon"):
        cfg = small_config("pendulum")
        cfg.iterations, cfg.save_every, cfg.ppo.optimizer = iterations, 100, optimizer
        return cfg

    straight, second, saved = straight_and_resumed(config, tmp_path / "split")
    assert "momentum_buffer" in saved["algorithm"]["optimizer"]["state"][0]
    for a, b in zip(straight.policy.parameters(), second.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    sa = straight.algorithm.optim.optimizer.state_dict()["state"]
    sb = second.algorithm.optim.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[k][n], sb[k][n]) for k in sa for n in sa[k])

    with pytest.raises(UserError, match=re.escape("its optimizer state is ppo.optimizer=muon's but this run has "
                                                  "ppo.optimizer=adam; resume with ppo.optimizer=muon")):
        Runner(config(3, "adam")).load_state_dict(saved)


def test_bad_optimizer_settings_are_one_line(capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "--task", "pendulum", "--ppo.optimizer", "sgd"]) == 2
    err = capsys.readouterr().err.strip()
    assert "ppo.optimizer" in err and "sgd" in err and "muon" in err and len(err.splitlines()) == 1
    cfg = small_config("pendulum")
    cfg.policy.actor_hidden = cfg.policy.critic_hidden = [32]
    cfg.ppo.optimizer = "muon"
    with pytest.raises(UserError, match=re.escape("ppo.optimizer='muon' is invalid here: the policy has no hidden")):
        Runner(cfg)


@pytest.mark.slow
def test_muon_trains_on_two_ranks_with_identical_parameters(tmp_path: Path) -> None:
    from distributed_workers import WORLD, _two_rank_muon_worker

    mp.start_processes(_two_rank_muon_worker, args=(str(tmp_path),), nprocs=WORLD, start_method="spawn")
    r0, r1 = (torch.load(tmp_path / f"muon_rank{r}.pt", weights_only=False) for r in range(WORLD))
    v0, v1 = r0["vectors"]
    assert v0.numel() > 1000 and torch.equal(v0, v1)
    assert r0["update_counts"] == r1["update_counts"] == (0, 1)  # no host read, one all-reduce


def test_schedule_free_adamw_steps_as_the_schedulefree_package() -> None:
    """Train-mode steps and the average in eval mode, within float32 rounding of the package's own update (its
    scalars are Python floats, ours device tensors)."""
    schedulefree = pytest.importorskip("schedulefree")
    ours, theirs = network(), network()
    mine = make_optimizer(list(ours.parameters()), "schedule_free_adamw", torch.tensor(LR, dtype=torch.float64),
                          weight_decay=0.01)
    assert isinstance(mine, ScheduleFreeAdamW)
    reference = schedulefree.AdamWScheduleFree(theirs.parameters(), lr=LR, weight_decay=0.01, foreach=True)
    for step in range(4):
        for optimizer in (mine, reference):
            optimizer.train()
        set_gradients(list(ours.parameters()), step)
        set_gradients(list(theirs.parameters()), step)
        with count_syncs() as counts:
            mine.step()
        assert counts.syncs == 0
        reference.step()
        if step % 2:  # an update of two steps, then the average
            for optimizer in (mine, reference):
                optimizer.eval()
            for (name, a), b in zip(ours.named_parameters(), theirs.parameters(), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7, msg=name)
    assert not torch.equal(ours.actor[2].weight, network().actor[2].weight)


def test_schedule_free_skips_a_non_finite_step_and_saves_and_evaluates_its_average(tmp_path: Path) -> None:
    """The run acts and steps with the interpolated weights; checkpoints, evaluation and `syncfree.learn`'s policy
    get the average, and the acting weights come back exactly after a save."""
    import syncfree

    net = network()
    params = list(net.parameters())
    found_inf = torch.ones(())
    optimizer = make_optimizer(params, "schedule_free_adamw", LR, found_inf=found_inf)
    assert isinstance(optimizer, ScheduleFreeAdamW)
    optimizer.train()
    set_gradients(params, 0)
    before = [p.detach().clone() for p in params]
    with count_syncs() as counts:
        optimizer.step()
    assert counts.syncs == 0 and all(torch.equal(a, b) for a, b in zip(params, before, strict=True))
    assert float(optimizer.state[params[0]]["step"]) == 0

    cfg = small_config("pendulum")
    cfg.iterations, cfg.save_every, cfg.ppo.optimizer = 2, 100, "schedule_free_adamw"
    run = Run(cfg, tmp_path / "run")
    run.learn()
    algorithm, policy = run.runner.algorithm, run.runner.policy
    optim = algorithm.optim.optimizer
    assert isinstance(optim, ScheduleFreeAdamW) and optim.train_mode  # between updates: the acting weights
    acting = {name: p.detach().clone() for name, p in policy.named_parameters()}
    with algorithm.average_weights():
        average = {name: p.detach().clone() for name, p in policy.named_parameters()}
    assert all(torch.equal(acting[name], p) for name, p in policy.named_parameters())
    assert not torch.equal(average["actor.2.weight"], acting["actor.2.weight"])
    saved = checkpoint.load(tmp_path / "run" / "latest.pt")
    assert all(torch.equal(saved["policy"][name], average[name]) for name in average)
    assert all(torch.equal(a, acting[name]) for a, name in zip(saved["algorithm"]["acting_weights"], acting,
                                                                strict=True))

    result = syncfree.learn("pendulum", run_dir=False, iterations=1, seed=3, **{
        "env.num_envs": 16, "ppo.steps_per_env": 8, "ppo.optimizer": "schedule_free_adamw", "perf.compile": "off",
        "log.progress": False})
    assert not cast(ScheduleFreeAdamW, result.run.runner.algorithm.optim.optimizer).train_mode  # the average


def test_a_schedule_free_run_resumes_exactly(tmp_path: Path) -> None:
    def config(iterations: int):
        cfg = small_config("pendulum")
        cfg.iterations, cfg.save_every, cfg.ppo.optimizer = iterations, 100, "schedule_free_adamw"
        return cfg

    straight, second, _ = straight_and_resumed(config, tmp_path / "split")
    for a, b in zip(straight.policy.parameters(), second.policy.parameters(), strict=True):
        assert torch.equal(a, b)
