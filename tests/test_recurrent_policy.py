"""Recurrent token policy: sequence replay equals the rollout, resets at dones, padding ignored, gated outputs."""

from __future__ import annotations

import pytest
import torch

from syncfree.core.counters import count_syncs
from syncfree.policy.recurrent import EMPTY_TOKEN, ActionProbs, LSTMState, RecurrentTokenPolicy, TokenEncoder

ACTIONS, TOKENS = 5, 24


def random_tokens(*batch: int, gen: torch.Generator, tokens: int = TOKENS) -> torch.Tensor:
    """Valid tokens first, then padding, as MettaGrid writes them."""
    obs = torch.stack([torch.randint(0, 121, (*batch, tokens), generator=gen),
                       torch.randint(0, 16, (*batch, tokens), generator=gen),
                       torch.randint(0, 256, (*batch, tokens), generator=gen)], -1).to(torch.uint8)
    count = torch.randint(1, tokens, (*batch, 1), generator=gen)
    padding = torch.arange(tokens) >= count
    return obs.masked_fill(padding.unsqueeze(-1), EMPTY_TOKEN)


def policy(**kwargs) -> RecurrentTokenPolicy:
    torch.manual_seed(0)
    return RecurrentTokenPolicy(ACTIONS, embed_dim=8, encoder_hidden=16, hidden=12, **kwargs)


@pytest.mark.parametrize(("core", "last_action_input"), [("lstm", False), ("lstm", True), ("gru", True)])
def test_sequence_replay_equals_the_step_by_step_rollout(core: str, last_action_input: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    net = policy(core=core, last_action_input=last_action_input)
    segments, horizon = 6, 9
    obs = random_tokens(horizon, segments, gen=gen)
    dones = torch.rand(horizon, segments, generator=gen) < 0.25
    state = tuple(torch.randn(segments, 12, generator=gen) for _ in range(net.state_size))
    assert net.state_size == (2 if core == "lstm" else 1)
    last = torch.randint(0, ACTIONS, (segments,), generator=gen)
    initial, steps, lasts = state, [], []
    with torch.no_grad():
        for t in range(horizon):
            lasts.append(last)
            out, state = net.step(obs[t], state, dones[t], last if last_action_input else None)
            steps.append(out)
            last = out.actions
        replay = net.evaluate_sequence(obs.transpose(0, 1), torch.stack([s.actions for s in steps], 1), initial,
                                       dones.transpose(0, 1), torch.stack(lasts, 1) if last_action_input else None)
    assert dones.any(0).any() and not dones.all()
    for field in ("log_prob", "entropy", "value", "full_log_probs"):
        rolled = torch.stack([getattr(s, field) for s in steps], 1)
        torch.testing.assert_close(getattr(replay, field), rolled, rtol=0, atol=1e-6)


def test_the_previous_action_is_read_except_at_an_episode_start() -> None:
    gen = torch.Generator().manual_seed(4)
    net = policy(last_action_input=True)
    obs, state = random_tokens(2, gen=gen), net.initial_state(2)
    for done in (False, True):
        flags = torch.full((2,), done)
        a, _ = net.step(obs, state, flags, torch.tensor([0, 0]))
        b, _ = net.step(obs, state, flags, torch.tensor([1, 3]))
        assert torch.equal(a.value, b.value) == done
    with pytest.raises(ValueError, match="last_actions"):
        net.step(obs, state, flags)


def test_a_done_step_starts_from_the_zero_state() -> None:
    gen = torch.Generator().manual_seed(2)
    net = policy()
    obs = random_tokens(4, gen=gen)
    carried = LSTMState(torch.randn(4, 12, generator=gen), torch.randn(4, 12, generator=gen))
    done = torch.tensor([True, False, True, False])
    _, after_done = net.step(obs, carried, done)
    _, from_zero = net.step(obs, net.initial_state(4), torch.zeros(4, dtype=torch.bool))
    _, carried_on = net.step(obs, carried, torch.zeros(4, dtype=torch.bool))
    assert torch.equal(after_done.h[done], from_zero.h[done])
    assert torch.equal(after_done.h[~done], carried_on.h[~done])
    assert not torch.allclose(after_done.h[~done], from_zero.h[~done])


def test_padding_and_tokens_beyond_max_tokens_do_not_change_the_encoding() -> None:
    gen = torch.Generator().manual_seed(3)
    torch.manual_seed(0)
    encoder = TokenEncoder(8, 16, 12)
    obs = random_tokens(5, gen=gen, tokens=10)
    padded = torch.cat([obs, torch.full((5, 30, 3), EMPTY_TOKEN, dtype=torch.uint8)], 1)
    full = encoder(obs)
    assert torch.equal(encoder(padded), full)
    encoder.max_tokens = 10
    assert torch.equal(encoder(padded), full)
    encoder.max_tokens = 3  # drops valid tokens
    assert not torch.equal(encoder(padded), full)
    empty = torch.full((2, 7, 3), EMPTY_TOKEN, dtype=torch.uint8)
    assert torch.equal(encoder(empty), torch.zeros(2, 12))


def test_full_log_probs_are_emitted_only_when_asked() -> None:
    logits = torch.randn(3, 4, ACTIONS)
    actions = torch.randint(0, ACTIONS, (3, 4))
    with count_syncs() as quiet_ops:
        quiet = ActionProbs(emit_full_log_probs=False)(logits, actions)
    with count_syncs() as loud_ops:
        loud = ActionProbs()(logits, actions)
    assert quiet.full_log_probs is None
    assert quiet_ops.ops["aten::_log_softmax"] == 0 and loud_ops.ops["aten::_log_softmax"] == 1
    assert loud.full_log_probs.shape == (3, 4, ACTIONS)
    torch.testing.assert_close(loud.full_log_probs.logsumexp(-1), torch.zeros(3, 4))
    torch.testing.assert_close(loud.full_log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1), quiet.log_prob)
    assert torch.equal(loud.log_prob, quiet.log_prob) and torch.equal(loud.entropy, quiet.entropy)
    reference = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(quiet.log_prob, reference.log_prob(actions))
    torch.testing.assert_close(quiet.entropy, reference.entropy())
    net = policy(emit_full_log_probs=False)
    obs = random_tokens(3, gen=torch.Generator().manual_seed(4))
    out, _ = net.step(obs, net.initial_state(3), torch.zeros(3, dtype=torch.bool))
    assert out.full_log_probs is None and out.actions.dtype == torch.int64


