"""`policy.kind=recurrent` on tasks of flat observations: the recurrent MLP policy (rsl_rl's RNN actor-critic)
replays its rollout, resets at dones, and trains through the recurrent algorithm with no host read per step or
minibatch, from the API and the command line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from conftest import assert_same_state, recurrent_config
from syncfree.algo.recurrent import RecurrentPPO
from syncfree.bench.timing import count_iteration
from syncfree.cli import main
from syncfree.core.switches import PerfConfig
from syncfree.envs.api import ActionSpec
from syncfree.errors import UserError
from syncfree.policy.normalizer import RunningNorm
from syncfree.policy.recurrent_mlp import RecurrentMLPPolicy
from syncfree.policy.settings import RecurrentCoreConfig, RecurrentMLPPolicyConfig
from syncfree.tasks import config_from_dict, switch_scope
from syncfree.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")

ACTOR, CRITIC, HIDDEN = 5, 7, 12


def policy(core: str = "lstm", layers: int = 1, kind: str = "continuous") -> RecurrentMLPPolicy:
    torch.manual_seed(0)
    cfg = RecurrentMLPPolicyConfig(actor_hidden=[16], critic_hidden=[16, 8],
                                   rnn=RecurrentCoreConfig(core, HIDDEN, layers))  # type: ignore[arg-type]
    net = RecurrentMLPPolicy(ACTOR, CRITIC, ActionSpec(kind, 3), cfg)  # type: ignore[arg-type]
    gen = torch.Generator().manual_seed(9)
    for norm, dim in ((net.actor_norm, ACTOR), (net.critic_norm, CRITIC)):  # statistics other than the identity
        assert isinstance(norm, RunningNorm)
        norm.update(torch.randn(50, dim, generator=gen) * 3 + 1)
    return net


@pytest.mark.parametrize(("core", "layers", "kind"), [("lstm", 1, "continuous"), ("gru", 2, "discrete"),
                                                      ("lstm", 2, "continuous")])
def test_sequence_replay_equals_the_step_by_step_rollout(core: str, layers: int, kind: str) -> None:
    """What `evaluate_sequence` computes on a stored row is what the rollout's steps computed, resets included."""
    gen = torch.Generator().manual_seed(1)
    net = policy(core, layers, kind)
    segments, horizon = 6, 9
    actor_obs, critic_obs = torch.randn(horizon, segments, ACTOR, generator=gen), torch.randn(horizon, segments, CRITIC,
                                                                                             generator=gen)
    dones = torch.rand(horizon, segments, generator=gen) < 0.25
    state = tuple(torch.randn(segments, HIDDEN, generator=gen) for _ in range(net.state_size))
    assert net.state_size == 2 * layers * (2 if core == "lstm" else 1)  # the actor's and the critic's
    initial, steps = state, []
    with torch.no_grad():
        for t in range(horizon):
            out, state = net.step((actor_obs[t], critic_obs[t]), state, dones[t])
            steps.append(out)
        actions = torch.stack([s.actions for s in steps], 1)
        replay = net.evaluate_sequence((actor_obs.transpose(0, 1), critic_obs.transpose(0, 1)), actions, initial,
                                       dones.transpose(0, 1))
    assert dones.any() and not dones.all()
    for field in ("log_prob", "value"):
        rolled = torch.stack([getattr(s, field) for s in steps], 1)
        torch.testing.assert_close(getattr(replay, field), rolled, rtol=0, atol=1e-5)
    assert replay.entropy.shape == (segments, horizon) and torch.isfinite(replay.entropy).all()


def test_a_done_step_starts_both_networks_from_the_zero_state() -> None:
    gen = torch.Generator().manual_seed(2)
    net = policy(layers=2)
    obs = (torch.randn(4, ACTOR, generator=gen), torch.randn(4, CRITIC, generator=gen))
    carried = tuple(torch.randn(4, HIDDEN, generator=gen) for _ in range(net.state_size))
    done = torch.tensor([True, False, True, False])
    never = torch.zeros(4, dtype=torch.bool)
    with torch.no_grad():
        after_done, after_state = net.step(obs, carried, done, greedy=True)
        from_zero, zero_state = net.step(obs, net.initial_state(4), never, greedy=True)
        carried_on, carried_state = net.step(obs, carried, never, greedy=True)
    for got, zero, kept in zip(after_state, zero_state, carried_state, strict=True):
        assert torch.equal(got[done], zero[done]) and torch.equal(got[~done], kept[~done])
    assert torch.equal(after_done.value[done], from_zero.value[done])
    assert not torch.allclose(after_done.value[~done], from_zero.value[~done])
    assert torch.equal(after_done.actions[~done], carried_on.actions[~done])  # greedy: the Gaussian's mean


