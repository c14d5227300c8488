"""rsl_rl 5's `train_cfg` (the dict its `OnPolicyRunner` takes: Isaac Lab's and mjlab's runner configs passed
through `dataclasses.asdict`) read whole into a syncfree `TrainConfig`: for `syncfree.rsl_rl.OnPolicyRunner` and
for the `mjlab:` tasks.

Every key is one of three kinds, and nothing else is accepted:
- **mapped** to a syncfree setting (`MAPPED`, with where it goes);
- **read elsewhere**: by the user's training script or env wrapper, not by rsl_rl's runner (`READ_ELSEWHERE`), so
  the runner leaves it to them, as rsl_rl's does;
- **refused**, in one line naming the key and why: a value syncfree cannot honour (RND, a CNN model, another
  optimizer...), or a key neither rsl_rl nor syncfree knows.

rsl_rl 5's `RNNModel` (actor and critic) maps to the recurrent MLP policy, trained by `recurrent-ppo` on one BPTT
segment per env's rollout, as rsl_rl trains it (a distillation's recurrent student: `recurrent-distillation`).

`docs/rsl_rl.md` has the table.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast

from syncfree.algo.configs import (
    DistillationTrainConfig,
    PPOTrainConfig,
    RecurrentDistillationTrainConfig,
    RecurrentPPOTrainConfig,
    convert,
)
from syncfree.algo.settings import DistillConfig, PPOConfig, RNDConfig, SymmetryConfig
from syncfree.config import TrainConfig, flatten, to_dict, validate, with_values
from syncfree.core.imports import load_callable
from syncfree.errors import UserError
from syncfree.policy.settings import PolicyConfig, RecurrentCoreConfig, RecurrentMLPPolicyConfig

RSL_RL_STD_OFFSET = 0.01
"""rsl_rl's `EmpiricalNormalization` divides by its running standard deviation plus this."""

MAPPED: dict[str, str] = {
    "seed": "seed",
    "num_steps_per_env": "ppo.steps_per_env (a distillation's: distill.steps_per_env)",
    "save_interval": "the runner's checkpoint interval (model_<it>.pt, as rsl_rl)",
    "max_iterations": "iterations (the length the schedules see; the script passes it to learn())",
    "obs_groups": "the observation groups the actor and the critic read, concatenated",
    "logger": "log.tensorboard (tensorboard) or log.wandb (wandb, or {'class_name': 'WandbLogWriter', "
              "'project_name': ...})",
    "wandb_project": "log.wandb_project",
    "neptune_project": "no effect (the neptune logger is refused)",
    "check_for_nan": "always on: the deferred non-finite monitor stops the run at the iteration's end, naming the envs",
    "torch_compile_mode": "perf.compile=step (the mode's name is not read); without it, syncfree's default, auto",
    "empirical_normalization": "policy.normalize_obs (rsl_rl < 5)",
    "syncfree": "syncfree settings by dotted key, applied last ({'perf.compile': 'off'})",
    "algorithm.class_name": "PPO only",
    "algorithm.num_learning_epochs": "ppo.num_epochs",
    "algorithm.num_mini_batches": "ppo.num_minibatches",
    "algorithm.clip_param": "ppo.clip_param",
    "algorithm.gamma": "ppo.gamma",
    "algorithm.lam": "ppo.lam",
    "algorithm.value_loss_coef": "ppo.value_loss_coef",
    "algorithm.entropy_coef": "ppo.entropy_coef",
    "algorithm.learning_rate": "ppo.learning_rate",
    "algorithm.max_grad_norm": "ppo.max_grad_norm (ppo.grad_clip=per_network: actor and critic each, as rsl_rl 5)",
    "algorithm.use_clipped_value_loss": "ppo.clipped_value_loss",
    "algorithm.schedule": "ppo.schedule (adaptive adapts per minibatch, as rsl_rl)",
    "algorithm.desired_kl": "ppo.desired_kl (None: the fixed schedule, as rsl_rl)",
    "algorithm.normalize_advantage_per_mini_batch": "False only (advantages are normalized over the rollout)",
    "algorithm.optimizer": "adam (AdamW, no decay) or adamw (weight decay 0.01, torch's default)",
    "algorithm.use_mixed_precision": "perf.autocast=bf16",
    "algorithm.rnd_cfg": "rnd (MLPModel or RNNModel): weight x the env's step_dt -> rnd.weight (rsl_rl scales it so), "
                         "weight_schedule {mode, initial_step, final_step, final_value} -> rnd.weight_schedule and its "
                         "steps, num_outputs, predictor_hidden_dims, target_hidden_dims, activation, "
                         "state_normalization, reward_normalization, learning_rate -> the rnd setting of that name",
    "obs_groups.rnd_state": "rnd.state: the actor's groups (policy) or the critic's (critic)",
    "algorithm.symmetry_cfg": "symmetry (MLPModel, and RNNModel, which rsl_rl refuses): use_data_augmentation -> "
                              "symmetry.augment, "
                              "use_mirror_loss -> symmetry.mirror_loss, mirror_loss_coeff -> symmetry.mirror_loss_coef "
                              "(both off: symmetry.log_only); data_augmentation_func (a callable or 'module:name') "
                              "is the env's mirror, its first reflection",
    "algorithm.share_cnn_encoders": "False only",
    "algorithm.grad_reduce_bucket_mb": "no effect (syncfree all-reduces the gradients in one flat buffer)",
    "model.class_name": "MLPModel, or RNNModel for both actor and critic (policy.kind=recurrent)",
    "model.hidden_dims": "policy.actor_hidden / policy.critic_hidden (-1: the observation's width)",
    "model.activation": "policy.activation (the same for actor and critic; elu, tanh, relu, or swish: silu)",
    "model.obs_normalization": "policy.normalize_obs with rsl_rl's formula (the same for actor and critic)",
    "model.distribution_cfg": "actor: GaussianDistribution; critic: None",
    "model.distribution_cfg.init_std": "policy.init_std",
    "model.distribution_cfg.std_type": "policy.std_type (scalar or log)",
    "model.distribution_cfg.std_range": "rsl_rl's default (1e-6, 1e6) only",
    "model.distribution_cfg.learn_std": "True only",
    "model.cnn_cfg": "None only",
    "model.rnn_type": "policy.rnn.core (RNNModel; lstm or gru, the same for actor and critic)",
    "model.rnn_hidden_dim": "policy.rnn.hidden (RNNModel; the same for actor and critic)",
    "model.rnn_num_layers": "policy.rnn.num_layers (RNNModel; the same for actor and critic)",
    "policy.*": "rsl_rl < 5's ActorCritic section: actor_hidden_dims, critic_hidden_dims, activation, "
                "init_noise_std, noise_std_type, actor_obs_normalization, critic_obs_normalization",
}
"""rsl_rl key (`model.` for both `actor` and `critic`) -> the syncfree setting it becomes, or the one value
accepted."""