def test_sampling_follows_the_logits() -> None:
    torch.manual_seed(5)
    logits = torch.tensor([[0.0, 0.0, 20.0, 0.0, 0.0], [0.0, 1.0, 0.0, 2.0, 0.0]]).expand(4000, 2, 5)
    out = ActionProbs(emit_full_log_probs=False)(logits)
    assert (out.actions[:, 0] == 2).all()
    freq = torch.bincount(out.actions[:, 1], minlength=5).float() / 4000
    torch.testing.assert_close(freq, torch.softmax(logits[0, 1], -1), rtol=0, atol=0.03)


def test_step_and_replay_with_backward_read_nothing_on_the_host() -> None:
    gen = torch.Generator().manual_seed(6)
    net = policy(max_tokens=16)
    obs, dones = random_tokens(4, 5, gen=gen), torch.rand(4, 5, generator=gen) < 0.3
    state = net.initial_state(4)
    actions = torch.randint(0, ACTIONS, (4, 5), generator=gen)
    with count_syncs() as counts:
        with torch.no_grad():
            net.step(obs[:, 0], state, dones[:, 0])
        ev = net.evaluate_sequence(obs, actions, state, dones)
        (ev.log_prob.mean() + ev.value.square().mean() - ev.entropy.mean()).backward()
    assert counts.syncs == 0
    assert all(p.grad is not None for p in net.parameters())


