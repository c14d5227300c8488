"""The policy's settings (the `policy` section of an algorithm's config): the MLP actor-critic, the universal-token
policy, the recurrent policies; each section type lists the `kind`s it configures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from syncfree.errors import check


@dataclass
class TokenEncoderConfig:
    """The universal-token policy (`policy.kind=token`): its encoders, quantizer, decoder and critic."""

    encoders: dict[str, list[str]] = field(default_factory=lambda: {
        "motion": ["tokenizer/future_joint_pos", "tokenizer/future_joint_vel"],
        "keypoints": ["tokenizer/future_keypoints"],
    })
    """Encoder name -> the layout parts it reads, in order. Encoder k (in dict order) serves the envs whose
    `tokenizer/encoder_index` is k; an index with no encoder falls back to encoder 0."""
    encoder_hidden: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer sizes of every encoder MLP."""
    num_tokens: int = 4
    """Tokens per sample."""
    fsq_levels: list[int] = field(default_factory=lambda: [8, 5, 5, 5])
    """Quantization levels per token dimension (each >= 2); the token dimension is their count and the
    codebook size their product."""
    decoder_hidden: list[int] = field(default_factory=lambda: [512, 256, 128])
    """Hidden layer sizes of the action decoder (input: flattened tokens and the normalized `policy` part)."""
    critic_hidden: list[int] = field(default_factory=lambda: [512, 256, 128])
    """Hidden layer sizes of the critic MLP."""
    activation: Literal["elu", "tanh", "relu"] = "elu"
    """Hidden activation of every MLP."""
    init_std: float = 0.5
    """Initial action standard deviation (state-independent, learned)."""
    min_std: float = 0.05
    """Lower clamp of the learned standard deviation."""
    max_std: float = 2.0
    """Upper clamp of the learned standard deviation."""
    reconstruction_target: str = "motion"
    """Encoder whose normalized input the auxiliary decoder reconstructs from the tokens."""
    reconstruction_hidden: list[int] = field(default_factory=lambda: [256])
    """Hidden layer sizes of the auxiliary reconstruction MLP."""
    reconstruction_weight: float = 0.1
    """Factor applied by `auxiliary_loss` (the loss PPO adds to its own)."""
    normalize_obs: bool = True
    """Running mean/std normalization of the `policy` part, of each encoder's input and of the critic
    observation, updated by `update_normalizers`."""


@dataclass
class RecurrentPolicyConfig:
    """The recurrent token policy (`policy.kind=recurrent`, the grid-arena task's)."""

    core: Literal["lstm", "gru"] = "lstm"
    """Recurrent cell."""
    hidden: int = 64
    """Core input and state width."""
    embed_dim: int = 32
    """Token embedding width."""
    encoder_hidden: int = 64
    """Hidden width of the token encoder's MLP."""
    max_tokens: int = 64
    """Tokens read per observation (MettaGrid packs the valid ones first); 0: all. The grid-arena map shows an agent
    at most 56 valid tokens of its 500 (measured over 128,000 observations); the log's `obs_over_max_tokens` is the
    share of observations with more valid tokens than this, whose excess goes unread."""
    last_action_input: bool = True
    """Feed the agent's previous action to the core."""


@dataclass
class PolicyConfig:
    """The policy's networks: the MLP actor and critic."""

    actor_hidden: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the actor MLP."""
    critic_hidden: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the critic MLP."""
    activation: Literal["elu", "tanh", "relu", "silu"] = "elu"
    """Hidden activation."""
    layer_norm: bool = False
    """A `LayerNorm` after each hidden linear layer, before its activation, in the actor and the critics (FastSAC's
    networks: with `activation: silu`)."""
    init_std: float = 1.0
    """Initial standard deviation of the Gaussian head (continuous actions)."""
    normalize_obs: bool = True
    """Running mean/std normalization of actor and critic observations, updated during rollouts."""
    obs_norm_std_offset: float = 0.0
    """0: observations are divided by sqrt(var + 1e-8); > 0: by sqrt(var) + this offset (rsl_rl's
    `EmpiricalNormalization` adds 0.01; `syncfree.rsl_rl` sets it, so rsl_rl checkpoints act the same)."""
    std_type: Literal["log", "scalar"] = "log"
    """How the Gaussian head learns its state-independent standard deviation: `log`, its logarithm; `scalar`, the
    standard deviation itself, clamped to [1e-6, 1e6] (rsl_rl's default `std_type`)."""
    actor_obs: Literal["policy", "critic"] = "policy"
    """The observation group the MLP actor reads: `policy`, or `critic` for a privileged actor that sees what the
    critic sees (a teacher to distill a deployable student from, `distill`)."""
    UNREAD: ClassVar[tuple[str, ...]] = ()
    """Fields of this section the policy does not read (a config of the earlier layout may hold any value there)."""
    KINDS: ClassVar[tuple[str, ...]] = ("mlp",)
    """The `kind` values this section type configures."""
    MIRRORABLE: ClassVar[bool] = True
    """Whether the policy can take `symmetry` (MLP policies, feed-forward or recurrent)."""
    TEACHER_LOSSES: ClassVar[bool] = False
    """Whether the policy's full discrete action distributions serve recurrent PPO's teacher losses (`losses.*`
    other than `ppo`)."""

    kind: Literal["mlp", "token", "recurrent"] = "mlp"
    """`mlp`: the MLP actor-critic above. `token` (g1-track): the universal-token policy configured by `policy.token`
    (its own sizes; the fields above then do not apply). `recurrent`: a recurrent policy trained on BPTT segments
    (`--algorithm recurrent-ppo`, which `policy.kind=recurrent` also chooses): the recurrent MLP policy of
    `policy.rnn` on flat observations, grid-arena's recurrent token policy of `policy.recurrent`."""

    def validate(self, algorithm: str) -> None:
        check(self.kind in self.KINDS, "policy.kind", f"{', '.join(self.KINDS)} (the policies {algorithm} trains "
              "here)", self.kind)
        for key in ("actor_hidden", "critic_hidden"):
            sizes = getattr(self, key)
            check(len(sizes) > 0 and all(s >= 1 for s in sizes), f"policy.{key}", "a non-empty list of integers >= 1",
                  sizes)
        check(self.init_std > 0, "policy.init_std", "a number > 0", self.init_std)
        check(self.obs_norm_std_offset >= 0, "policy.obs_norm_std_offset", "a number >= 0", self.obs_norm_std_offset)
        check(self.std_type in ("log", "scalar"), "policy.std_type", "log, scalar", self.std_type)
        check(self.actor_obs in ("policy", "critic"), "policy.actor_obs", "policy, critic", self.actor_obs)


