"""`syncfree.rsl_rl.DistillationRunner` against rsl_rl 5's own (`rsl_rl.runners.DistillationRunner`): the teacher
comes from an RL checkpoint's actor, checkpoints cross both ways and act the same, rsl_rl's distillation keys are
each mapped or refused by name."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("rsl_rl")
from rsl_rl.runners import DistillationRunner as RslRlDistillationRunner
from test_rsl_rl_runner import actions, assert_same_adam_moments, rsl_env, train_cfg

from syncfree.algo import Distillation, RecurrentDistillation
from syncfree.errors import UserError
from syncfree.rsl_rl import DistillationRunner, OnPolicyRunner
from syncfree.tasks.rsl_rl_config import DISTILLATION_MAPPED, RSL_RL_TEACHER, from_rsl_rl

MODEL = {"class_name": "MLPModel", "hidden_dims": [16, 16], "activation": "elu", "obs_normalization": True}


def distillation_cfg(student: str = "mlp", teacher_groups: tuple[str, ...] = ("critic",),
                     teacher_noise: bool = True) -> dict[str, Any]:
    """rsl_rl's distillation runner config: the student reads `policy`, the teacher `teacher_groups` (pendulum's
    `critic` group has the same terms: enough to check which group each network reads); the teacher with a
    distribution or (`teacher_noise` False) without."""
    cfg = {key: value for key, value in train_cfg().items() if key not in ("actor", "critic")}
    cfg["class_name"] = "DistillationRunner"
    cfg["obs_groups"] = {"student": ("policy",), "teacher": teacher_groups}
    cfg["algorithm"] = {"class_name": "Distillation", "num_learning_epochs": 1, "gradient_length": 4,
                        "learning_rate": 1e-3, "max_grad_norm": None, "loss_type": "mse", "optimizer": "adam"}
    student_model = dict(MODEL) if student == "mlp" else {**MODEL, "class_name": "RNNModel", "rnn_type": "lstm",
                                                           "rnn_hidden_dim": 8, "rnn_num_layers": 1}
    cfg["student"] = {**student_model, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 0.1,
                                                            "std_type": "scalar"}}
    cfg["teacher"] = {**MODEL, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0,
                                                    "std_type": "scalar"}} if teacher_noise else dict(MODEL)
    return cfg


@pytest.fixture(scope="module")
def rl_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An RL checkpoint (rsl_rl's layout) of the drop-in's PPO on pendulum: the teacher."""
    folder = tmp_path_factory.mktemp("teacher")
    runner = OnPolicyRunner(rsl_env(), train_cfg(), log_dir=str(folder), device="cpu")
    runner.learn(2)
    return folder / "model_1.pt"


@pytest.mark.parametrize(("student", "teacher_noise"), [("mlp", True), ("rnn", True), ("mlp", False)])
def test_a_student_distills_from_an_rl_checkpoint_and_rsl_rl_loads_it(tmp_path: Path, rl_checkpoint: Path,
                                                                       student: str, teacher_noise: bool,
                                                                       one_thread) -> None:
    cfg = distillation_cfg(student, teacher_noise=teacher_noise)
    ours = DistillationRunner(rsl_env(), copy.deepcopy(cfg), log_dir=str(tmp_path / "ours"), device="cpu")
    assert isinstance(ours.runner.algorithm, RecurrentDistillation if student == "rnn" else Distillation)
    assert ours.runner.algorithm.teacher.actor_group == "critic"
    with pytest.raises(UserError, match="teacher's weights are not loaded"):
        ours.learn(1)
    # from an RL checkpoint: the teacher only, and the iteration stays 0 (rsl_rl's default load_cfg)
    assert ours.load(str(rl_checkpoint)) is None
    assert ours.current_learning_iteration == 0 and ours.alg.teacher_loaded
    saved_actor = torch.load(rl_checkpoint, weights_only=True)["actor_state_dict"]
    if not teacher_noise:  # a teacher without a distribution has no noise parameter to save
        saved_actor = {k: v for k, v in saved_actor.items() if not k.startswith("distribution.")}
    teacher = ours.alg.save()["teacher_state_dict"]
    assert teacher.keys() == saved_actor.keys()
    for key, value in saved_actor.items():
        assert torch.equal(teacher[key], value), key
    student_before = copy.deepcopy(ours.alg.save()["student_state_dict"])
    ours.learn(3)
    assert sorted(p.name for p in (tmp_path / "ours").glob("model_*.pt")) == ["model_0.pt", "model_2.pt"]
    assert any(not torch.equal(v, student_before[k]) for k, v in ours.alg.save()["student_state_dict"].items())

    theirs = RslRlDistillationRunner(rsl_env(), copy.deepcopy(cfg), log_dir=None, device="cpu")
    theirs.load(str(tmp_path / "ours" / "model_2.pt"))  # student, teacher, optimizer, iteration, strictly
    assert theirs.current_learning_iteration == 2
    obs = rsl_env(seed=5).get_observations()
    torch.testing.assert_close(actions(theirs, obs), actions(ours, obs), rtol=0, atol=1e-6)
    theirs.learn(1)  # and rsl_rl trains on from its optimizer state