def masked_amax_encoder(encoder: TokenEncoder, tokens: torch.Tensor) -> torch.Tensor:
    """The encoder as first written: padding masked to 0 in a copy of the features, then `amax` over the tokens."""
    tokens = tokens[..., : encoder.max_tokens, :]
    index = tokens.long()
    valid = tokens[..., 0] != EMPTY_TOKEN
    x = (encoder.coordinate(index[..., 0]) + encoder.feature(index[..., 1])
         + encoder.value(tokens[..., 2:].float() / 255.0))
    return encoder.mlp(x).masked_fill(~valid.unsqueeze(-1), 0.0).amax(-2)


def test_encoder_equals_the_masked_copy_formulation_bitwise_forward_and_backward() -> None:
    """Padding at -inf before the last ReLU, in-place ReLUs on 2-D rows and `max` give the outputs and gradients of
    a masked copy of the features and `amax`, bit for bit (no two tokens tie at a positive value here), also for
    an observation without a valid token and for inputs with two batch dimensions."""
    gen = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    encoder = TokenEncoder(8, 16, 12, max_tokens=20)
    with torch.no_grad():  # padding tokens' own features are large: they would win any max they took part in
        encoder.coordinate.weight[EMPTY_TOKEN] = 50.0
        encoder.feature.weight[EMPTY_TOKEN] = 50.0
    tokens = random_tokens(3, 10, gen=gen)
    tokens[1, 2] = EMPTY_TOKEN  # nothing visible
    weights = torch.randn(3, 10, 12, generator=gen)
    results = []
    for forward in (lambda t: masked_amax_encoder(encoder, t), encoder):
        encoder.zero_grad()
        out = forward(tokens)
        (out * weights).sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in encoder.parameters()]))
    (reference, reference_grads), (out, grads) = results
    assert torch.equal(out, reference) and bool((out[1, 2] == 0).all())
    assert all(torch.equal(a, b) for a, b in zip(grads, reference_grads, strict=True))


# ------------------------------------------------------------------ the encoder's exact arithmetic cuts (switches)

