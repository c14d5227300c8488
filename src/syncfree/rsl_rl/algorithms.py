"""What rsl_rl's runner and its subclasses reach through `runner.alg`, over syncfree's algorithms: `PPO` (rsl_rl's
`PPO`) and `StudentTeacher` (its `Distillation`), each saving and loading rsl_rl's checkpoint layout
(`syncfree.rsl_rl.checkpoint`). A load checks every part it reads (`networks_from_rsl_rl`, `optimizer_from_rsl_rl`,
`rnd_from_rsl_rl`, `iteration_of`) before it copies any into the policy, the optimizer or the runner: a file
refused leaves them as they were."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor, nn

from syncfree.algo.distillation import Distillation
from syncfree.algo.rnd import RND
from syncfree.errors import UserError
from syncfree.policy.actor_critic import ActorCritic
from syncfree.policy.recurrent_mlp import RecurrentMLPPolicy
from syncfree.rsl_rl.checkpoint import (
    checked_tensor,
    from_rsl_rl,
    iteration_of,
    optimizer_from_rsl_rl,
    optimizer_to_rsl_rl,
    rnd_from_rsl_rl,
    rnd_to_rsl_rl,
    to_rsl_rl,
)
from syncfree.rsl_rl.inference import InferencePolicy
from syncfree.train.runner import Runner


class PPO:
    """What rsl_rl's runner and its subclasses reach through `runner.alg`, over syncfree's algorithm."""

    def __init__(self, runner: Runner, actor_groups: list[str]) -> None:
        self._runner = runner
        self.policy = cast(ActorCritic | RecurrentMLPPolicy, runner.policy)
        self.optim = runner.algorithm.optim
        self.optimizer = self.optim.optimizer
        self.inference = InferencePolicy(self.policy, actor_groups)
        self.rnd = runner.algorithm.rnd
        """Random network distillation (rsl_rl's `alg.rnd`), when the config has `rnd_cfg`."""
        self.source = "checkpoint"
        """Named in load errors (the runner sets the file's path)."""

    @property
    def learning_rate(self) -> float:
        return self.optim.current_learning_rate()

    def rnd_from(self, loaded_dict: dict[str, Any]) -> dict[str, Any]:
        """rsl_rl's `rnd_state_dict` and `rnd_optimizer_state_dict` as this run's RND state, checked."""
        if "rnd_state_dict" not in loaded_dict:
            raise UserError(f"{self.source}: no rnd_state_dict (trained without RND; load it with "
                            "load_cfg={..., 'rnd': False} to start the predictor new)")
        return rnd_from_rsl_rl(loaded_dict["rnd_state_dict"], loaded_dict.get("rnd_optimizer_state_dict"),
                               cast(RND, self.rnd), self.source)

    def train_mode(self) -> None:
        self.policy.train()

    def eval_mode(self) -> None:
        self.policy.eval()

    def get_policy(self) -> InferencePolicy:
        return self.inference

    def save(self) -> dict[str, Any]:
        actor, critic = to_rsl_rl(self.policy.state_dict())
        saved = {"actor_state_dict": actor, "critic_state_dict": critic,
                 "optimizer_state_dict": optimizer_to_rsl_rl(self.optim)}
        if self.rnd is not None:  # rsl_rl's names: its runner loads them into its RandomNetworkDistillation
            saved["rnd_state_dict"] = rnd_to_rsl_rl(self.rnd.module.state_dict())
            saved["rnd_optimizer_state_dict"] = self.rnd.optimizer.state_dict()
        return saved

    def load(self, loaded_dict: dict[str, Any], load_cfg: dict[str, bool] | None = None, strict: bool = True) -> bool:
        """rsl_rl's `PPO.load`: the parts `load_cfg` names (all by default), every one checked before any is copied;
        returns whether the caller takes the checkpoint's iteration (checked too: `iteration_of`)."""
        load_cfg = load_cfg or {"actor": True, "critic": True, "optimizer": True, "iteration": True, "rnd": True}
        nets = [net for net in ("actor", "critic") if load_cfg.get(net)]
        for net in nets:
            if f"{net}_state_dict" not in loaded_dict:
                raise UserError(f"{self.source}: no {net}_state_dict")
        actor = loaded_dict["actor_state_dict"] if "actor" in nets else None
        critic = loaded_dict["critic_state_dict"] if "critic" in nets else None
        policy = networks_from_rsl_rl(self.policy, actor, critic, nets, self.source, strict)
        optimizer = (optimizer_from_rsl_rl(self.optim, loaded_dict.get("optimizer_state_dict"), self.source)
                     if load_cfg.get("optimizer") else None)
        load_rnd = load_cfg.get("rnd") and self.rnd is not None  # as rsl_rl: a load_cfg without "rnd" leaves it new
        rnd = self.rnd_from(loaded_dict) if load_rnd else None
        takes_iteration = bool(load_cfg.get("iteration", False))
        if takes_iteration:
            iteration_of(loaded_dict, self.source)
        self.policy.load_state_dict(policy)
        if optimizer is not None:
            self.optim.load_state_dict(optimizer)
        if rnd is not None:
            cast(RND, self.rnd).load_state_dict(rnd)
        return takes_iteration


def networks_from_rsl_rl(policy: nn.Module, actor: dict[str, Tensor] | None, critic: dict[str, Tensor] | None,
                         nets: list[str], source: str, strict: bool, named: str = "", optional: tuple[str, ...] = ()
                         ) -> dict[str, Tensor]:
    """`policy`'s state dict with rsl_rl's actor and/or critic state dicts (`nets` says which are read) in place,
    checked, nothing copied into `policy` yet: with `strict` every key must have its counterpart (those under
    `optional` may be missing), and each tensor this policy's dtype and shape, finite and in range. `named`: how
    rsl_rl's file names the actor's dict, when not `actor_state_dict` (a student, a teacher)."""
    converted, unknown = from_rsl_rl(actor, critic, source)
    own = policy.state_dict()
    wanted = {key for key in own if _net_of(key) in nets and not key.startswith(optional)}

    def name(key: str) -> str:
        return _rsl_rl_name(key).replace("actor_state_dict", named) if named else _rsl_rl_name(key)

    if named:
        unknown = [key.replace("actor_state_dict", named) for key in unknown]
    problems = [f"{key} has no counterpart in this policy" for key in unknown]
    problems += [f"{name(key)} is not in this policy" for key in converted if key not in own]
    problems += [f"{name(key)} is missing" for key in sorted(wanted - set(converted))]
    if strict and problems:
        raise UserError(f"{source}: {problems[0]} ({_hint(problems[0])})")
    for key, value in converted.items():
        if key in own:
            checked_tensor(value, own[key], key, name(key), source)
            own[key] = value
    return own


class StudentTeacher:
    """What rsl_rl's distillation runner reaches through `runner.alg` (its `Distillation`), over syncfree's
    distillation: `save()` / `load()` in rsl_rl's layout (`student_state_dict`, `teacher_state_dict`,
    `optimizer_state_dict`), `teacher_loaded`, `get_policy()` (the student), `learning_rate`, `optimizer`."""

    def __init__(self, runner: Runner, student_groups: list[str], teacher_noise: bool) -> None:
        algorithm = cast(Distillation, runner.algorithm)
        self._runner = runner
        self.policy = cast(ActorCritic | RecurrentMLPPolicy, runner.policy)
        self.student, self.teacher = self.policy, algorithm.teacher
        self.optim = algorithm.optim
        self.optimizer = self.optim.optimizer
        self.inference = InferencePolicy(self.policy, student_groups)
        self.teacher_noise = teacher_noise
        """The teacher's section has a distribution: its noise parameter is saved and loaded."""
        self.teacher_loaded = False
        """Whether `load()` has given the teacher its weights (rsl_rl's runner refuses to learn before)."""
        self.rnd = None
        self.source = "checkpoint"

    @property
    def learning_rate(self) -> float:
        return self.optim.current_learning_rate()

    def train_mode(self) -> None:
        self.policy.train()
        self.teacher.eval()

    def eval_mode(self) -> None:
        self.policy.eval()
        self.teacher.eval()

    def get_policy(self) -> InferencePolicy:
        return self.inference

    def save(self) -> dict[str, Any]:
        teacher = to_rsl_rl(self.teacher.state_dict())[0]
        if not self.teacher_noise:
            teacher = {k: v for k, v in teacher.items() if not k.startswith("distribution.")}
        return {"student_state_dict": to_rsl_rl(self.policy.state_dict())[0], "teacher_state_dict": teacher,
                "optimizer_state_dict": optimizer_to_rsl_rl(self.optim)}

    def load(self, loaded_dict: dict[str, Any], load_cfg: dict[str, bool] | None = None, strict: bool = True) -> bool:
        """rsl_rl's `Distillation.load`: from an RL checkpoint (`actor_state_dict`) the teacher only, by default;
        from a distillation checkpoint the student, the teacher, the optimizer and the iteration; every part checked
        before any is copied."""
        if load_cfg is None:
            load_cfg = ({"teacher": True, "iteration": False} if "actor_state_dict" in loaded_dict else
                        {"student": True, "teacher": True, "optimizer": True, "iteration": True})
        student = teacher = optimizer = None
        if load_cfg.get("student"):
            if "student_state_dict" not in loaded_dict:
                raise UserError(f"{self.source}: no student_state_dict (an RL checkpoint: load its actor as the "
                                "teacher with load_cfg={'teacher': True})")
            student = networks_from_rsl_rl(self.policy, loaded_dict["student_state_dict"], None, ["actor"],
                                           self.source, strict, "student_state_dict")
        if load_cfg.get("teacher"):
            name = "teacher_state_dict" if "teacher_state_dict" in loaded_dict else "actor_state_dict"
            if name not in loaded_dict:
                raise UserError(f"{self.source}: no teacher_state_dict nor actor_state_dict")
            teacher = networks_from_rsl_rl(self.teacher, loaded_dict[name], None, ["actor"], self.source, strict,
                                           name, optional=() if self.teacher_noise else ("head.",))
        if load_cfg.get("optimizer"):
            optimizer = optimizer_from_rsl_rl(self.optim, loaded_dict.get("optimizer_state_dict"), self.source)
        takes_iteration = bool(load_cfg.get("iteration", False))
        if takes_iteration:
            iteration_of(loaded_dict, self.source)
        if student is not None:
            self.policy.load_state_dict(student)
        if teacher is not None:
            self.teacher.load_state_dict(teacher)
            self.teacher_loaded = True
        if optimizer is not None:
            self.optim.load_state_dict(optimizer)
        return takes_iteration


def _net_of(key: str) -> str:
    part = key.split(".", 1)[0]
    return "critic" if part.startswith("critic") else "actor"


def _rsl_rl_name(key: str) -> str:
    """A syncfree policy key as rsl_rl names it."""
    actor, critic = to_rsl_rl({key: torch.zeros(1)})
    return f"{'actor' if actor else 'critic'}_state_dict.{next(iter(actor or critic))}"


def _hint(problem: str) -> str:
    if "std_param" in problem:
        return "the checkpoint's distribution_cfg.std_type differs from this config's"
    if "obs_normalizer" in problem:
        return "the checkpoint's obs_normalization differs from this config's"
    return "the checkpoint was trained with other model settings"
