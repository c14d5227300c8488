"""MLP actor-critic with running observation normalization."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

import torch
from torch import Tensor, nn

from syncfree.envs.api import ActionSpec
from syncfree.policy.deploy import DeployedActor, Deployment, flat_observation, mlp_actor_graph
from syncfree.policy.heads import CategoricalHead, GaussianHead
from syncfree.policy.normalizer import RunningNorm
from syncfree.policy.settings import PolicyConfig

_ACTIVATIONS = {"elu": nn.ELU, "tanh": nn.Tanh, "relu": nn.ReLU, "silu": nn.SiLU}


class Act(NamedTuple):
    actions: Tensor
    log_prob: Tensor
    value: Tensor
    dist_params: Tensor


class Evaluation(NamedTuple):
    log_prob: Tensor
    entropy: Tensor
    value: Tensor
    dist_params: Tensor


class MLP(nn.Sequential):
    """Linear layers with activations between them.

    With `autocast_dtype` set (see `PerfConfig.autocast`), a call on at least `autocast_min_work` (rows x widest
    hidden layer) runs the hidden layers under `torch.autocast` in that dtype and the output layer in float32 on
    float32 inputs, so outputs (action means, logits, values) keep float32 resolution. Smaller calls run in float32:
    there the casts cost more than the faster matrix products save."""

    autocast_dtype: torch.dtype | None = None
    autocast_min_work: int = 0

    def __init__(self, *layers: nn.Module) -> None:
        super().__init__(*layers)
        self.width = max([m.out_features for m in list(self)[:-1] if isinstance(m, nn.Linear)], default=0)
        """The widest hidden layer."""

    def forward(self, x: Tensor) -> Tensor:
        if self.autocast_dtype is None or x.shape[:-1].numel() * self.width < self.autocast_min_work:
            return super().forward(x)
        *hidden, output = self
        with torch.autocast(x.device.type, dtype=self.autocast_dtype):
            for layer in hidden:
                x = layer(x)
        return output(x.float())


def mlp(in_dim: int, hidden: list[int], out_dim: int, activation: str, layer_norm: bool = False) -> MLP:
    """An `MLP` of `hidden` layers: each a linear layer, a `LayerNorm` over its outputs where `layer_norm`
    (`policy.layer_norm`; FastSAC's networks), then `activation`; then a linear output layer."""
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(in_dim, size), *([nn.LayerNorm(size)] if layer_norm else []), _ACTIVATIONS[activation]()]
        in_dim = size
    layers.append(nn.Linear(in_dim, out_dim))
    return MLP(*layers)


AUTO_MIN_WORK = 2**16
"""`autocast=auto`: bfloat16 from this many rows x widest hidden layer. Measured on an AMD EPYC with AVX512-BF16
(family 25 model 17, 1 thread, two hidden layers of 128 to 512, forward and backward: `benchmarks/autocast_threshold.py`,
`benchmarks/results/autocast-threshold-cpu/`), float32's time over bfloat16's: at 2**16 1.08-1.59x eagerly and
1.36-1.64x compiled, at 2**15 0.92-1.21x and 1.11-1.40x, below 2**15 0.59-0.98x."""


def native_bf16(device: torch.device) -> bool:
    """Whether `autocast=auto` turns bfloat16 on for `device`: CPUs whose instruction set has bfloat16 matrix
    products (AVX512-BF16 or AMX), where it was measured faster. On CUDA devices `auto` stays off until measured
    there (`bf16` turns it on)."""
    if device.type != "cpu":
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


if TYPE_CHECKING:
    class _Autocast(Protocol):
        """A module that declares `autocast_dtype` (see `set_autocast`)."""

        autocast_dtype: torch.dtype | None
        autocast_min_work: int


def set_autocast(module: nn.Module, precision: str, device: torch.device | None = None) -> None:
    """Set the precision of every module inside `module` that declares `autocast_dtype` (`MLP`, the recurrent
    policy's `TokenEncoder`): `off` (float32), `bf16` (bfloat16 hidden layers), or `auto` (bfloat16 for large
    calls on devices with fast bfloat16, see `native_bf16` and `AUTO_MIN_WORK`; modules declaring
    `autocast_auto = False` stay float32)."""
    if precision == "auto":
        on = device is not None and native_bf16(device)
        dtype, min_work = (torch.bfloat16 if on else None), AUTO_MIN_WORK
    else:
        dtype, min_work = {"off": None, "bf16": torch.bfloat16}[precision], 0
    for sub in module.modules():
        if hasattr(type(sub), "autocast_dtype"):
            auto_off = precision == "auto" and not getattr(type(sub), "autocast_auto", True)
            settable = cast("_Autocast", sub)
            settable.autocast_dtype, settable.autocast_min_work = (None if auto_off else dtype), min_work