DISTILLATION_MAPPED: dict[str, str] = {
    "algorithm.class_name": "Distillation: distill (the runner loads the teacher with load())",
    "algorithm.num_learning_epochs": "distill.num_epochs",
    "algorithm.gradient_length": "distill.gradient_length",
    "algorithm.learning_rate": "distill.learning_rate",
    "algorithm.max_grad_norm": "distill.max_grad_norm (None: 0, no clipping)",
    "algorithm.loss_type": "distill.loss (mse or huber)",
    "algorithm.optimizer": "adam only",
    "algorithm.use_mixed_precision": "perf.autocast=bf16",
    "algorithm.rnd_cfg": "None only (rsl_rl refuses RND with distillation too)",
    "algorithm.symmetry_cfg": "None only (rsl_rl refuses symmetry with distillation too)",
    "algorithm.grad_reduce_bucket_mb": "no effect",
    "obs_groups.student": "the groups the student reads (the env's policy group)",
    "obs_groups.teacher": "the groups the teacher reads (the env's critic group; policy.actor_obs=critic)",
    "student": "policy (an MLPModel, or an RNNModel: policy.kind=recurrent), as the actor's section maps",
    "teacher": "the teacher's MLPModel (its weights: the checkpoint load() reads)",
}
"""A distillation runner's keys (rsl_rl's `DistillationRunner` config) that differ from PPO's."""

RSL_RL_TEACHER = "rsl_rl teacher (loaded by the runner)"
"""`distill.teacher` of a drop-in distillation run: the runner builds the teacher from the config's `teacher`
section and `load()` gives it its weights."""

_RSL_RL_DISTILLATION = dict(num_learning_epochs=1, gradient_length=15, learning_rate=1e-3, max_grad_norm=None,
                            loss_type="mse")
"""rsl_rl 5's `Distillation` defaults, for the keys a config leaves out."""

READ_ELSEWHERE: dict[str, str] = {
    "class_name": "the runner class your script builds",
    "experiment_name": "your script (the log folder)",
    "run_name": "your script (the log folder)",
    "resume": "your script (which checkpoint it loads)",
    "load_run": "your script (which checkpoint it loads)",
    "load_checkpoint": "your script (which checkpoint it loads)",
    "clip_actions": "the env wrapper (Isaac Lab's, mjlab's)",
    "upload_model": "your runner's save() (mjlab's)",
    "wandb_tags": "your script",
    "device": "the runner's device argument, as rsl_rl",
    "multi_gpu": "set by the runner from WORLD_SIZE",
}
"""Top-level keys the runner does not read: the user's script or env wrapper does."""

_RSL_RL_PPO = dict(num_learning_epochs=5, num_mini_batches=4, clip_param=0.2, gamma=0.99, lam=0.95,
                   value_loss_coef=1.0, entropy_coef=0.01, learning_rate=1e-3, max_grad_norm=1.0,
                   use_clipped_value_loss=True, schedule="adaptive", desired_kl=0.01)
"""rsl_rl 5's `PPO` defaults, for the keys a config leaves out."""

_OFF_ONLY = {"share_cnn_encoders": "syncfree's drop-in has no CNN models",
             "normalize_advantage_per_mini_batch": "syncfree normalizes advantages over the whole rollout"}
"""PPO keys accepted only when off, and why."""

_ACTIVATIONS = {"elu": "elu", "tanh": "tanh", "relu": "relu", "swish": "silu"}
"""rsl_rl's activation names syncfree's MLPs have -> syncfree's name (rsl_rl's `swish` is `torch.nn.SiLU`)."""


