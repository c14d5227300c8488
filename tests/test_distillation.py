"""Student-teacher distillation (`distill`): rsl_rl 5.5.1's `Distillation` update on the same rollout, the
`whole_chunk_distillation` switch (equivalence and what it saves), host reads, training end to end, refusals."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import warnings
from pathlib import Path
from typing import cast

import pytest
import torch

from conftest import small_config
from syncfree.algo import Distillation, RecurrentDistillation, algorithm_for
from syncfree.algo.distillation import chunks
from syncfree.algo.settings import DistillConfig
from syncfree.bench.timing import count_iteration
from syncfree.config import PerfConfig, TrainConfig, with_values
from syncfree.core.counters import count_syncs
from syncfree.core.phases import PhaseCounter
from syncfree.envs.api import ActionSpec
from syncfree.errors import UserError
from syncfree.policy.actor_critic import ActorCritic
from syncfree.policy.recurrent_mlp import RecurrentMLPPolicy
from syncfree.policy.settings import PolicyConfig, RecurrentCoreConfig, RecurrentMLPPolicyConfig
from syncfree.rsl_rl.checkpoint import to_rsl_rl
from syncfree.tasks import preset, switch_scope, with_algorithm
from syncfree.train.run import Run
from syncfree.train.runner import Runner

OBS, ACTIONS, HIDDEN = 5, 3, [16, 16]


def distiller(steps: int, envs: int, cfg: DistillConfig, seed: int = 0, **perf: object) -> Distillation:
    """A student and a teacher on random weights, and a rollout of random observations and teacher actions."""
    torch.manual_seed(seed)
    policy_cfg = PolicyConfig(actor_hidden=HIDDEN, critic_hidden=[8], init_std=0.1, obs_norm_std_offset=0.01)
    spec = ActionSpec("continuous", ACTIONS)
    student = ActorCritic(OBS, OBS, spec, policy_cfg)
    teacher = ActorCritic(OBS, OBS, spec, policy_cfg).eval().requires_grad_(False)
    algo = Distillation(student, teacher, cfg, steps, dataclasses.replace(PerfConfig(), **{"compile": "off", **perf}),
                        envs, torch.device("cpu"))
    algo.student_obs.copy_(torch.randn(steps, envs, OBS) * 2.0 + 0.5)
    algo.teacher_actions.copy_(torch.randn(steps, envs, ACTIONS))
    return algo


def rsl_rl_update(algo: Distillation) -> tuple[dict[str, torch.Tensor], float, torch.nn.Module]:
    """rsl_rl 5.5.1's `Distillation.update` on `algo`'s rollout, from `algo`'s student (an `MLPModel`, or an
    `RNNModel` for a recurrent student, whose dones are the episode starts shifted by one step: rsl_rl resets the
    state after a done step): the student's parameters after it, its logged `behavior` loss and its model."""
    from rsl_rl.algorithms import Distillation as RslDistillation
    from rsl_rl.models import MLPModel, RNNModel
    from rsl_rl.storage import RolloutStorage
    from tensordict import TensorDict

    steps, envs = algo.steps_per_env, algo.num_envs
    recurrent = isinstance(algo, RecurrentDistillation)
    obs = TensorDict({"policy": algo.student_obs[0].clone()}, batch_size=[envs])
    groups = {"student": ["policy"], "teacher": ["policy"]}
    common = dict(hidden_dims=HIDDEN, activation="elu", obs_normalization=True,
                  distribution_cfg={"class_name": "GaussianDistribution", "init_std": 0.1, "std_type": "log"})
    student = (RNNModel(obs, groups, "student", ACTIONS, **common, rnn_type="lstm", rnn_hidden_dim=RNN_HIDDEN,
                        rnn_num_layers=1) if recurrent else MLPModel(obs, groups, "student", ACTIONS, **common))
    teacher = MLPModel(obs, groups, "teacher", ACTIONS, hidden_dims=HIDDEN)
    actor_state, _ = to_rsl_rl(algo.policy.state_dict())
    student.load_state_dict(actor_state)
    storage = RolloutStorage("distillation", envs, steps, obs, [ACTIONS])
    for t in range(steps):
        transition = RolloutStorage.Transition()
        transition.observations = TensorDict({"policy": algo.student_obs[t].clone()}, batch_size=[envs])
        transition.actions = torch.zeros(envs, ACTIONS)
        transition.privileged_actions = algo.teacher_actions[t].clone()
        transition.rewards = torch.zeros(envs)
        shifted = recurrent and t + 1 < steps
        transition.dones = 1.0 - cast(RecurrentDistillation, algo).keeps[t + 1, :, 0] if shifted else torch.zeros(envs)
        storage.add_transition(transition)
    cfg = algo.cfg
    with warnings.catch_warnings():  # rsl_rl warns of a remainder, as syncfree's log does
        warnings.simplefilter("ignore")
        rsl = RslDistillation(student, teacher, storage, num_learning_epochs=cfg.num_epochs,
                              gradient_length=cfg.gradient_length, learning_rate=cfg.learning_rate,
                              max_grad_norm=cfg.max_grad_norm or None, loss_type=cfg.loss, optimizer="adam")
    losses = rsl.update()
    return {k: v.detach().clone() for k, v in student.state_dict().items()}, losses["behavior"], student