def auto_lowers(module: nn.Module, rows: int) -> bool:
    """Whether `autocast=auto`, on a device with fast bfloat16 (`native_bf16`), runs some layer of `module` in
    bfloat16 in a call of `rows` rows: a module that declares `autocast_dtype`, does not opt out of `auto`
    (`autocast_auto`) and whose widest hidden layer times `rows` reaches `AUTO_MIN_WORK`."""
    return any(hasattr(type(sub), "autocast_dtype") and getattr(type(sub), "autocast_auto", True)
               and rows * getattr(sub, "width", 0) >= AUTO_MIN_WORK for sub in module.modules())


def auto_lowers_mlps(widths: list[int], rows: int) -> bool:
    """`auto_lowers` for MLPs of these hidden layer sizes, before they are built."""
    return rows * max(widths, default=0) >= AUTO_MIN_WORK


def describe_precision(module: nn.Module, precision: str, device: torch.device) -> str:
    """What `set_autocast(module, precision, device)` resolved to, in words (the start line, `config.yaml`)."""
    lowered = [cast("_Autocast", sub) for sub in module.modules() if getattr(sub, "autocast_dtype", None) is not None]
    if not lowered:
        why = {"off": "", "bf16": " (no layer of this policy runs under autocast)",
               "auto": "" if not native_bf16(device) else " (layers below auto's size)"}
        return f"float32{why[precision]}"
    least = min(sub.autocast_min_work for sub in lowered)
    return f"bfloat16 hidden layers from {least:,} rows x width" if least else "bfloat16 hidden layers"


def chunked_value(critic: nn.Module, norm: nn.Module, critic_obs: Tensor, chunk_size: int) -> Tensor:
    """Critic values, evaluated `chunk_size` rows at a time when the batch is larger (0: all at once)."""
    if chunk_size <= 0 or critic_obs.shape[0] <= chunk_size:
        return critic(norm(critic_obs)).squeeze(-1)
    return torch.cat([critic(norm(part)).squeeze(-1) for part in critic_obs.split(chunk_size)])


def actor_and_critic_parameters(policy: nn.Module, critic: list[nn.Module]) -> list[list[nn.Parameter]]:
    """`policy`'s trainable parameters as [actor's, critic's]: those of the `critic` modules, and all the others."""
    owned = {id(p) for module in critic for p in module.parameters()}
    trainable = [p for p in policy.parameters() if p.requires_grad]
    return [[p for p in trainable if id(p) not in owned], [p for p in trainable if id(p) in owned]]