@dataclasses.dataclass
class Mapped:
    """A `train_cfg` read: the syncfree config, the groups each network reads, and the runner's own keys."""

    config: TrainConfig
    obs_groups: dict[str, list[str]]
    """`actor` and `critic` -> the observation groups each reads, in order."""
    save_interval: int
    num_steps_per_env: int
    mirror_function: Callable[..., Any] | None = None
    """`algorithm.symmetry_cfg.data_augmentation_func`, resolved: rsl_rl's `f(env=, obs=, actions=)`."""
    teacher: PolicyConfig | None = None
    """Distillation: the teacher's network (its actor reading the `critic` group, which the teacher's groups
    fill)."""
    teacher_noise: bool = False
    """Distillation: the teacher's section has a distribution (its checkpoint then holds its noise parameter)."""

    def env_groups(self) -> tuple[list[str], list[str]]:
        """The groups the env's `policy` and `critic` observations are made of: the actor's and the critic's, or
        in distillation the student's and the teacher's."""
        if self.teacher is not None:
            return self.obs_groups["student"], self.obs_groups["teacher"]
        return self.obs_groups["actor"], self.obs_groups["critic"]


def refuse(key: str, why: str) -> UserError:
    return UserError(f"rsl_rl config: {key}: {why}")


def _float(value: Any, key: str) -> float:
    """A number setting (an int or a float, NumPy's too); one line naming the key otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise refuse(key, f"{value!r}: a number")
    return float(value)


def _int(value: Any, key: str) -> int:
    """An integer setting (a float of integral value too, as a YAML file may write one)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value).is_integer():
        raise refuse(key, f"{value!r}: an integer")
    return value if isinstance(value, int) else int(float(value))


def _interval(value: Any, key: str) -> int:
    """An integer >= 1 (a count of iterations between two events)."""
    number = _int(value, key)
    if number < 1:
        raise refuse(key, f"{value!r}: an integer >= 1")
    return number