def encoder_pass(encoder: TokenEncoder, tokens: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The encoding of `tokens` and every parameter's gradient of `(encoding * weights).sum()`."""
    encoder.zero_grad(set_to_none=True)
    out = encoder(tokens)
    (out * weights).sum().backward()
    return out.detach(), {name: p.grad.clone() for name, p in encoder.named_parameters()}


def cut_encoders(**cuts: bool) -> tuple[TokenEncoder, TokenEncoder]:
    """The conventional encoder and one with `cuts`, with the same parameters."""
    torch.manual_seed(3)
    conventional = TokenEncoder(8, 16, 12, max_tokens=20)
    cut = TokenEncoder(8, 16, 12, max_tokens=20, **cuts)
    cut.load_state_dict(conventional.state_dict())
    return conventional, cut


@pytest.mark.parametrize("cuts", [{"embedding_tables": True}, {"sparse_max": True},
                                  {"embedding_tables": True, "sparse_max": True}])
def test_encoder_cuts_equal_the_conventional_encoder(cuts: dict) -> None:
    """Tolerance: the folded tables reorder the first layer's sums (outputs within 1e-6, absolute, of values near
    1); the sparse max takes the same maxima (outputs bitwise equal alone) and reorders the last layer's gradient
    sums. Every gradient within 1e-5 of its largest entry. Two batch dimensions, tokens beyond `max_tokens` and an
    observation without a valid token included."""
    gen = torch.Generator().manual_seed(6)
    tokens = random_tokens(3, 10, gen=gen)
    tokens[1, 2] = EMPTY_TOKEN
    weights = torch.randn(3, 10, 12, generator=gen)
    conventional, cut = cut_encoders(**cuts)
    (reference, reference_grads), (out, grads) = (encoder_pass(e, tokens, weights) for e in (conventional, cut))
    if cuts.get("embedding_tables"):
        torch.testing.assert_close(out, reference, rtol=0, atol=1e-6)
    else:
        assert torch.equal(out, reference)
    assert bool((out[1, 2] == 0).all())
    assert set(grads) == set(reference_grads)
    for name, grad in grads.items():
        scale = reference_grads[name].abs().max()
        assert scale > 0, name  # every parameter learns here
        torch.testing.assert_close(grad, reference_grads[name], rtol=0, atol=1e-5 * scale.item(), msg=name)


def test_the_sparse_max_sends_a_tie_to_the_first_token_as_max_does() -> None:
    """Two equal tokens in one observation tie at every output: `max` (on this CPU build) and the sparse
    backward both send the gradient to the first of them, bit for bit."""
    gen = torch.Generator().manual_seed(7)
    tokens = random_tokens(4, gen=gen, tokens=20)
    tokens[:, 1] = tokens[:, 0]
    tokens[:, 0, 2], tokens[:, 1, 2] = 200, 200
    weights = torch.rand(4, 12, generator=gen)
    conventional, cut = cut_encoders(sparse_max=True)
    (reference, reference_grads), (out, grads) = (encoder_pass(e, tokens, weights) for e in (conventional, cut))
    assert torch.equal(out, reference)
    for name in ("mlp.2.weight", "mlp.2.bias"):
        torch.testing.assert_close(grads[name], reference_grads[name], rtol=0, atol=1e-6)


def test_the_cuts_survive_non_finite_and_bfloat16_inputs() -> None:
    """A NaN parameter gives NaN outputs and NaN gradients in the parameters where the conventional encoder has
    them (which the trainer's finite check then skips), never an index error; under bfloat16 autocast the cut encoder returns float32, its gradients float32 like its
    parameters, close to the conventional encoder's under the same autocast."""
    gen = torch.Generator().manual_seed(8)
    tokens = random_tokens(6, gen=gen)
    weights = torch.randn(6, 12, generator=gen)
    conventional, cut = cut_encoders(embedding_tables=True, sparse_max=True)
    for encoder in (conventional, cut):
        encoder.autocast_dtype = torch.bfloat16
    (reference, _), (out, grads) = (encoder_pass(e, tokens, weights) for e in (conventional, cut))
    assert out.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads.values())
    torch.testing.assert_close(out, reference, rtol=0.05, atol=0.05)
    for encoder in (conventional, cut):
        encoder.autocast_dtype = None
        with torch.no_grad():
            encoder.mlp[2].weight[0, 0] = float("nan")
    (reference, reference_grads), (out, grads) = (encoder_pass(e, tokens, weights) for e in (conventional, cut))
    assert bool(out[:, 0].isnan().all()) and torch.equal(out.isnan(), reference.isnan())
    # the same parameters get a NaN gradient (the conventional backward spreads NaN over more of their entries:
    # its dense product multiplies NaN weights by the zeros of tokens that won nothing), the others equal ones
    # (the NaN output's gradient, which the ReLU passes, reaches token 0 in both)
    nan = {name for name, grad in grads.items() if grad.isnan().any()}
    assert nan and nan == {name for name, grad in reference_grads.items() if grad.isnan().any()}
    for name in set(grads) - nan:
        scale = reference_grads[name].abs().max().item()
        torch.testing.assert_close(grads[name], reference_grads[name], rtol=0, atol=1e-5 * scale, msg=name)


@pytest.mark.usefixtures("compile_enabled")
def test_the_cut_encoder_compiles_to_the_eager_gradients() -> None:
    """One graph (`fullgraph`) with both cuts, forward and backward: the compiled gradients equal the eager ones
    within 1e-5 of each gradient's largest entry."""
    gen = torch.Generator().manual_seed(9)
    tokens = random_tokens(2, 6, gen=gen)
    weights = torch.randn(2, 6, 12, generator=gen)
    _, cut = cut_encoders(embedding_tables=True, sparse_max=True)
    eager, eager_grads = encoder_pass(cut, tokens, weights)
    compiled = torch.compile(cut, fullgraph=True, backend="aot_eager")
    cut.zero_grad(set_to_none=True)
    out = compiled(tokens)
    (out * weights).sum().backward()
    torch.testing.assert_close(out.detach(), eager, rtol=0, atol=1e-6)
    for name, p in cut.named_parameters():
        torch.testing.assert_close(p.grad, eager_grads[name], rtol=0, atol=1e-5 * eager_grads[name].abs().max().item())