class PolicyBase(nn.Module):
    """What PPO and the trainer use; subclasses provide `head`, `dist_params`, `value` and `actor_input`."""

    head: GaussianHead | CategoricalHead
    critic: nn.Module
    actor_obs_dim: int
    """Width of the actor's observation (`actor_input`'s output)."""
    action_spec: ActionSpec
    assembles_actor_obs: bool = False
    """Whether `actor_input` builds the actor's observation from several groups (then the trainer hands it a
    buffer to fill, `out`); False: it is the env's `policy` group itself."""
    is_recurrent = False
    """The actor carries no state from step to step."""

    if TYPE_CHECKING:  # what the subclasses define
        def dist_params(self, actor_obs: Tensor) -> Tensor: ...
        def value(self, critic_obs: Tensor) -> Tensor: ...
        def actor_input(self, obs: dict[str, Tensor], out: Tensor | None = None) -> Tensor: ...
        def act_deterministic(self, actor_obs: Tensor) -> Tensor: ...
        def update_normalizers(self, actor_obs: Tensor, critic_obs: Tensor) -> None: ...

    def gradient_groups(self) -> list[list[nn.Parameter]]:
        """The trainable parameters as [actor's, critic's] (`ppo.grad_clip=per_network` clips each by its own norm):
        the critic network, and everything else (the actor's layers, encoders and action distribution)."""
        return actor_and_critic_parameters(self, [self.critic])

    def initial_actor_state(self, batch: int, device: torch.device | str = "cpu") -> tuple[Tensor, ...]:
        """Empty: a feed-forward actor carries no state (`play` and the rsl_rl runner's inference policy ask every
        policy)."""
        return ()

    def act_carrying(self, actor_obs: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
        """The deterministic action, the (empty) state passed on: how acting outside training asks every policy."""
        return self.act_deterministic(actor_obs), state

    def act(self, actor_obs: Tensor, critic_obs: Tensor) -> Act:
        params = self.dist_params(actor_obs)
        actions, log_prob = self.head.sample(params)
        return Act(actions, log_prob, self.value(critic_obs), params)

    def evaluate(self, actor_obs: Tensor, critic_obs: Tensor, actions: Tensor) -> Evaluation:
        params = self.dist_params(actor_obs)
        log_prob, entropy = self.head.log_prob_entropy(params, actions)
        return Evaluation(log_prob, entropy, self.value(critic_obs), params)


class ActorCritic(PolicyBase):
    def __init__(self, actor_obs_dim: int, critic_obs_dim: int, action_spec: ActionSpec, cfg: PolicyConfig,
                 validate_distributions: bool = False, critic_chunk_size: int = 0) -> None:
        super().__init__()
        self.actor_obs_dim, self.critic_obs_dim = actor_obs_dim, critic_obs_dim
        self.actor_group = cfg.actor_obs
        """The observation group the actor reads (`policy.actor_obs`)."""
        self.critic_chunk_size = critic_chunk_size
        """Rows per critic forward (0: all at once); see `PerfConfig.critic_chunk_size`."""
        self.action_spec = action_spec
        if action_spec.kind == "continuous":
            self.head: GaussianHead | CategoricalHead = GaussianHead(action_spec.size, cfg.init_std,
                                                                     validate_distributions, cfg.std_type)
        else:
            self.head = CategoricalHead(action_spec.size, validate_distributions)
        self.actor = mlp(actor_obs_dim, cfg.actor_hidden, action_spec.size, cfg.activation, cfg.layer_norm)
        self.critic = mlp(critic_obs_dim, cfg.critic_hidden, 1, cfg.activation, cfg.layer_norm)
        norm = (lambda d: RunningNorm(d, std_offset=cfg.obs_norm_std_offset)) if cfg.normalize_obs else (
            lambda d: nn.Identity())
        self.actor_norm = norm(actor_obs_dim)
        self.critic_norm = norm(critic_obs_dim)
        self.normalize_obs = cfg.normalize_obs

    def dist_params(self, actor_obs: Tensor) -> Tensor:
        return self.head.params(self.actor(self.actor_norm(actor_obs)))

    def value(self, critic_obs: Tensor) -> Tensor:
        return chunked_value(self.critic, self.critic_norm, critic_obs, self.critic_chunk_size)

    def actor_input(self, obs: dict[str, Tensor], out: Tensor | None = None) -> Tensor:
        """The actor's observation from the env's groups (`out`: a buffer policies that assemble it may fill)."""
        return obs[self.actor_group]

    def act_deterministic(self, actor_obs: Tensor) -> Tensor:
        return self.head.deterministic(self.dist_params(actor_obs))

    @torch.no_grad()
    def update_normalizers(self, actor_obs: Tensor, critic_obs: Tensor) -> None:
        if self.normalize_obs:  # the norms are then `RunningNorm`s (`nn.Identity` otherwise)
            cast(RunningNorm, self.actor_norm).update(actor_obs)
            cast(RunningNorm, self.critic_norm).update(critic_obs)

    @torch.no_grad()
    def update_actor_normalizer(self, actor_obs: Tensor) -> None:
        """The actor's normalizer alone (a distilled student's critic is not trained)."""
        if self.normalize_obs:
            cast(RunningNorm, self.actor_norm).update(actor_obs)

    # -- deployment -----------------------------------------------------------------------------------------

    def deployment(self, rows: int) -> Deployment:
        """What `syncfree export` writes: the actor's copy (`DeployedActor`), example inputs of `rows` rows."""
        graph = mlp_actor_graph(self.actor_norm, self.actor, self.actor_obs_dim, self.action_spec.kind == "discrete",
                                rows)
        return Deployment("mlp", [graph], self.action_spec,
                          flat_observation({self.actor_group: self.actor_obs_dim}, self.normalize_obs))

    def torchscript_actor(self) -> DeployedActor:
        """The actor as rsl_rl exports it to TorchScript: `obs [N, D] -> actions [N, A]`."""
        return DeployedActor(self.actor_norm, self.actor, self.actor_obs_dim)

    def onnx_actor(self) -> DeployedActor:
        """The actor as rsl_rl exports it to ONNX: the TorchScript module's."""
        return self.torchscript_actor()