def _bool(value: Any, key: str) -> bool:
    """A switch: True or False (or 1 or 0); a string such as 'false' would read as on."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise refuse(key, f"{value!r}: True or False")


def _section(value: Any, key: str) -> dict[str, Any]:
    """A section of settings: a dict."""
    if not isinstance(value, Mapping):
        raise refuse(key, f"a {type(value).__name__}: a dict of its settings")
    return dict(value)


def from_rsl_rl(train_cfg: Mapping[str, Any], obs: Mapping[str, Any] | None, num_envs: int, device: str,
                step_dt: float | None = None) -> Mapped:
    """`train_cfg` as a syncfree config for `num_envs` envs on `device`; `obs` is the env's first observation
    (its groups and their widths; None before the env exists: then `obs_groups` must name both sets and no layer
    width may be -1); `step_dt` the env's control step in seconds (`env.unwrapped.step_dt`, which scales RND's
    weight as rsl_rl scales it). Raises `UserError` naming the first key refused."""
    cfg = _section(train_cfg, "train_cfg")
    if isinstance(cfg.get("algorithm"), Mapping) and _short(str(cfg["algorithm"].get("class_name", ""))) \
            == "Distillation":
        return distillation_from_rsl_rl(cfg, obs, num_envs, device)
    for key in cfg:
        if key not in MAPPED and key not in READ_ELSEWHERE and key not in ("algorithm", "actor", "critic", "policy"):
            raise refuse(key, "not a key of rsl_rl 5's runner config (nor one syncfree maps)")
    for key in ("num_steps_per_env", "save_interval", "algorithm"):
        if key not in cfg:
            raise refuse(key, "missing (rsl_rl's runner needs it)")
    out = PPOTrainConfig(task="rsl_rl", device=device)
    out.env.num_envs = num_envs
    out.seed = _int(cfg.get("seed", 42), "seed")
    out.iterations = _int(cfg.get("max_iterations") or out.iterations, "max_iterations")
    algorithm = _section(cfg["algorithm"], "algorithm")
    out.rnd = rnd_config(algorithm.pop("rnd_cfg", None), step_dt)
    sets = ("actor", "critic", "rnd_state") if out.rnd.enabled else ("actor", "critic")
    obs_groups = resolve_obs_groups(cfg.get("obs_groups") or {}, obs, sets)
    if out.rnd.enabled:
        out.rnd.state = rnd_state(obs_groups)
    widths = {name: sum(int(obs[g].shape[-1]) for g in groups) if obs is not None else -1
              for name, groups in obs_groups.items()}
    symmetry, mirror_function = symmetry_config(algorithm.pop("symmetry_cfg", None))
    out.ppo = dataclasses.replace(ppo_config(algorithm), steps_per_env=_int(cfg["num_steps_per_env"],
                                                                                      "num_steps_per_env"))
    out.symmetry = symmetry
    policy = policy_config(cfg, widths)
    if isinstance(policy, RecurrentMLPPolicyConfig):  # symmetry too (rsl_rl refuses it): see docs/symmetry.md
        out = convert(out, RecurrentPPOTrainConfig)
    out.policy = policy
    steps = out.ppo.steps_per_env
    return Mapped(runner_settings(out, cfg), obs_groups, _interval(cfg["save_interval"], "save_interval"), steps,
                  mirror_function)


def runner_settings(out: ConfigT, cfg: Mapping[str, Any]) -> ConfigT:
    """The settings every runner config has: mixed precision, compile, the logger, and the `syncfree` overrides
    (applied last)."""
    if cfg["algorithm"].get("use_mixed_precision"):
        out.perf = dataclasses.replace(out.perf, autocast="bf16")
    if cfg.get("torch_compile_mode") is not None:
        out.perf = dataclasses.replace(out.perf, compile="step")
    logger, project = log_writer(cfg.get("logger", "tensorboard"), cfg.get("wandb_project"))
    out.log.tensorboard = logger == "tensorboard"
    out.log.wandb = logger == "wandb"
    out.log.progress = True
    if project:
        out.log.wandb_project = project
    overrides = cfg.get("syncfree") or {}
    if not isinstance(overrides, Mapping):
        raise refuse("syncfree", "a dict of syncfree settings by dotted key ({'perf.compile': 'off'})")
    changed = apply_overrides(out, overrides)
    moved = _moved_keys(to_dict(out)["policy"], to_dict(changed)["policy"])
    if moved:
        raise refuse(f"syncfree.policy.{moved[0]}", "the networks are the config's model sections, so that rsl_rl "
                     "loads this runner's checkpoints into the models they name; change them there (a network "
                     "rsl_rl's models cannot build trains with `syncfree train`)")
    return changed


def distillation_from_rsl_rl(cfg: dict[str, Any], obs: Mapping[str, Any] | None, num_envs: int,
                             device: str) -> Mapped:
    """A distillation runner's `train_cfg` (`algorithm.class_name` Distillation, `student` and `teacher` model
    sections, `obs_groups` with `student` and `teacher` sets) as a syncfree config that distills (`distill`)."""
    for key in ("actor", "critic", "policy"):
        if key in cfg:
            raise refuse("algorithm.class_name", f"Distillation reads student and teacher model sections; this config "
                         f"has a {key} section (a PPO config?)")
    for key in cfg:
        if key not in MAPPED and key not in READ_ELSEWHERE and key not in ("algorithm", "student", "teacher"):
            raise refuse(key, "not a key of rsl_rl 5's distillation runner config (nor one syncfree maps)")
    for key in ("num_steps_per_env", "save_interval", "student", "teacher"):
        if key not in cfg:
            raise refuse(key, "missing (rsl_rl's distillation runner needs it)")
    alg = dict(cfg["algorithm"])
    alg.pop("class_name")
    for key in ("rnd_cfg", "symmetry_cfg"):
        if alg.pop(key, None):
            raise refuse(f"algorithm.{key}", "not with Distillation (rsl_rl refuses it too)")
    alg.pop("grad_reduce_bucket_mb", None)
    alg.pop("use_mixed_precision", None)  # perf.autocast, set by `runner_settings`
    optimizer = alg.pop("optimizer", "adam")
    if optimizer != "adam":
        raise refuse("algorithm.optimizer", f"{optimizer!r}: syncfree's distillation steps with Adam")
    values = {**_RSL_RL_DISTILLATION, **alg}
    unknown = sorted(set(values) - set(_RSL_RL_DISTILLATION))
    if unknown:
        raise refuse(f"algorithm.{unknown[0]}", "not a key of rsl_rl 5's Distillation (nor one syncfree maps)")
    if values["loss_type"] not in ("mse", "huber"):
        raise refuse("algorithm.loss_type", f"{values['loss_type']!r}: mse or huber")
    obs_groups = resolve_obs_groups(cfg.get("obs_groups") or {}, obs, ("student", "teacher"))
    widths = {name: sum(int(obs[g].shape[-1]) for g in groups) if obs is not None else -1
              for name, groups in obs_groups.items()}
    student = _section(cfg["student"], "student")
    policy = policy_config({"actor": student, "critic": {**student, "distribution_cfg": None}},
                           {"actor": widths["student"], "critic": widths["student"]})
    teacher = model(_section(cfg["teacher"], "teacher"), "teacher", stochastic=None)
    if teacher.rnn is not None:
        raise refuse("teacher.class_name", "RNNModel: syncfree's teacher is an MLPModel")
    hidden = [widths["teacher"] if h == -1 else h for h in teacher.hidden]
    if -1 in hidden:
        raise refuse("teacher.hidden_dims", "-1 (the input's width) needs the env's observations")
    teacher_policy = PolicyConfig(actor_hidden=hidden, critic_hidden=[1], activation=teacher.activation,
                                  init_std=teacher.init_std, normalize_obs=teacher.normalize,
                                  obs_norm_std_offset=RSL_RL_STD_OFFSET if teacher.normalize else 0.0,
                                  std_type=teacher.std_type, actor_obs="critic")
    kind = RecurrentDistillationTrainConfig if isinstance(policy, RecurrentMLPPolicyConfig) else DistillationTrainConfig
    out = kind(task="rsl_rl", device=device, policy=policy)
    out.env.num_envs = num_envs
    out.seed = _int(cfg.get("seed", 42), "seed")
    out.iterations = _int(cfg.get("max_iterations") or out.iterations, "max_iterations")
    max_grad_norm = values["max_grad_norm"]
    out.distill = DistillConfig(teacher=RSL_RL_TEACHER, steps_per_env=_int(cfg["num_steps_per_env"], "num_steps_per_env"),
                                loss=values["loss_type"],
                                gradient_length=_int(values["gradient_length"], "algorithm.gradient_length"),
                                num_epochs=_int(values["num_learning_epochs"], "algorithm.num_learning_epochs"),
                                learning_rate=_float(values["learning_rate"], "algorithm.learning_rate"),
                                max_grad_norm=_float(max_grad_norm, "algorithm.max_grad_norm") if max_grad_norm else 0.0)
    steps = out.distill.steps_per_env
    return Mapped(runner_settings(out, cfg), obs_groups, _interval(cfg["save_interval"], "save_interval"), steps, None,
                  teacher_policy,
                  "distribution_cfg" in cfg["teacher"] and cfg["teacher"]["distribution_cfg"] is not None)


def _short(class_name: str) -> str:
    """A class name without its module (`rsl_rl.algorithms:Distillation` -> `Distillation`)."""
    return class_name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


_SYMMETRY_KEYS = ("use_data_augmentation", "use_mirror_loss", "mirror_loss_coeff", "data_augmentation_func", "env")


def symmetry_config(sym: Any) -> tuple[SymmetryConfig, Callable[..., Any] | None]:
    """`algorithm.symmetry_cfg` as the `symmetry` section and its mirror function (None: symmetry off, as rsl_rl
    reads a None or empty section)."""
    if not sym:
        return SymmetryConfig(), None
    if not isinstance(sym, Mapping):
        raise refuse("algorithm.symmetry_cfg", f"{sym!r}: a dict of rsl_rl's Symmetry arguments, or None")
    unknown = sorted(set(map(str, sym)) - set(_SYMMETRY_KEYS))
    if unknown:
        raise refuse(f"algorithm.symmetry_cfg.{unknown[0]}", f"not an argument of rsl_rl's Symmetry (has "
                     f"{', '.join(_SYMMETRY_KEYS[:4])})")
    function = sym.get("data_augmentation_func")
    if isinstance(function, str):
        name = function if ":" in function else ":".join(function.rsplit(".", 1))
        function = load_callable(name, f"rsl_rl config: algorithm.symmetry_cfg.data_augmentation_func={function!r}")
    if not callable(function):
        raise refuse("algorithm.symmetry_cfg.data_augmentation_func",
                     f"{function!r}: a callable f(env, obs, actions) or its 'module:name'")
    key = "algorithm.symmetry_cfg"
    augment = _bool(sym.get("use_data_augmentation") or False, f"{key}.use_data_augmentation")
    mirror_loss = _bool(sym.get("use_mirror_loss") or False, f"{key}.use_mirror_loss")
    return SymmetryConfig(augment=augment, mirror_loss=mirror_loss,
                          mirror_loss_coef=_float(sym.get("mirror_loss_coeff") or 0.0, f"{key}.mirror_loss_coeff"),
                          log_only=not (augment or mirror_loss)), function


_RND_KEYS = ("weight", "weight_schedule", "reward_normalization", "state_normalization", "learning_rate", "num_outputs",
             "predictor_hidden_dims", "target_hidden_dims", "activation")
"""The arguments of rsl_rl's `RandomNetworkDistillation` a config gives (the runner adds the others)."""