CASES = {
    # name: (steps, epochs, gradient_length, loss, max_grad_norm)
    "one-chunk-per-epoch": (6, 1, 3, "mse", 0.0),
    "chunks-across-epochs": (6, 2, 4, "huber", 0.5),  # the 2nd chunk runs from epoch 1's end into epoch 2
    "with-remainder": (5, 1, 2, "mse", 1.0),  # the last step counts in the loss only
}


@pytest.mark.parametrize("whole_chunk", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("student", ["mlp", "recurrent"])
def test_update_matches_rsl_rl_distillation_on_the_same_rollout(student: str, case: str, whole_chunk: bool) -> None:
    """Same student parameters after one update (Adam steps on summed losses of `gradient_length` steps, the
    clip), same logged loss, same observation normalizer afterwards, to float32 tolerance; both paths of the
    switch. A recurrent student: the replay through the cells with the episode starts' resets, the state detached
    after each optimizer step and restarted at each epoch."""
    steps, epochs, length, loss, clip = CASES[case]
    cfg = DistillConfig(teacher="t.pt", loss=loss, gradient_length=length, num_epochs=epochs, learning_rate=3e-3,
                        max_grad_norm=clip)
    build = distiller if student == "mlp" else recurrent_distiller
    algo = build(steps, 7, cfg, whole_chunk_distillation=whole_chunk)
    expected, behavior, rsl_student = rsl_rl_update(algo)
    algo.update()
    ours, _ = to_rsl_rl(algo.policy.state_dict())
    compared = 0
    for name, value in expected.items():
        if name.startswith(("mlp.", "rnn.")):
            torch.testing.assert_close(ours[name], value, rtol=2e-5, atol=2e-6, msg=name)
            compared += 1
    # the MLP's layers, and a recurrent student's LSTM (two weights and two biases)
    assert compared == 2 * (len(HIDDEN) + 1) + (4 if student == "recurrent" else 0)
    fresh, _ = to_rsl_rl(build(steps, 7, cfg).policy.state_dict())
    assert not torch.equal(ours["mlp.0.weight"], fresh["mlp.0.weight"])
    assert float(algo.statistics()["behavior_loss"]) == pytest.approx(behavior, rel=1e-5)
    torch.testing.assert_close(ours["obs_normalizer._mean"], rsl_student.state_dict()["obs_normalizer._mean"])
    torch.testing.assert_close(ours["obs_normalizer._var"], rsl_student.state_dict()["obs_normalizer._var"],
                               rtol=1e-5, atol=1e-6)


def test_chunks_follow_the_update_s_steps_across_epochs() -> None:
    device = torch.device("cpu")
    steps, rest = chunks(12, 6, 4, device)
    assert [(c.steps, c.start) for c in steps] == [(4, 0), (4, 4), (4, 2)]
    assert steps[0].gather is None and steps[2].gather is None
    assert steps[1].gather is not None and steps[1].gather.tolist() == [4, 5, 0, 1]
    assert rest is None
    steps, rest = chunks(5, 5, 2, device)
    assert [(c.steps, c.start) for c in steps] == [(2, 0), (2, 2)]
    assert rest is not None and (rest.steps, rest.start) == (1, 4)


def student_forwards(algo: Distillation) -> dict[str, int]:
    """Dispatched ops of one update, by name (a student forward is one `addmm` per linear layer)."""
    with count_syncs() as counts:
        algo.update()
    return dict(counts.ops)


@pytest.mark.parametrize("case", sorted(CASES))
def test_whole_chunk_distillation_runs_one_student_forward_per_optimizer_step(case: str) -> None:
    """The effect: with the switch on, each optimizer step forwards the student once over its chunk's rows (and the
    remainder once); off, once per step, as rsl_rl does. Counted as the linear layers' forward products (`addmm`):
    backward products are `mm`s."""
    steps, epochs, length, loss, clip = CASES[case]
    cfg = DistillConfig(teacher="t.pt", loss=loss, gradient_length=length, num_epochs=epochs, max_grad_norm=clip)
    layers = len(HIDDEN) + 1
    on = student_forwards(distiller(steps, 7, cfg, whole_chunk_distillation=True))
    off = student_forwards(distiller(steps, 7, cfg, whole_chunk_distillation=False))
    optimizer_steps, rest = divmod(epochs * steps, length)
    assert on["aten::addmm"] == layers * (optimizer_steps + (rest > 0))
    assert off["aten::addmm"] == layers * epochs * steps
    # and one backward over the chunk instead of one per step (the remainder's forwards carry no gradient)
    assert on["aten::mm"] > 0
    assert off["aten::mm"] == length * on["aten::mm"]
    # a chunk's rows are views of the storage; only a chunk that runs into the next epoch gathers them (the
    # observations and the teacher's actions: two gathers)
    wrapped = sum(c.gather is not None for c in chunks(epochs * steps, steps, length, torch.device("cpu"))[0])
    assert on.get("aten::index", 0) == 2 * wrapped
    assert wrapped == (case == "chunks-across-epochs")
    # a recurrent student: its cells step through every replayed step either way (two products per step), the MLP
    # after them once per chunk on, once per step off
    on = student_forwards(recurrent_distiller(steps, 7, cfg, whole_chunk_distillation=True))
    off = student_forwards(recurrent_distiller(steps, 7, cfg, whole_chunk_distillation=False))
    replayed = epochs * steps
    assert on["aten::addmm"] == 2 * replayed + layers * (optimizer_steps + (rest > 0))
    assert off["aten::addmm"] == 2 * replayed + layers * replayed
    assert on.get("aten::index", 0) == wrapped  # the teacher's actions only: the cells read each step's view


def test_logged_loss_stays_on_the_device_unless_device_loss_stats_is_off() -> None:
    cfg = DistillConfig(teacher="t.pt", gradient_length=3)
    for device_stats, reads in ((True, 0), (False, 2)):  # off: rsl_rl's `.item()` per loss the update sums
        algo = distiller(6, 4, cfg, device_loss_stats=device_stats)
        with count_syncs() as counts:
            algo.update()
        assert counts.syncs == reads
    off = distiller(6, 4, cfg, device_loss_stats=False, whole_chunk_distillation=False)
    with count_syncs() as counts:
        off.update()
    assert counts.syncs == 6
    on = distiller(6, 4, cfg)
    on.update()
    assert float(off.statistics()["behavior_loss"]) == pytest.approx(float(on.statistics()["behavior_loss"]),
                                                                       rel=1e-5)


# -- training end to end ----------------------------------------------------------------------------------


def pendulum(tmp_path: Path, name: str, algorithm: str = "distillation", **changes: object) -> TrainConfig:
    """`small_config("pendulum")` trained by `algorithm` (distillation: in chunks of 4 of its 8 steps), with
    `changes` (`section__field` for a section's)."""
    cfg = with_algorithm(small_config("pendulum"), algorithm)
    cfg.log.dir, cfg.log.run_name, cfg.log.progress, cfg.iterations = str(tmp_path), name, False, 2
    if algorithm != "ppo":
        cfg.distill.gradient_length = 4
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            setattr(getattr(cfg, section), field, value)
        else:
            setattr(cfg, key, value)
    return cfg


@pytest.fixture(scope="module")
def teacher_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A privileged teacher: its actor reads the critic's group (the same terms on pendulum, which is enough to
    check which group each network reads)."""
    tmp = tmp_path_factory.mktemp("teacher")
    runner = Run(pendulum(tmp, "teacher", "ppo", policy__actor_obs="critic"), tmp / "teacher")
    runner.learn()
    runner.close()
    return tmp / "teacher" / "latest.pt"


def test_a_student_trains_from_a_teacher_checkpoint_and_reads_the_host_once_per_iteration(
        tmp_path: Path, teacher_checkpoint: Path) -> None:
    cfg = pendulum(tmp_path, "student", distill__teacher=str(teacher_checkpoint), distill__gradient_length=4)
    assert algorithm_for(cfg) is Distillation
    runner = Run(cfg, tmp_path / "student")
    assert isinstance(runner.runner.algorithm, Distillation)
    assert runner.runner.algorithm.teacher.actor_group == "critic" and runner.runner.policy.actor_group == "policy"
    before = runner.runner.policy.actor[0].weight.clone()
    record = runner.learn()
    assert not torch.equal(before, runner.runner.policy.actor[0].weight)
    assert record["behavior_loss"] > 0 and record["grad_norm"] > 0
    runner.close()
    # resumed, it continues distilling from its own optimizer state
    resumed = Run(dataclasses.replace(cfg, iterations=3), tmp_path / "student-2")
    resumed.resume(tmp_path / "student" / "latest.pt")
    assert resumed.runner.iteration == 2 and isinstance(resumed.runner.algorithm, Distillation)
    resumed.learn()
    counts = count_iteration(resumed.runner)
    assert counts["syncs_per_step"] == 0
    assert counts["syncs_per_minibatch"] == 0
    assert counts["syncs_per_iteration"] == 1
    resumed.close()


def test_the_student_imitates_the_teacher_after_training(tmp_path: Path, teacher_checkpoint: Path) -> None:
    """After some updates the student's mean action is closer to the teacher's than at the start, on the states
    the student visits."""
    cfg = pendulum(tmp_path, "student", distill__teacher=str(teacher_checkpoint), distill__gradient_length=2,
                   distill__learning_rate=3e-3, iterations=1)
    runner = Run(cfg, tmp_path / "student")
    first = runner.learn()["behavior_loss"]
    runner.cfg.iterations = 15
    last = runner.learn()["behavior_loss"]
    runner.close()
    assert last < 0.5 * first


def test_the_switch_acts_only_in_distillation(teacher_checkpoint: Path) -> None:
    ppo = small_config("pendulum")
    distill = with_algorithm(ppo, "distillation")
    distill.distill.teacher = str(teacher_checkpoint)
    device = torch.device("cpu")
    assert PerfConfig().inert_reason("whole_chunk_distillation", switch_scope(ppo, device)) is not None
    scope = switch_scope(distill, device)
    assert PerfConfig().inert_reason("whole_chunk_distillation", scope) is None
    for name in ("device_adaptive_lr", "critic_chunk_size"):  # no adaptive rate, no critic
        assert PerfConfig().inert_reason(name, scope) is not None


@pytest.mark.parametrize(("changes", "culprit"), [
    ({"distill__teacher": ""}, "distill.teacher"),
    ({"distill__loss": "l1"}, "distill.loss"),
    ({"distill__gradient_length": 0}, "distill.gradient_length"),
    ({"distill__gradient_length": 9}, "distill.gradient_length"),  # 8 steps
    ({"distill__steps_per_env": 0}, "distill.steps_per_env"),
    ({"distill__learning_rate": 0.0}, "distill.learning_rate"),
    ({"distill__max_grad_norm": -1.0}, "distill.max_grad_norm"),
    ({"policy__actor_obs": "privileged"}, "policy.actor_obs"),
    ({"policy__kind": "recurrent"}, "policy.kind"),
])
def test_bad_settings_name_their_key(tmp_path: Path, changes: dict[str, object], culprit: str) -> None:
    cfg = pendulum(tmp_path, "bad", **{"distill__teacher": "x.pt", **changes})
    with pytest.raises(UserError, match=culprit):
        cfg.validate()


def test_ppos_extensions_are_no_settings_of_distillation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rsl_rl refuses RND and symmetry with distillation; here they are not in its settings at all: a key of them is
    one line naming the algorithms that have it."""
    from syncfree.cli import main

    cfg = pendulum(tmp_path, "bad", distill__teacher="x.pt")
    with pytest.raises(UserError, match="unknown key 'rnd'"):
        with_values(cfg, {"rnd.enabled": True})
    assert main(["train", "--task", "pendulum", "--algorithm", "distillation", "--rnd.enabled", "true"]) == 2
    assert "rnd.* are settings of --algorithm ppo or recurrent-ppo, not distillation" in capsys.readouterr().err


