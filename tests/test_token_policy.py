"""Universal-token policy: FSQ, per-env encoder routing without host reads, diagnostic caches, PPO compatibility."""

from __future__ import annotations

import math

import pytest
import torch

from syncfree.algo.advantages import compute_gae
from syncfree.algo.feedforward import FeedForwardPPO
from syncfree.algo.settings import PPOConfig
from syncfree.algo.storage import RolloutStorage
from syncfree.config import PerfConfig
from syncfree.core.counters import count_syncs
from syncfree.envs.api import ActionSpec
from syncfree.policy.token_encoder import (
    FSQ,
    TokenActorCritic,
    TokenEncoderConfig,
    concat_observations,
    default_layout,
)

LAYOUT = {"policy": 1110, "tokenizer/encoder_index": 1, "tokenizer/future_joint_pos": 290,
          "tokenizer/future_joint_vel": 290, "tokenizer/future_keypoints": 150}
CRITIC_DIM = 521
SPEC = ActionSpec("continuous", 29)
INDEX_COL = 1110


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: intra-op threads only add overhead (and stall when another process holds a core)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_cfg(**kw) -> TokenEncoderConfig:
    sizes = dict(encoder_hidden=[64], decoder_hidden=[64, 64], critic_hidden=[64], reconstruction_hidden=[64])
    return TokenEncoderConfig(**{**sizes, **kw})


def make_policy(seed: int = 0, cfg: TokenEncoderConfig | None = None, **flags: bool) -> TokenActorCritic:
    torch.manual_seed(seed)
    return TokenActorCritic(LAYOUT, CRITIC_DIM, SPEC, cfg or small_cfg(), **flags)