_RND_SCHEDULE_KEYS = {"constant": (), "step": ("final_step", "final_value"),
                      "linear": ("initial_step", "final_step", "final_value")}


def rnd_config(rnd: Any, step_dt: float | None) -> RNDConfig:
    """`algorithm.rnd_cfg` as the `rnd` section (None or empty: off, as rsl_rl reads it)."""
    if not rnd:
        return RNDConfig()
    if not isinstance(rnd, Mapping):
        raise refuse("algorithm.rnd_cfg", f"{rnd!r}: a dict of rsl_rl's RandomNetworkDistillation arguments, or None")
    unknown = sorted(set(rnd) - set(_RND_KEYS))
    if unknown:
        raise refuse(f"algorithm.rnd_cfg.{unknown[0]}", f"not an argument of rsl_rl's RandomNetworkDistillation (has "
                     f"{', '.join(_RND_KEYS)})")
    for key in ("num_outputs", "predictor_hidden_dims", "target_hidden_dims"):
        if key not in rnd:
            raise refuse(f"algorithm.rnd_cfg.{key}", "missing (rsl_rl's RandomNetworkDistillation needs it)")
    if step_dt is None:
        raise refuse("algorithm.rnd_cfg.weight", "rsl_rl multiplies it by the env's step_dt (env.unwrapped.step_dt), "
                     "which this env does not have")
    schedule = rnd.get("weight_schedule") or {"mode": "constant"}
    mode = schedule.get("mode") if isinstance(schedule, Mapping) else None
    if mode not in _RND_SCHEDULE_KEYS:
        raise refuse("algorithm.rnd_cfg.weight_schedule", f"{schedule!r}: a dict with mode constant, step or linear")
    for key in _RND_SCHEDULE_KEYS[mode]:
        if key not in schedule:
            raise refuse(f"algorithm.rnd_cfg.weight_schedule.{key}", f"missing (the {mode} schedule reads it)")
    key, steps = "algorithm.rnd_cfg", "algorithm.rnd_cfg.weight_schedule"
    out = RNDConfig(enabled=True, weight=_float(rnd.get("weight", 0.0), f"{key}.weight") * float(step_dt),
                    weight_schedule=mode, initial_step=_int(schedule.get("initial_step", 0), f"{steps}.initial_step"),
                    final_step=_int(schedule.get("final_step", 0), f"{steps}.final_step"),
                    final_value=_float(schedule.get("final_value", 0.0), f"{steps}.final_value"),
                    num_outputs=_int(rnd["num_outputs"], f"{key}.num_outputs"),
                    predictor_hidden=_hidden(rnd["predictor_hidden_dims"], "algorithm.rnd_cfg.predictor_hidden_dims"),
                    target_hidden=_hidden(rnd["target_hidden_dims"], "algorithm.rnd_cfg.target_hidden_dims"),
                    activation=_activation(rnd.get("activation", "elu"), "algorithm.rnd_cfg.activation"),
                    state_normalization=_bool(rnd.get("state_normalization", False), f"{key}.state_normalization"),
                    reward_normalization=_bool(rnd.get("reward_normalization", False),
                                               f"{key}.reward_normalization"),
                    learning_rate=_float(rnd.get("learning_rate", 1e-3), f"{key}.learning_rate"))
    try:
        out.validate()
    except UserError as e:
        raise refuse("algorithm.rnd_cfg", str(e)) from None
    return out


