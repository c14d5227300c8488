"""The policy a config asks for, built from an env's observation shapes and action spec: one place for training,
evaluation and export."""

from __future__ import annotations

from typing import Any, Protocol

from syncfree.config import TrainConfig, from_dict
from syncfree.envs.api import ActionSpec
from syncfree.errors import UserError
from syncfree.policy.actor_critic import ActorCritic
from syncfree.policy.recurrent import RecurrentTokenPolicy
from syncfree.policy.token_encoder import TokenActorCritic, default_layout

Policy = ActorCritic | TokenActorCritic | RecurrentTokenPolicy


class EnvShape(Protocol):
    """What building a policy reads of an env (a `VecEnv`, or a stand-in when exporting a checkpoint)."""

    obs_shapes: dict[str, tuple[int, ...]]
    action_spec: ActionSpec


def build_policy(cfg: TrainConfig, env: EnvShape, emit_full_log_probs: bool = True) -> Policy:
    """`policy.kind`: `mlp` (`ActorCritic`), `token` (`TokenActorCritic`, on g1-track's tokenizer groups) or
    `recurrent` (`RecurrentTokenPolicy`, on token observations; `emit_full_log_probs` as its losses need)."""
    if cfg.policy.kind == "recurrent":
        return build_recurrent_policy(cfg, env, emit_full_log_probs)
    critic_dim = obs_dim(env, "critic")
    if cfg.policy.kind == "mlp":
        return ActorCritic(obs_dim(env, "policy"), critic_dim, env.action_spec, cfg.policy,
                           validate_distributions=cfg.perf.validate_distributions,
                           critic_chunk_size=cfg.perf.critic_chunk_size)
    if env.action_spec.kind != "continuous" or not any(k.startswith("tokenizer/") for k in env.obs_shapes):
        raise UserError(f"policy.kind=token: task {cfg.task!r} has no tokenizer observations or no continuous "
                        "actions (use it with g1-track)")
    try:
        layout = default_layout(env.obs_shapes, cfg.policy.token)
        return TokenActorCritic(layout, critic_dim, env.action_spec, cfg.policy.token,
                                validate_distributions=cfg.perf.validate_distributions,
                                cache_encoded_outputs=cfg.perf.cache_encoded_outputs,
                                cache_full_latent=cfg.perf.cache_full_latent,
                                critic_chunk_size=cfg.perf.critic_chunk_size)
    except ValueError as e:
        raise UserError(f"policy.token: {e}") from None


def build_recurrent_policy(cfg: TrainConfig, env: EnvShape, emit_full_log_probs: bool) -> RecurrentTokenPolicy:
    if env.action_spec.kind != "discrete" or len(env.obs_shapes.get("policy", ())) != 2:
        raise UserError(f"policy.kind=recurrent: task {cfg.task!r} has no token observations or no discrete actions")
    r = cfg.policy.recurrent
    return RecurrentTokenPolicy(env.action_spec.size, embed_dim=r.embed_dim, encoder_hidden=r.encoder_hidden,
                                hidden=r.hidden, max_tokens=r.max_tokens or None,
                                emit_full_log_probs=emit_full_log_probs, core=r.core,
                                last_action_input=r.last_action_input)


def obs_dim(env: EnvShape, group: str) -> int:
    if group not in env.obs_shapes:
        raise UserError(f"env: observation group {group!r} missing (has {', '.join(env.obs_shapes)})")
    shape = env.obs_shapes[group]
    if len(shape) != 1:
        raise UserError(f"env: observation group {group!r} has shape {shape}; the MLP policy needs 1-D observations")
    return shape[0]


def obs_dims(policy: Policy, env: EnvShape) -> dict[str, Any]:
    """The observation shapes a checkpoint of `policy` records (and a resumed run must match)."""
    if isinstance(policy, RecurrentTokenPolicy):
        return {"policy": list(env.obs_shapes["policy"])}
    return {"policy": policy.actor_obs_dim, "critic": obs_dim(env, "critic")}


def teacher_from_checkpoint(state: dict[str, Any], env: EnvShape, source: str) -> RecurrentTokenPolicy:
    """The recurrent policy of a loaded checkpoint, as a frozen teacher emitting its full log-probabilities."""
    cfg = from_dict(TrainConfig, state["config"])
    if cfg.policy.kind != "recurrent":
        raise UserError(f"losses.teacher: {source} holds a policy.kind={cfg.policy.kind} policy, not a recurrent one")
    if tuple(state["action_spec"]) != (env.action_spec.kind, env.action_spec.size):
        raise UserError(f"losses.teacher: {source} acts in {tuple(state['action_spec'])} but this env has "
                        f"{(env.action_spec.kind, env.action_spec.size)}")
    teacher = build_recurrent_policy(cfg, env, emit_full_log_probs=True)
    teacher.load_state_dict(state["policy"])
    return teacher.eval().requires_grad_(False)