@dataclass
class TokenPolicyConfig(PolicyConfig):
    """The MLP policy, or (`kind=token`) the universal-token policy of `token`."""

    KINDS: ClassVar[tuple[str, ...]] = ("mlp", "token")

    token: TokenEncoderConfig = field(default_factory=TokenEncoderConfig)


@dataclass
class RecurrentTokenPolicyConfig(PolicyConfig):
    """The recurrent token policy of `recurrent` (`kind=recurrent`; the MLP sizes above do not apply)."""

    UNREAD: ClassVar[tuple[str, ...]] = ("actor_hidden", "critic_hidden", "activation", "layer_norm", "init_std",
                                         "normalize_obs", "obs_norm_std_offset", "std_type")
    """The MLP fields above: this policy does not read them, so they must keep their defaults."""
    KINDS: ClassVar[tuple[str, ...]] = ("recurrent",)
    MIRRORABLE: ClassVar[bool] = False
    TEACHER_LOSSES: ClassVar[bool] = True

    kind: Literal["mlp", "token", "recurrent"] = "recurrent"
    recurrent: RecurrentPolicyConfig = field(default_factory=RecurrentPolicyConfig)

    def validate(self, algorithm: str) -> None:
        super().validate(algorithm)
        mlp = PolicyConfig()
        for name in self.UNREAD:
            check(getattr(self, name) == getattr(mlp, name), f"policy.{name}",
                  f"{getattr(mlp, name)!r}: the recurrent token policy does not read it (its sizes are "
                  "policy.recurrent.*)", getattr(self, name))
        r = self.recurrent
        check(r.core in ("lstm", "gru"), "policy.recurrent.core", "lstm, gru", r.core)
        for name in ("hidden", "embed_dim", "encoder_hidden"):
            check(getattr(r, name) >= 1, f"policy.recurrent.{name}", "an integer >= 1", getattr(r, name))
        check(r.max_tokens >= 0, "policy.recurrent.max_tokens", "an integer >= 0 (0: all)", r.max_tokens)


@dataclass
class RecurrentCoreConfig:
    """The recurrent core of each network of the recurrent MLP policy (rsl_rl's `rnn_type`, `rnn_hidden_dim`,
    `rnn_num_layers`)."""

    core: Literal["lstm", "gru"] = "lstm"
    """Recurrent cell."""
    hidden: int = 256
    """State width of each layer (the MLP after the core reads the top layer's)."""
    num_layers: int = 1
    """Stacked cells, each reading the hidden state of the one below."""


@dataclass
class RecurrentMLPPolicyConfig(PolicyConfig):
    """`kind=recurrent` on flat observations: the actor and the critic each a recurrent core of `rnn` on their
    (normalized) observation group, followed by the MLP of `actor_hidden` / `critic_hidden` (rsl_rl's RNN
    actor-critic); trained on BPTT segments."""

    KINDS: ClassVar[tuple[str, ...]] = ("recurrent",)

    kind: Literal["mlp", "token", "recurrent"] = "recurrent"
    rnn: RecurrentCoreConfig = field(default_factory=RecurrentCoreConfig)

    def validate(self, algorithm: str) -> None:
        super().validate(algorithm)
        r = self.rnn
        check(r.core in ("lstm", "gru"), "policy.rnn.core", "lstm, gru", r.core)
        for name in ("hidden", "num_layers"):
            check(getattr(r, name) >= 1, f"policy.rnn.{name}", "an integer >= 1", getattr(r, name))