def rnd_state(obs_groups: dict[str, list[str]]) -> Literal["policy", "critic"]:
    """`obs_groups.rnd_state` as `rnd.state`: syncfree's networks read the actor's or the critic's observation."""
    for state, name in (("policy", "actor"), ("critic", "critic")):
        if obs_groups["rnd_state"] == obs_groups[name]:
            return state  # type: ignore[return-value]
    raise refuse("obs_groups.rnd_state", f"{obs_groups['rnd_state']!r}: syncfree's RND reads the actor's groups "
                 f"({obs_groups['actor']!r}) or the critic's ({obs_groups['critic']!r})")


def log_writer(logger: Any, wandb_project: Any) -> tuple[str, str | None]:
    """rsl_rl's `logger`, a name or (rsl_rl 5.5) `{"class_name": ..., "project_name": ...}`, as `tensorboard` or
    `wandb` and the W&B project."""
    if isinstance(logger, Mapping):
        writer = dict(logger)
        name = str(writer.pop("class_name", ""))
        project = writer.pop("project_name", wandb_project)
        if name != "WandbLogWriter" or writer:
            extra = f"; {sorted(writer)[0]!r} is not read" if writer else ""
            raise refuse("logger", f"{name!r}: syncfree logs to tensorboard or W&B (WandbLogWriter){extra}")
        return "wandb", None if project is None else str(project)
    if logger not in ("tensorboard", "wandb"):
        raise refuse("logger", f"{logger!r}: syncfree logs to tensorboard or wandb (neptune is not supported)")
    return str(logger), None if wandb_project is None else str(wandb_project)


def resolve_obs_groups(obs_groups: Mapping[str, Sequence[str]], obs: Mapping[str, Any] | None,
                       sets: Sequence[str] = ("actor", "critic")) -> dict[str, list[str]]:
    """rsl_rl's rules: a set the config names reads its groups (each must exist); a set it leaves out reads the
    group of its own name if the env has one, else `policy`. `obs` None: the groups are not checked, and every
    set must be named. `sets`: the sets the algorithm reads (`rnd_state` with RND)."""
    groups = _keys(obs) if obs is not None else None
    resolved: dict[str, list[str]] = {}
    for name, listed in _section(obs_groups, "obs_groups").items():
        if name not in sets:
            raise refuse(f"obs_groups.{name}", f"only the {' and '.join(sets)} sets are read" + (
                "" if name != "rnd_state" else " (rnd_state needs algorithm.rnd_cfg)"))
        if isinstance(listed, str) or not isinstance(listed, Sequence) or not listed or not all(
                isinstance(group, str) for group in listed):
            raise refuse(f"obs_groups.{name}", f"{listed!r}: a non-empty list of observation groups")
        for group in listed:
            if groups is not None and group not in groups:
                raise refuse(f"obs_groups.{name}", f"the env has no observation group {group!r} (has "
                             f"{', '.join(groups)})")
        resolved[name] = list(listed)
    for name in sets:
        if name not in resolved:
            if groups is None:
                raise refuse("obs_groups", f"no {name!r} set (name both sets: the env is not built yet)")
            if name in groups:
                resolved[name] = [name]
            elif "policy" in groups:
                resolved[name] = ["policy"]
            else:
                raise refuse("obs_groups", f"no {name!r} set and the env has neither a {name!r} nor a 'policy' "
                             f"group (has {', '.join(groups)})")
    return resolved


def _keys(obs: Mapping[str, Any]) -> list[str]:
    return list(map(str, obs.keys()))


def ppo_config(alg: dict[str, Any]) -> PPOConfig:
    """The `algorithm` section as `PPOConfig`, from rsl_rl's defaults for what it leaves out."""
    class_name = str(alg.pop("class_name", "PPO"))
    if class_name.rsplit(":", 1)[-1].rsplit(".", 1)[-1] != "PPO":
        raise refuse("algorithm.class_name", f"{class_name!r}: only PPO is mapped (not distillation)")
    for key, why in _OFF_ONLY.items():
        value = alg.pop(key, None)
        if value:  # None, False and {} are off, as rsl_rl reads them
            raise refuse(f"algorithm.{key}", f"{value!r}: {why}")
    alg.pop("grad_reduce_bucket_mb", None)
    alg.pop("use_mixed_precision", None)  # perf.autocast, set by the caller
    optimizer = alg.pop("optimizer", "adam")
    if optimizer not in ("adam", "adamw"):
        raise refuse("algorithm.optimizer", f"{optimizer!r}: syncfree steps with AdamW (adam or adamw)")
    values = {**_RSL_RL_PPO, **alg}
    unknown = sorted(set(values) - set(_RSL_RL_PPO))
    if unknown:
        raise refuse(f"algorithm.{unknown[0]}", "not a key of rsl_rl 5's PPO (nor one syncfree maps)")
    schedule, desired_kl = values["schedule"], values["desired_kl"]
    if schedule not in ("adaptive", "fixed"):
        raise refuse("algorithm.schedule", f"{schedule!r}: adaptive or fixed")
    if desired_kl is None:
        schedule, desired_kl = "fixed", _RSL_RL_PPO["desired_kl"]  # rsl_rl adapts only with a desired KL
    def number(name: str) -> float:
        return _float(values[name], f"algorithm.{name}")

    return PPOConfig(
        num_epochs=_int(values["num_learning_epochs"], "algorithm.num_learning_epochs"),
        num_minibatches=_int(values["num_mini_batches"], "algorithm.num_mini_batches"),
        learning_rate=number("learning_rate"), schedule=schedule,
        desired_kl=_float(desired_kl, "algorithm.desired_kl"), kl_adapt_every="minibatch", gamma=number("gamma"),
        lam=number("lam"), clip_param=number("clip_param"), value_loss_coef=number("value_loss_coef"),
        clipped_value_loss=_bool(values["use_clipped_value_loss"], "algorithm.use_clipped_value_loss"),
        entropy_coef=number("entropy_coef"), max_grad_norm=number("max_grad_norm"), grad_clip="per_network",
        weight_decay=0.01 if optimizer == "adamw" else 0.0)