@pytest.mark.parametrize(("task", "message"), [
    ("cartpole", "acts in \\('continuous', 1\\) but this env has \\('discrete', 2\\)"),
    ("point-mass", "acts in \\('continuous', 1\\) but this env has \\('continuous', 2\\)"),
])
def test_a_teacher_that_does_not_fit_the_task_is_refused_in_one_line(tmp_path: Path, teacher_checkpoint: Path,
                                                                     task: str, message: str) -> None:
    cfg = with_algorithm(small_config(task), "distillation")
    cfg.distill.teacher, cfg.distill.gradient_length = str(teacher_checkpoint), 4
    with pytest.raises(UserError, match=f"distill.teacher: .*{message}"):
        Runner(cfg)


def test_a_missing_teacher_and_a_ppo_checkpoint_resumed_as_distillation_are_refused(
        tmp_path: Path, teacher_checkpoint: Path) -> None:
    with pytest.raises(UserError, match=r"distill\.teacher: checkpoint .*missing\.pt"):
        Runner(pendulum(tmp_path, "a", distill__teacher=str(tmp_path / "missing.pt")))
    cfg = pendulum(tmp_path, "b", distill__teacher=str(teacher_checkpoint), iterations=4, policy__actor_obs="critic")
    runner = Run(cfg, tmp_path / "b")
    with pytest.raises(UserError, match="trained by ppo but this run trains by distillation"):
        runner.resume(teacher_checkpoint)