def make_obs(n: int = 64, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    actor = torch.randn(n, sum(LAYOUT.values()), generator=g) * 2.0 + 0.5
    index = torch.arange(n) % 2  # both encoders present
    actor[:, INDEX_COL] = index[torch.randperm(n, generator=g)].float()
    return actor, torch.randn(n, CRITIC_DIM, generator=g)


def warmed(policy: TokenActorCritic) -> TokenActorCritic:
    """Non-trivial normalizer statistics and encoders whose outputs spread over the whole code grid."""
    for seed in (11, 12):
        policy.update_normalizers(*make_obs(256, seed))
    with torch.no_grad():
        for enc in policy.encoders:
            enc[-1].weight.mul_(20.0)
    return policy


# ---------------------------------------------------------------------------------------------------------- FSQ
@pytest.mark.parametrize("levels", [[8, 5, 5, 5], [2, 3, 4], [7]])
def test_fsq_codes_lie_on_the_level_grid(levels: list[int]) -> None:
    fsq = FSQ(levels)
    z = torch.randn(4096, len(levels), generator=torch.Generator().manual_seed(0)) * 4.0
    codes = fsq(z)
    half = torch.tensor([n // 2 for n in levels], dtype=torch.float32)
    steps = codes * half
    assert torch.equal(steps, steps.round())
    low = -half
    high = torch.tensor([(n - 1) - n // 2 for n in levels], dtype=torch.float32)
    assert bool(((steps >= low) & (steps <= high)).all())
    assert codes.abs().max() <= 1.0
    for d, n in enumerate(levels):  # every level is reached
        assert steps[:, d].unique().numel() == n


def test_fsq_indices_are_a_bijection_and_exact() -> None:
    fsq = FSQ([8, 5, 5, 5])
    assert fsq.codebook_size == 1000 and fsq.dim == 4
    indices = torch.arange(fsq.codebook_size)
    codes = fsq.indices_to_codes(indices)
    assert codes.shape == (1000, 4)
    assert codes.unique(dim=0).shape[0] == 1000
    assert torch.equal(fsq.codes_to_indices(codes), indices)
    quantized = fsq(torch.randn(2, 300, 4, generator=torch.Generator().manual_seed(1)) * 3.0)
    idx = fsq.codes_to_indices(quantized)
    assert idx.shape == (2, 300) and idx.dtype == torch.int64
    assert bool(((idx >= 0) & (idx < 1000)).all())
    assert torch.equal(fsq.indices_to_codes(idx), quantized)


def test_fsq_straight_through_gradient_is_nonzero() -> None:
    fsq = FSQ([8, 5, 5, 5])
    z = torch.randn(32, 4, generator=torch.Generator().manual_seed(2), requires_grad=True)
    fsq(z).square().sum().backward()
    assert z.grad is not None and bool((z.grad != 0).any())
    w = torch.ones(32, 4)
    z.grad = None
    (fsq(z) * w).sum().backward()
    assert bool((z.grad > 0).all())  # d tanh > 0 everywhere, rounding passes the gradient through


def test_fsq_rejects_a_single_level() -> None:
    with pytest.raises(ValueError, match="level"):
        FSQ([1, 5])


# ------------------------------------------------------------------------------------------------------ routing
def test_each_env_gets_the_tokens_of_its_own_encoder() -> None:
    policy = warmed(make_policy())
    actor, _ = make_obs()
    with torch.no_grad():
        tokens = policy.encode(actor)
        alone = []
        for k, (enc, norm) in enumerate(zip(policy.encoders, policy.encoder_norms, strict=True)):
            latent = enc(norm(policy.encoder_input(actor, k))).view(-1, policy.num_tokens, policy.token_dim)
            alone.append(policy.fsq(latent))
    index = actor[:, INDEX_COL].long()
    assert tokens.shape == (64, 4, 4)
    assert not torch.equal(alone[0], alone[1])
    for k in (0, 1):
        assert torch.equal(tokens[index == k], alone[k][index == k])
    codes = policy.fsq.codes_to_indices(tokens)
    assert codes.unique().numel() > 10  # tokens are spread over the codebook, the comparison means something


def test_encoder_inputs_are_views_of_the_flat_observation() -> None:
    policy = make_policy()
    actor, _ = make_obs()
    motion = policy.encoder_input(actor, 0)
    assert motion.data_ptr() == actor[:, 1111:].data_ptr() and motion.shape == (64, 580)
    assert torch.equal(policy.encoder_input(actor, 1), actor[:, 1691:])
    assert torch.equal(policy.part(actor, "policy"), actor[:, :1110])


def test_act_evaluate_and_normalizer_updates_have_no_host_sync() -> None:
    policy = make_policy()
    actor, critic = make_obs()
    policy.act(actor, critic)  # warm-up
    with count_syncs() as counts:
        act = policy.act(actor, critic)
        ev = policy.evaluate(actor, critic, act.actions)
        policy.act_deterministic(actor)
        policy.update_normalizers(actor, critic)
    assert counts.syncs == 0, (counts.host_reads, counts.sync_ops)
    assert counts.num_ops > 0
    with torch.inference_mode(), count_syncs() as counts:
        policy.act(actor, critic)
    assert counts.syncs == 0
    ev.log_prob.sum().backward()
    with count_syncs() as counts:
        policy.auxiliary_loss(actor).backward()
    assert counts.syncs == 0


def test_encoded_outputs_cache_reads_the_host_and_changes_no_output() -> None:
    plain = warmed(make_policy(seed=0))
    cached = make_policy(seed=5, cache_encoded_outputs=True, cache_full_latent=True)
    cached.load_state_dict(plain.state_dict())
    actor, critic = make_obs()

    def run(policy: TokenActorCritic):
        torch.manual_seed(7)
        with count_syncs() as counts:
            act = policy.act(actor, critic)
            ev = policy.evaluate(actor, critic, act.actions)
        return act, ev, counts

    act_a, ev_a, counts_a = run(plain)
    act_b, ev_b, counts_b = run(cached)
    assert counts_a.syncs == 0 and counts_b.syncs > 0
    for x, y in zip((*act_a, *ev_a), (*act_b, *ev_b), strict=True):
        assert torch.equal(x, y)
    assert torch.equal(plain.act_deterministic(actor), cached.act_deterministic(actor))
    assert plain.encoded_outputs == {} and plain.full_latent is None
    tokens, latents = cached.encoded_outputs["tokens"], cached.encoded_outputs["latents"]
    assert tokens.device.type == "cpu" and not tokens.requires_grad
    assert tokens.shape == latents.shape == (64, 4, 4)
    assert torch.equal(tokens, cached.fsq(latents))
    assert cached.full_latent.shape == (64, 16 + 1110) and not cached.full_latent.requires_grad
    assert torch.equal(cached.full_latent[:, :16], tokens.flatten(1))


def test_full_latent_cache_alone_adds_no_host_sync() -> None:
    policy = make_policy(cache_full_latent=True)
    actor, critic = make_obs()
    with count_syncs() as counts:
        policy.act(actor, critic)
    assert counts.syncs == 0 and policy.full_latent is not None


# ----------------------------------------------------------------------------------------------- distribution
def test_std_is_clamped() -> None:
    policy = make_policy()
    actor, _ = make_obs(8)
    with torch.no_grad():
        policy.head.log_std[:10] = 5.0
        policy.head.log_std[10:20] = -9.0
        policy.head.log_std[20:] = math.log(0.3)
    std = policy.dist_params(actor)[:, 29:]
    assert torch.allclose(std[:, :10], torch.tensor(2.0))
    assert torch.allclose(std[:, 10:20], torch.tensor(0.05))
    assert torch.allclose(std[:, 20:], torch.tensor(0.3))


def test_evaluate_log_prob_equals_act_log_prob_and_deterministic_is_the_mean() -> None:
    policy = warmed(make_policy())
    actor, critic = make_obs()
    act = policy.act(actor, critic)
    ev = policy.evaluate(actor, critic, act.actions)
    assert act.actions.shape == (64, 29) and act.dist_params.shape == (64, policy.head.num_params)
    assert torch.equal(ev.log_prob, act.log_prob)
    assert torch.equal(ev.value, act.value) and ev.value.shape == (64,)
    assert torch.equal(policy.act_deterministic(actor), act.dist_params[:, :29])
    tokens = policy.encode(actor)
    assert torch.equal(policy.decode(tokens, actor), act.dist_params[:, :29])
    assert torch.allclose(policy.head.kl(act.dist_params, ev.dist_params), torch.zeros(64), atol=1e-3)


# ---------------------------------------------------------------------------------------------- auxiliary loss
def test_auxiliary_loss_reaches_every_encoder() -> None:
    policy = make_policy()
    actor, _ = make_obs()
    loss = policy.auxiliary_loss(actor)
    assert loss.dim() == 0
    loss.backward()
    for enc in policy.encoders:
        assert all(p.grad is not None and bool((p.grad != 0).any()) for p in enc.parameters())
    assert all(p.grad is None for p in policy.decoder.parameters())
    unweighted = make_policy(cfg=small_cfg(reconstruction_weight=1.0))
    assert torch.allclose(unweighted.auxiliary_loss(actor), loss.detach() * 10.0, rtol=1e-5)


def test_adam_steps_on_the_auxiliary_loss_reduce_it() -> None:
    policy = make_policy()
    g = torch.Generator().manual_seed(4)
    actor, _ = make_obs(256)
    factors = torch.randn(256, 3, generator=g)  # future motion and keypoints driven by a few factors
    actor[:, 1111:1691] = factors @ torch.randn(3, 580, generator=g)
    actor[:, 1691:] = factors @ torch.randn(3, 150, generator=g)
    policy.update_normalizers(actor, torch.zeros(256, CRITIC_DIM))
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    first = policy.auxiliary_loss(actor).item()
    for _ in range(20):
        opt.zero_grad()
        policy.auxiliary_loss(actor).backward()
        opt.step()
    assert policy.auxiliary_loss(actor).item() < 0.7 * first

# ---------------------------------------------------------------------------------------------------------- PPO
def test_one_ppo_update_runs_and_changes_parameters() -> None:
    """The conventional update and the whole-minibatch one (`compile=step`, run eagerly) on the same rollout:
    every part of the policy moves, by the same amounts within float32 rounding."""
    token_cfg = TokenEncoderConfig(encoder_hidden=[64], decoder_hidden=[64], critic_hidden=[64])
    policies = [make_policy(cfg=token_cfg) for _ in range(2)]
    policy = policies[0]
    steps, envs = 4, 16
    storage = RolloutStorage(steps, envs, policy.actor_obs_dim, CRITIC_DIM, SPEC, policy.head.num_params,
                             torch.device("cpu"))
    g = torch.Generator().manual_seed(3)
    with torch.inference_mode():
        for t in range(steps):
            actor, critic = make_obs(envs, seed=100 + t)
            for p in policies:
                p.update_normalizers(actor, critic)
            storage.store_policy_step(t, actor, critic, policy.act(actor, critic))
            done = torch.rand(envs, generator=g) < 0.2
            storage.store_env_step(t, torch.randn(envs, generator=g), done, torch.zeros(envs), gamma=0.99)
        compute_gae(storage.rewards, storage.values, storage.dones, torch.randn(envs, generator=g), 0.99, 0.95,
                    storage.advantages, storage.returns)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    recorded = []
    for p, mode in zip(policies, ("off", "step"), strict=True):
        ppo = FeedForwardPPO(p, PPOConfig(steps_per_env=steps, num_epochs=2, num_minibatches=2),
                             PerfConfig(compile=mode), envs, CRITIC_DIM, SPEC, torch.device("cpu"))
        assert (ppo.whole_step is not None) == (mode == "step")
        for name, x in storage.state_tensors().items():
            getattr(ppo.storage, name).copy_(x)
        torch.manual_seed(4)
        ppo.update()
        assert all(bool(torch.isfinite(x).all()) for x in ppo.statistics().values())
        recorded.append(float(ppo.statistics()["reconstruction_loss"]))  # every loss term is logged
    assert recorded[0] > 0 and recorded[0] == pytest.approx(recorded[1], rel=1e-5)
    changed = [k for k, v in policy.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.startswith("decoder.") for k in changed)
    assert any(k.startswith("encoders.") for k in changed)
    assert any(k.startswith("critic.") for k in changed)
    assert "head.log_std" in changed
    for (name, a), b in zip(policies[0].state_dict().items(), policies[1].state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")


# ------------------------------------------------------------------------------------------ layout and config
def test_default_layout_and_concatenation() -> None:
    shapes = {"policy": (1110,), "critic": (521,), "tokenizer/encoder_index": (1,),
              "tokenizer/future_joint_pos": (290,), "tokenizer/future_joint_vel": (290,),
              "tokenizer/future_keypoints": (150,)}
    layout = default_layout(shapes)
    assert layout == LAYOUT and list(layout) == list(LAYOUT)
    obs = {name: torch.randn(5, *shape) for name, shape in shapes.items()}
    out = torch.empty(5, sum(layout.values()))
    flat = concat_observations(obs, layout, out=out)
    assert flat.data_ptr() == out.data_ptr()
    assert torch.equal(flat, concat_observations(obs, layout))
    policy = make_policy()
    for name in layout:
        assert torch.equal(policy.part(flat, name), obs[name])
    with pytest.raises(ValueError, match="lack"):
        default_layout({"policy": (3,)})


def test_non_contiguous_encoder_inputs_and_no_normalization() -> None:
    layout = {"tokenizer/future_joint_pos": 290, "policy": 1110, "tokenizer/encoder_index": 1,
              "tokenizer/future_keypoints": 150, "tokenizer/future_joint_vel": 290}
    torch.manual_seed(0)
    policy = TokenActorCritic(layout, CRITIC_DIM, SPEC, small_cfg(normalize_obs=False))
    actor = torch.randn(6, sum(layout.values()))
    actor[:, 1400] = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    motion = policy.encoder_input(actor, 0)
    assert torch.equal(motion, torch.cat((actor[:, :290], actor[:, -290:]), dim=-1))
    act = policy.act(actor, torch.randn(6, CRITIC_DIM))
    policy.update_normalizers(actor, torch.randn(6, CRITIC_DIM))
    assert act.actions.shape == (6, 29) and bool(torch.isfinite(policy.auxiliary_loss(actor)))


@pytest.mark.parametrize(("layout", "cfg", "match"), [
    ({k: v for k, v in LAYOUT.items() if k != "tokenizer/encoder_index"}, None, "lacks"),
    ({k: v for k, v in LAYOUT.items() if k != "tokenizer/future_keypoints"}, None, "keypoints"),
    (LAYOUT, small_cfg(reconstruction_target="nope"), "reconstruction_target"),
    (LAYOUT, small_cfg(min_std=1.0), "min_std"),
    (LAYOUT, small_cfg(encoders={"bad": ["policy"]}, reconstruction_target="bad"), "may not read"),
])
def test_bad_configurations_are_rejected(layout, cfg, match) -> None:
    with pytest.raises(ValueError, match=match):
        TokenActorCritic(layout, CRITIC_DIM, SPEC, cfg)


def test_discrete_actions_and_wrong_observation_widths_are_rejected() -> None:
    with pytest.raises(ValueError, match="continuous"):
        TokenActorCritic(LAYOUT, CRITIC_DIM, ActionSpec("discrete", 3))
    with pytest.raises(ValueError, match="expected actor observations"):
        make_policy().encode(torch.zeros(4, 100))


def test_layer_norm_with_the_token_policy_is_one_line(tmp_path, capsys) -> None:
    """`policy.layer_norm` shapes the MLP policies; the token policy's networks are `policy.token.*`, so asking for
    it there is refused rather than ignored."""
    from syncfree.cli import main

    code = main(["train", "--task", "g1-track", "--policy.kind", "token", "--policy.layer_norm", "true",
                 "--iterations", "1", "--log.dir", str(tmp_path), "--log.progress", "false"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "policy.layer_norm=True is invalid" in err, err
    assert not any(tmp_path.iterdir())