def test_policy_kind_recurrent_trains_a_flat_task_with_no_host_read_per_step_or_minibatch() -> None:
    cfg = recurrent_config()
    runner = Runner(cfg.validate() or cfg)
    assert isinstance(runner.algorithm, RecurrentPPO) and isinstance(runner.policy, RecurrentMLPPolicy)
    before = {k: v.clone() for k, v in runner.policy.state_dict().items()}
    runner.learn()
    after = runner.policy.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before if k.endswith(("weight_ih", "weight")))
    norm = runner.policy.actor_norm
    assert isinstance(norm, RunningNorm) and int(norm.count) == 2 * 8 * 32  # every step's next observation
    counts = count_iteration(runner)
    assert counts["syncs_per_step"] == 0
    assert counts["syncs_per_minibatch"] == 0
    assert counts["phases"]["normalizer"]["ops"] > 0  # the normalizers' update runs in its own phase


def test_continuous_actions_are_stored_whole() -> None:
    runner = Runner(recurrent_config("point-mass"))
    runner.learn()
    actions = runner.algorithm.buffer.data["actions"]
    spec = runner.env.action_spec
    assert spec.kind == "continuous" and actions.shape[2:] == (spec.size,) and actions.dtype == torch.float32
    assert actions[..., 0].std() > 0 and actions[..., 1].std() > 0 and not torch.equal(actions[..., 0], actions[..., 1])


def test_the_variant_reads_back_from_its_stored_dict_and_refuses_what_it_cannot_train() -> None:
    cfg = recurrent_config()
    again = config_from_dict(dataclasses.asdict(cfg))
    assert type(again) is type(cfg) and again == cfg
    cfg.losses.kickstarter, cfg.losses.teacher = 1.0, "teacher.pt"
    with pytest.raises(UserError, match=r"losses\.kickstarter.*losses\.ppo only"):
        cfg.validate()