Activation = Literal["elu", "tanh", "relu", "silu"]
StdType = Literal["log", "scalar"]


@dataclasses.dataclass
class _Model:
    hidden: list[int]
    activation: Activation
    normalize: bool
    init_std: float = 1.0
    std_type: StdType = "scalar"
    rnn: RecurrentCoreConfig | None = None
    """An `RNNModel`'s recurrent core; None for an `MLPModel`."""


def policy_config(cfg: Mapping[str, Any], widths: dict[str, int]) -> PolicyConfig:
    """The `actor` and `critic` sections (or rsl_rl < 5's `policy`) as one `PolicyConfig` (a
    `RecurrentMLPPolicyConfig` for `RNNModel`s)."""
    if "policy" in cfg:
        if "actor" in cfg or "critic" in cfg:
            raise refuse("policy", "give either rsl_rl 5's actor and critic sections or the older policy section")
        actor, critic = legacy_models(_section(cfg["policy"], "policy"),
                                      _bool(cfg.get("empirical_normalization", False), "empirical_normalization"))
    else:
        for key in ("actor", "critic"):
            if key not in cfg:
                raise refuse(key, "missing (rsl_rl's runner needs it)")
        actor = model(_section(cfg["actor"], "actor"), "actor", stochastic=True)
        critic = model(_section(cfg["critic"], "critic"), "critic", stochastic=False)
        if "empirical_normalization" in cfg and _bool(cfg["empirical_normalization"],
                                                      "empirical_normalization") != actor.normalize:
            raise refuse("empirical_normalization", "rsl_rl 5 reads actor.obs_normalization instead; remove it")
    if actor.activation != critic.activation:
        raise refuse("critic.activation", f"{critic.activation!r} differs from the actor's {actor.activation!r}; "
                     "syncfree's actor and critic share one activation")
    if actor.normalize != critic.normalize:
        raise refuse("critic.obs_normalization", f"{critic.normalize} differs from the actor's; syncfree "
                     "normalizes both networks' observations or neither")
    hidden = {name: [widths[name] if h == -1 else int(h) for h in m.hidden]
              for name, m in (("actor", actor), ("critic", critic))}
    for name, sizes in hidden.items():
        if -1 in sizes:
            raise refuse(f"{name}.hidden_dims", "-1 (the input's width) needs the env's observations")
    if actor.rnn != critic.rnn:
        raise refuse("critic.class_name" if (actor.rnn is None) != (critic.rnn is None) else "critic.rnn_type",
                     "the actor's and the critic's models differ (an RNNModel and an MLPModel, or other RNN "
                     "settings); syncfree's recurrent policy has one recurrent core setting for both")
    fields = dict(actor_hidden=hidden["actor"], critic_hidden=hidden["critic"], activation=actor.activation,
                  init_std=actor.init_std, normalize_obs=actor.normalize,
                  obs_norm_std_offset=RSL_RL_STD_OFFSET if actor.normalize else 0.0, std_type=actor.std_type)
    if actor.rnn is not None:
        return RecurrentMLPPolicyConfig(**fields, rnn=actor.rnn)  # type: ignore[arg-type]
    return PolicyConfig(**fields)  # type: ignore[arg-type]


def model(section: dict[str, Any], name: str, stochastic: bool | None) -> _Model:
    """One rsl_rl 5 model config (`MLPModel`'s or `RNNModel`'s arguments, with mjlab's optional keys);
    `stochastic`: it must have a distribution (True), must not (False), or may (None)."""
    class_name = str(section.pop("class_name", "MLPModel"))
    short = class_name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    if short not in ("MLPModel", "RNNModel"):
        raise refuse(f"{name}.class_name", f"{class_name!r}: syncfree's drop-in trains MLP and RNN models")
    if section.pop("cnn_cfg", None) is not None:
        raise refuse(f"{name}.cnn_cfg", "syncfree's drop-in trains MLP and RNN models")
    rnn = recurrent_core(section, name) if short == "RNNModel" else None
    if rnn is None:
        if section.pop("rnn_type", None) is not None:
            raise refuse(f"{name}.rnn_type", f"read by RNNModel only; {name}.class_name is {class_name!r}")
        section.pop("rnn_hidden_dim", None)
        section.pop("rnn_num_layers", None)
    dist = section.pop("distribution_cfg", None)
    out = _Model(hidden=_hidden(section.pop("hidden_dims", (256, 256, 256)), f"{name}.hidden_dims"),
                 activation=_activation(section.pop("activation", "elu"), f"{name}.activation"),
                 normalize=_bool(section.pop("obs_normalization", False), f"{name}.obs_normalization"), rnn=rnn)
    if section:
        raise refuse(f"{name}.{sorted(section)[0]}", "not a key of rsl_rl 5's MLPModel (nor one syncfree maps)")
    if stochastic is None and dist is None:
        return out
    if stochastic is False:
        if dist is not None:
            raise refuse(f"{name}.distribution_cfg", "the critic outputs a value: None")
        return out
    if dist is None:
        raise refuse(f"{name}.distribution_cfg", "the actor needs a distribution (GaussianDistribution)")
    dist = _section(dist, f"{name}.distribution_cfg")
    kind = str(dist.pop("class_name", "GaussianDistribution"))
    if kind.rsplit(":", 1)[-1].rsplit(".", 1)[-1] != "GaussianDistribution":
        raise refuse(f"{name}.distribution_cfg.class_name", f"{kind!r}: syncfree's Gaussian head has a "
                     "state-independent standard deviation (GaussianDistribution)")
    out.init_std = _float(dist.pop("init_std", 1.0), f"{name}.distribution_cfg.init_std")
    out.std_type = _std_type(dist.pop("std_type", "scalar"), f"{name}.distribution_cfg.std_type")
    std_range = dist.pop("std_range", (1e-6, 1e6))
    if not isinstance(std_range, Sequence) or tuple(std_range) != (1e-6, 1e6):
        raise refuse(f"{name}.distribution_cfg.std_range", f"{std_range}: only rsl_rl's default (1e-06, 1e+06)")
    if not _bool(dist.pop("learn_std", True), f"{name}.distribution_cfg.learn_std"):
        raise refuse(f"{name}.distribution_cfg.learn_std", "False: syncfree learns the standard deviation")
    if dist:
        raise refuse(f"{name}.distribution_cfg.{sorted(dist)[0]}", "not a key of rsl_rl 5's GaussianDistribution")
    return out