def test_an_rsl_rl_distillation_checkpoint_loads_into_the_drop_in(tmp_path: Path, rl_checkpoint: Path,
                                                                  one_thread) -> None:
    cfg = distillation_cfg()
    theirs = RslRlDistillationRunner(rsl_env(seed=2), copy.deepcopy(cfg), log_dir=str(tmp_path / "rsl_rl"),
                                     device="cpu")
    theirs.load(str(rl_checkpoint))
    theirs.learn(2)
    ours = DistillationRunner(rsl_env(seed=3), copy.deepcopy(cfg), log_dir=str(tmp_path / "ours"), device="cpu")
    ours.load(str(tmp_path / "rsl_rl" / "model_1.pt"))
    assert ours.current_learning_iteration == 1 and ours.alg.teacher_loaded
    obs = rsl_env(seed=4).get_observations()
    torch.testing.assert_close(actions(ours, obs), actions(theirs, obs), rtol=0, atol=1e-6)
    assert_same_adam_moments(ours, theirs)
    ours.learn(2)


def test_the_mapped_config_distills_with_rsl_rl_s_settings() -> None:
    obs = rsl_env().get_observations()
    cfg = distillation_cfg("rnn")
    cfg["algorithm"].update(loss_type="huber", max_grad_norm=0.5, num_learning_epochs=2, gradient_length=6)
    mapped = from_rsl_rl(cfg, obs, 16, "cpu")
    d = mapped.config.distill
    assert (d.teacher, d.loss, d.max_grad_norm, d.num_epochs, d.gradient_length) == (RSL_RL_TEACHER, "huber", 0.5,
                                                                                     2, 6)
    assert mapped.config.policy.kind == "recurrent" and mapped.config.policy.init_std == 0.1
    assert mapped.teacher is not None and mapped.teacher.actor_obs == "critic" and mapped.teacher_noise
    assert mapped.env_groups() == (["policy"], ["critic"])
    assert from_rsl_rl(distillation_cfg(), obs, 16, "cpu").config.distill.max_grad_norm == 0.0  # None: no clip


@pytest.mark.parametrize(("change", "key"), [
    (lambda c: c["algorithm"].update(rnd_cfg={"weight": 1.0}), "algorithm.rnd_cfg"),
    (lambda c: c["algorithm"].update(optimizer="sgd"), "algorithm.optimizer"),
    (lambda c: c["algorithm"].update(loss_type="l1"), "algorithm.loss_type"),
    (lambda c: c["algorithm"].update(num_mini_batches=4), "algorithm.num_mini_batches"),
    (lambda c: c["teacher"].update(class_name="RNNModel"), "teacher.class_name"),
    (lambda c: c.pop("teacher"), "teacher"),
    (lambda c: c["obs_groups"].update(actor=("policy",)), "obs_groups.actor"),
    (lambda c: c["algorithm"].update(gradient_length="long"), "algorithm.gradient_length"),
    (lambda c: c["algorithm"].update(learning_rate="fast"), "algorithm.learning_rate"),
    (lambda c: c.update(teacher="MLPModel"), "teacher"),
])
def test_a_distillation_key_syncfree_cannot_honour_is_refused_by_name(change, key: str) -> None:
    cfg = distillation_cfg()
    change(cfg)
    with pytest.raises(UserError, match=f"rsl_rl config: {re.escape(key)}:"):
        from_rsl_rl(cfg, rsl_env().get_observations(), 16, "cpu")


def test_the_docs_table_lists_every_distillation_key() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "rsl_rl.md").read_text()
    section = text.split("### Distillation", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([^`]+)` \(Distillation\) \| (.+) \|$", section, flags=re.M))
    assert rows == DISTILLATION_MAPPED