def test_a_distilled_student_exports_like_any_policy(tmp_path: Path, teacher_checkpoint: Path) -> None:
    pytest.importorskip("onnx")
    from syncfree.export import export_checkpoint

    run = Run(pendulum(tmp_path, "s", distill__teacher=str(teacher_checkpoint), distill__gradient_length=4),
              tmp_path / "s")
    run.learn()
    run.close()
    files = export_checkpoint(str(tmp_path / "s" / "latest.pt"), tmp_path / "onnx")
    assert any(str(f).endswith(".onnx") for f in files)


def test_phase_counter_sees_no_host_read_in_the_student_s_rollout_step(tmp_path: Path,
                                                                       teacher_checkpoint: Path) -> None:
    runner = Runner(pendulum(tmp_path, "s", distill__teacher=str(teacher_checkpoint), distill__gradient_length=4))
    runner.learn()
    recorder = PhaseCounter()
    with runner.phases.attached(recorder):
        runner.iterate()
    assert recorder.counts["act"].syncs == 0 and recorder.counts["store"].allocations == 0
    runner.close()


@pytest.mark.usefixtures("compile_enabled")
def test_compiled_distillation_compiles_whole_graphs_and_matches_eager(tmp_path: Path,
                                                                      teacher_checkpoint: Path) -> None:
    """`perf.compile=hot`: the rollout step and the chunk loss are whole graphs (`fullgraph=True` fails on a host
    read or a graph break), and the compiled loss and its gradient are the eager ones to float tolerance."""
    cfg = pendulum(tmp_path, "hot", distill__teacher=str(teacher_checkpoint), iterations=2)
    cfg.perf.compile = "hot"
    runner = Run(cfg, tmp_path / "hot")
    record = runner.learn()
    runner.close()
    assert record["behavior_loss"] > 0
    one_step = DistillConfig(teacher="t.pt", gradient_length=6)
    stats = {}
    for mode in ("off", "hot"):
        algo = distiller(6, 7, one_step, compile=mode)
        algo.update()
        stats[mode] = torch.stack([algo.statistics()[k] for k in ("behavior_loss", "grad_norm")])
    torch.testing.assert_close(stats["hot"], stats["off"], rtol=1e-5, atol=0.0)