def recurrent_core(section: dict[str, Any], name: str) -> RecurrentCoreConfig:
    """An `RNNModel`'s `rnn_type`, `rnn_hidden_dim` and `rnn_num_layers` (rsl_rl's defaults: lstm, 256, 1)."""
    value = section.pop("rnn_type", "lstm")
    core = value.lower() if isinstance(value, str) else value  # rsl_rl compares it lower-cased
    if core not in ("lstm", "gru"):
        raise refuse(f"{name}.rnn_type", f"{value!r}: lstm or gru (rsl_rl would build an LSTM for any other name)")
    sizes = {}
    for key, default in (("rnn_hidden_dim", 256), ("rnn_num_layers", 1)):
        value = section.pop(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise refuse(f"{name}.{key}", f"{value!r}: an integer >= 1")
        sizes[key] = value
    return RecurrentCoreConfig(cast(Literal["lstm", "gru"], core), sizes["rnn_hidden_dim"], sizes["rnn_num_layers"])


def legacy_models(section: dict[str, Any], empirical_normalization: bool) -> tuple[_Model, _Model]:
    """rsl_rl < 5's `policy` section (`ActorCritic`): its log-std or scalar noise, sizes and normalizers."""
    class_name = str(section.pop("class_name", "ActorCritic"))
    if class_name.rsplit(".", 1)[-1] != "ActorCritic":
        raise refuse("policy.class_name", f"{class_name!r}: only ActorCritic is mapped (recurrent models: rsl_rl 5's "
                     "RNNModel, as the actor and critic sections)")
    activation = _activation(section.pop("activation", "elu"), "policy.activation")
    actor_norm = _bool(section.pop("actor_obs_normalization", empirical_normalization),
                       "policy.actor_obs_normalization")
    critic_norm = _bool(section.pop("critic_obs_normalization", empirical_normalization),
                        "policy.critic_obs_normalization")
    std_type = _std_type(section.pop("noise_std_type", "scalar"), "policy.noise_std_type")
    actor = _Model(_hidden(section.pop("actor_hidden_dims", (256, 256, 256)), "policy.actor_hidden_dims"),
                   activation, actor_norm, _float(section.pop("init_noise_std", 1.0), "policy.init_noise_std"),
                   std_type)
    critic = _Model(_hidden(section.pop("critic_hidden_dims", (256, 256, 256)), "policy.critic_hidden_dims"),
                    activation, critic_norm)
    if section:
        raise refuse(f"policy.{sorted(section)[0]}", "not a key of rsl_rl's ActorCritic (nor one syncfree maps)")
    return actor, critic


def _moved_keys(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The dotted keys of a config section whose value `after` differs from `before`."""
    was = flatten(before)
    return [key for key, value in flatten(after).items() if was.get(key, value) != value]


def _hidden(value: Any, key: str) -> list[int]:
    if isinstance(value, int):
        value = [value]
    if not isinstance(value, Sequence) or not value or not all(isinstance(h, int) and (h >= 1 or h == -1)
                                                                for h in value):
        raise refuse(key, f"{value!r}: a non-empty list of layer widths (>= 1, or -1 for the input's)")
    return list(value)


def _activation(value: Any, key: str) -> Activation:
    if not isinstance(value, str) or value not in _ACTIVATIONS:
        raise refuse(key, f"{value!r}: syncfree's MLPs use {', '.join(_ACTIVATIONS)}")
    return cast(Activation, _ACTIVATIONS[value])


def _std_type(value: Any, key: str) -> StdType:
    if value not in ("scalar", "log"):
        raise refuse(key, f"{value!r}: scalar or log")
    return cast(StdType, value)


ConfigT = TypeVar("ConfigT", bound=TrainConfig)


def apply_overrides(cfg: ConfigT, overrides: Mapping[str, Any]) -> ConfigT:
    """`cfg` with `overrides` (dotted key -> value) applied; a misspelt key names the nearest one."""
    try:
        return validate(with_values(cfg, overrides))
    except UserError as e:
        raise refuse("syncfree", str(e)) from None