def test_cli_trains_evaluates_reruns_and_resumes_a_recurrent_policy_on_cartpole(tmp_path: Path, capsys) -> None:
    common = ["--env.num_envs", "16", "--ppo.steps_per_env", "8", "--ppo.num_minibatches", "2", "--perf.compile",
              "off", "--policy.rnn.hidden", "8", "--log.dir", str(tmp_path), "--log.progress", "false"]
    assert main(["train", "--task", "cartpole", "--policy.kind", "recurrent", "--iterations", "2", *common,
                 "--log.run_name", "first"]) == 0
    run = tmp_path / "first"
    assert "bptt_horizon: 0" in (run / "config.yaml").read_text()
    assert main(["eval", str(run / "latest.pt"), "--num_envs", "4"]) == 0
    assert "cartpole: mean return" in capsys.readouterr().out
    # a run's config.yaml names the policy kind: a rerun from it trains the same policy
    assert main(["train", "--config", str(run / "config.yaml"), "--log.run_name", "again", "--resume", "",
                 "--log.dir", str(tmp_path)]) == 0
    first, again = ([json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
                    for name in ("first", "again"))
    assert len(first) == len(again) == 2
    for key in ("reward_per_agent_step", "value_loss", "surrogate_loss"):
        assert [r[key] for r in first] == [r[key] for r in again]
    assert main(["train", "--resume", str(run / "latest.pt"), "--resume_in_place", "true", "--iterations", "3",
                 "--log.progress", "false"]) == 0
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["iteration"] == 3


@pytest.mark.parametrize(("args", "culprit"), [
    (["--policy.rnn.hidden", "0"], "policy.rnn.hidden"),
    (["--policy.rnn.core", "rnn"], "policy.rnn.core"),
    (["--ppo.bptt_horizon", "5"], "ppo.bptt_horizon"),
    (["--losses.supervised", "1"], "losses.supervised"),
    (["--ppo.prio_beta0", "2"], "ppo.prio_beta0"),
    (["--ppo.vtrace_rho_clip", "0"], "ppo.vtrace_rho_clip"),
])
def test_bad_recurrent_settings_are_one_line(args: list[str], culprit: str, capsys) -> None:
    assert main(["train", "--task", "pendulum", "--policy.kind", "recurrent", *args]) == 2
    err = capsys.readouterr().err
    assert culprit in err and err.count("\n") == 1


def test_the_python_api_trains_the_recurrent_policy_as_the_command_line_does(tmp_path: Path) -> None:
    import syncfree

    result = syncfree.learn("point-mass", iterations=1, run_dir=False, env={"num_envs": 16},
                            policy={"kind": "recurrent", "rnn": {"core": "gru", "hidden": 8}},
                            ppo={"steps_per_env": 8, "num_minibatches": 2}, perf={"compile": "off"},
                            log={"progress": False})
    assert isinstance(result.policy, RecurrentMLPPolicy) and result.record["iteration"] == 1
    assert isinstance(result.policy.actor_core.cells[0], torch.nn.GRUCell)


@pytest.mark.parametrize("switch", ["preallocated_last_actions", "cpu_time_index", "cached_minibatch_indices",
                                    "zero_grad_set_to_none", "deferred_episode_stats"])
def test_each_segment_switch_changes_nothing_but_speed_for_the_recurrent_mlp_policy(switch: str) -> None:
    """The recurrent algorithm's switches, on the recurrent MLP policy: rows, parameters, optimizer state and
    episode statistics bitwise equal with the switch at its baseline."""
    off = PerfConfig.switches_by_name()[switch].metadata["baseline"]
    runs = []
    for perf in ({switch: off}, {}):  # each built and trained in turn: the runner seeds the process's generators
        runs.append(Runner(recurrent_config(**perf)))
        runs[-1].learn()
    a, b = (dict(r.state_dict(), buffer=r.algorithm.buffer.data) for r in runs)
    assert_same_state({k: a[k] for k in ("policy", "algorithm", "episodes", "buffer")},
                      {k: b[k] for k in ("policy", "algorithm", "episodes", "buffer")})


@pytest.mark.parametrize("symmetric", [False, True])
def test_a_state_copied_in_place_trains_as_the_state_carried_as_output(symmetric: bool,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """What CUDA graphs make the rollout do (each step's new state and value copied into the agents' own tensors,
    `state_in_place`) trains bitwise as carrying the step's outputs does, the mirrored state (`symmetry`) too."""
    import syncfree.algo.recurrent as recurrent

    runs = []
    for in_place in (False, True):
        monkeypatch.setattr(recurrent, "outputs_overwritten", lambda perf, device, on=in_place: on)
        if symmetric:
            from test_symmetry import recurrent_symmetric

            cfg = recurrent_symmetric()
        else:
            cfg = recurrent_config()
        cfg.iterations = 2
        runs.append(Runner(cfg))
        runs[-1].learn()
        assert runs[-1].algorithm.state_in_place is in_place
    a, b = (dict(r.state_dict(), buffer=r.algorithm.buffer.data, state=r.algorithm.state) for r in runs)
    assert_same_state({k: a[k] for k in ("policy", "algorithm", "episodes", "buffer", "state")},
                      {k: b[k] for k in ("policy", "algorithm", "episodes", "buffer", "state")})


def test_the_full_log_probs_gate_is_inert_and_gradients_are_clipped_per_network() -> None:
    cfg = recurrent_config()
    assert "gate_full_log_probs" in cfg.perf.inert_switches(switch_scope(cfg))
    runner = Runner(cfg)
    actor, critic = runner.algorithm.optim.clip_groups
    policy = runner.policy
    assert isinstance(policy, RecurrentMLPPolicy)
    assert {id(p) for p in critic} == {id(p) for m in (policy.critic, policy.critic_core) for p in m.parameters()}
    assert len(actor) + len(critic) == len(list(policy.parameters()))