def test_bench_distills_from_a_teacher_with_a_row_for_the_switch(tmp_path: Path, teacher_checkpoint: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`syncfree bench --algorithm distillation`: every configuration distills; the switch has its leave-one-out row
    and the PPO-only switches are left out; the optimized student reads the host once per iteration."""
    import json

    from syncfree.cli import main

    settings = json.dumps({"distill.teacher": str(teacher_checkpoint)})
    code = main(["bench", "--task", "pendulum", "--algorithm", "distillation", "--settings", settings,
                 "--num_envs", "[16]",
                 "--ablations", "true", "--add_one_in", "false", "--repeats", "1", "--iterations", "1",
                 "--min_seconds", "0", "--compile", "false", "--threads", "1", "--out", str(tmp_path)])
    assert code == 0
    result = json.loads((tmp_path / "results.json").read_text())
    configs = result["sizes"][0]["configs"]
    assert "optimized - whole_chunk_distillation" in configs
    assert "optimized - device_adaptive_lr" in result["skipped_rows"]
    opt, cut = configs["optimized"]["counts"], configs["optimized - whole_chunk_distillation"]["counts"]
    assert (opt["syncs_per_step"], opt["syncs_per_minibatch"], opt["syncs_per_iteration"]) == (0, 0, 1)
    assert opt["ops_per_minibatch"] < cut["ops_per_minibatch"]
    assert "(quick profile), distillation" in capsys.readouterr().out


# -- a recurrent student ------------------------------------------------------------------------------------


RNN_HIDDEN = 12


def recurrent_distiller(steps: int, envs: int, cfg: DistillConfig, seed: int = 0, **perf: object
                        ) -> RecurrentDistillation:
    """A recurrent student (one LSTM layer, then the MLP) and an MLP teacher on random weights; a rollout of random
    observations, teacher actions and episode starts."""
    torch.manual_seed(seed)
    policy_cfg = RecurrentMLPPolicyConfig(actor_hidden=HIDDEN, critic_hidden=[8], init_std=0.1,
                                          obs_norm_std_offset=0.01, rnn=RecurrentCoreConfig(hidden=RNN_HIDDEN))
    spec = ActionSpec("continuous", ACTIONS)
    student = RecurrentMLPPolicy(OBS, OBS, spec, policy_cfg)
    teacher = ActorCritic(OBS, OBS, spec, PolicyConfig(actor_hidden=HIDDEN)).eval().requires_grad_(False)
    algo = RecurrentDistillation(student, teacher, cfg, steps,
                                 dataclasses.replace(PerfConfig(), **{"compile": "off", **perf}), envs,
                                 torch.device("cpu"))
    algo.student_obs.copy_(torch.randn(steps, envs, OBS) * 2.0 + 0.5)
    algo.teacher_actions.copy_(torch.randn(steps, envs, ACTIONS))
    algo.keeps.copy_((torch.rand(steps, envs, 1) > 0.2).float())
    return algo


def test_a_recurrent_student_trains_from_a_teacher_and_reads_the_host_once_per_iteration(
        tmp_path: Path, teacher_checkpoint: Path) -> None:
    cfg = pendulum(tmp_path, "rnn", "recurrent-distillation", distill__teacher=str(teacher_checkpoint))
    cfg.policy.rnn = RecurrentCoreConfig(hidden=16)
    assert algorithm_for(cfg) is RecurrentDistillation
    runner = Run(cfg, tmp_path / "rnn")
    before = runner.runner.policy.actor_core.cells[0].weight_ih.clone()
    record = runner.learn()
    assert not torch.equal(before, runner.runner.policy.actor_core.cells[0].weight_ih)
    assert record["behavior_loss"] > 0
    counts = count_iteration(runner.runner)
    assert (counts["syncs_per_step"], counts["syncs_per_minibatch"], counts["syncs_per_iteration"]) == (0, 0, 1)
    runner.close()
    from syncfree.export import export_checkpoint

    files = export_checkpoint(str(tmp_path / "rnn" / "latest.pt"), tmp_path / "onnx")  # as any recurrent policy
    assert json.loads(files[-1].read_text())["state"]["carried"][0]["input"] == "h_in"


def test_a_teacher_chooses_distillation_and_a_recurrent_policy_the_recurrent_student(
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """Naming a teacher chooses distillation from PPO's preset, with a line saying so; with `policy.kind=recurrent`
    the recurrent student; PPO's settings that distillation shares (the rollout's length) carry over."""
    from syncfree.train.arguments import parse_train_config

    caplog.set_level(logging.INFO, logger="syncfree")
    cfg = parse_train_config(["--task", "pendulum", "--distill.teacher", "t.pt", "--iterations", "3"])
    assert cfg.algorithm == "distillation" and cfg.distill.teacher == "t.pt" and cfg.iterations == 3
    assert cfg.distill.steps_per_env == preset("pendulum").ppo.steps_per_env
    assert "distill.teacher names a teacher: training with --algorithm distillation" in caplog.text
    recurrent = parse_train_config(["--task", "pendulum", "--distill.teacher", "t.pt", "--policy.kind", "recurrent"])
    assert recurrent.algorithm == "recurrent-distillation"
    assert algorithm_for(recurrent) is RecurrentDistillation


def test_switches_listing_judges_a_distillation_run(capsys: pytest.CaptureFixture[str]) -> None:
    from syncfree.cli import main

    assert main(["switches", "--task", "pendulum", "--algorithm", "distillation"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pendulum, distillation")
    line = next(x for x in out.splitlines() if x.startswith("whole_chunk_distillation:"))
    assert line.endswith("live")
    assert "INERT: distillation steps at a fixed rate" in out and "INERT: distillation evaluates no critic" in out
    assert main(["switches", "--algorithm", "distillation"]) == 2


@pytest.mark.parametrize(("change", "message"), [
    (lambda p: p.update({"actor.0.weight": p["actor.0.weight"].to(torch.int64)}),
     r"policy\.actor\.0\.weight: expected a float32 tensor of shape \(\d+, \d+\), found a int64 tensor"),
    (lambda p: p.update({"actor_norm.var": -p["actor_norm.var"] - 1}), r"policy\.actor_norm\.var: holds negative"),
])
def test_a_teacher_checkpoint_is_checked_as_a_resumed_one_before_any_weight_is_copied(
        tmp_path: Path, teacher_checkpoint: Path, change, message: str) -> None:
    """Weights that would load into the teacher, converted (integers) or meaningless (a negative variance), are
    one line naming the field, as a resume or `eval` of the same file says."""
    from syncfree.train import checkpoint

    state = checkpoint.load(teacher_checkpoint)
    change(state["policy"])
    checkpoint.save_atomic(state, tmp_path / "teacher.pt")
    cfg = pendulum(tmp_path, "student", distill__teacher=str(tmp_path / "teacher.pt"))
    with pytest.raises(UserError, match=rf"^distill\.teacher: checkpoint .*teacher\.pt: {message}"):
        Runner(cfg)


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s.update(obs_dims="wide"), "its action_spec or obs_dims is not what a checkpoint records"),
    (lambda s: s.update(action_spec=3), "its action_spec or obs_dims is not what a checkpoint records"),
    (lambda s: s["policy"].update({"actor.0.weight": torch.zeros(2, 2)}), "its policy does not fit its own config"),
    (lambda s: s["policy"].pop("actor.0.bias"), "its policy does not fit its own config"),
    (lambda s: s.update(policy=[1, 2]), "its policy does not fit its own config"),
])
def test_a_hostile_teacher_checkpoint_is_refused_in_one_line(teacher_checkpoint: Path, change,
                                                             message: str) -> None:
    """Fields of the wrong type or shape in a teacher's checkpoint (read as data) end in one line naming it."""
    from syncfree.algo.distillation import load_teacher
    from syncfree.tasks import make_task_env
    from syncfree.train import checkpoint

    cfg, state = checkpoint.read(teacher_checkpoint)
    change(state)
    env = make_task_env(small_config("pendulum"), 4, torch.device("cpu"), 0)
    with pytest.raises(UserError, match=f"distill.teacher: .*{re.escape(message)}"):
        load_teacher(str(teacher_checkpoint), env, lambda path: (cfg, state))
