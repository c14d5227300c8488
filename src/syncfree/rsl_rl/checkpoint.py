"""syncfree's MLP actor-critic (and its recurrent MLP policy) and optimizer in rsl_rl 5's checkpoint layout, and
back.

rsl_rl 5 saves `{"actor_state_dict", "critic_state_dict", "optimizer_state_dict", "iter", "infos"}`; its models
name their layers `mlp.<i>`, the action noise `distribution.std_param` (or `log_std_param`) and the normalizer
`obs_normalizer._mean/_var/_std/count` (`[1, dim]` statistics). syncfree's `ActorCritic` holds the same tensors
as `actor.<i>`, `critic.<i>`, `head.std_param` (or `log_std`) and `actor_norm/critic_norm.mean/var/count`; the
layers are numbered alike and the parameters come in the same order (noise, actor, critic), so the optimizer's
per-parameter state carries over index by index. The recurrent MLP policy's cells (`actor_core.cells.<i>.<name>`)
are an `RNNModel`'s `rnn.rnn.<name>_l<i>` (`torch.nn.LSTM` and `LSTMCell` hold the same gates in the same order),
registered in rsl_rl's parameter order (noise, actor MLP, actor RNN, critic MLP, critic RNN).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from syncfree.algo.optim import PolicyOptimizer
from syncfree.algo.rnd import RND
from syncfree.errors import UserError
from syncfree.train.schema import Mismatch, check_optimizer_state, conform, describe

_NOISE = {"log_std": "distribution.log_std_param", "std_param": "distribution.std_param"}
_NORM_TO_RSL = {"mean": "_mean", "var": "_var", "count": "count"}
_RNN_KEY = re.compile(r"rnn\.rnn\.(?P<name>(weight|bias)_(ih|hh))_l(?P<layer>\d+)")
"""An `RNNModel`'s recurrent layer parameter (`torch.nn.LSTM`/`GRU` names), as syncfree's cell `<layer>.<name>`."""


def to_rsl_rl(policy_state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """A syncfree `ActorCritic` state dict as rsl_rl 5's `(actor_state_dict, critic_state_dict)`."""
    nets: dict[str, dict[str, Tensor]] = {"actor": {}, "critic": {}}
    for key, value in policy_state.items():
        part, _, rest = key.partition(".")
        if part == "head":
            nets["actor"][_NOISE[rest]] = value.clone()
        elif part in ("actor_core", "critic_core"):  # cells.<layer>.<name> -> torch.nn.LSTM's <name>_l<layer>
            _, layer, name = rest.split(".")
            nets[part.removesuffix("_core")][f"rnn.rnn.{name}_l{layer}"] = value.clone()
        elif part in nets:
            nets[part][f"mlp.{rest}"] = value.clone()
        elif part in ("actor_norm", "critic_norm"):
            net = nets[part.removesuffix("_norm")]
            net[f"obs_normalizer.{_NORM_TO_RSL[rest]}"] = value.clone() if rest == "count" else value.unsqueeze(0)
            if rest == "var":  # rsl_rl keeps the standard deviation too; it is the variance's square root
                net["obs_normalizer._std"] = value.sqrt().unsqueeze(0)
        else:
            raise ValueError(f"not an MLP actor-critic's parameter: {key}")
    return nets["actor"], nets["critic"]


def from_rsl_rl(actor: dict[str, Tensor] | None, critic: dict[str, Tensor] | None, source: str
                ) -> tuple[dict[str, Tensor], list[str]]:
    """rsl_rl 5's actor and critic state dicts (either None: not read) with syncfree's `ActorCritic` names; also
    the keys that have no syncfree counterpart (for the caller's `strict`)."""
    out: dict[str, Tensor] = {}
    unknown: list[str] = []
    noise = {v: k for k, v in _NOISE.items()}
    norm = {v: k for k, v in _NORM_TO_RSL.items()}
    for net, state in (("actor", actor), ("critic", critic)):
        if state is None:
            continue
        if not isinstance(state, dict):
            raise UserError(f"{source}: {net}_state_dict is a {type(state).__name__}, not a state dict")
        for key, value in state.items():
            if not isinstance(value, Tensor):
                raise UserError(f"{source}: {net}_state_dict[{key!r}] is a {type(value).__name__}, not a tensor")
            if key.startswith("mlp."):
                out[f"{net}.{key.removeprefix('mlp.')}"] = value
            elif (cell := _RNN_KEY.fullmatch(key)) is not None:
                out[f"{net}_core.cells.{cell['layer']}.{cell['name']}"] = value
            elif net == "actor" and key in noise:
                out[f"head.{noise[key]}"] = value
            elif key.startswith("obs_normalizer."):
                name = key.removeprefix("obs_normalizer.")
                if name == "_std":
                    continue  # the variance's square root: syncfree computes it
                if name not in norm:
                    unknown.append(f"{net}_state_dict.{key}")
                    continue
                out[f"{net}_norm.{norm[name]}"] = value if name == "count" else value.reshape(-1)
            else:
                unknown.append(f"{net}_state_dict.{key}")
    return out, unknown


def optimizer_to_rsl_rl(optim: PolicyOptimizer) -> dict[str, Any]:
    """The optimizer's state as a `torch.optim.Adam(W)` state dict that rsl_rl's optimizer loads: moments and
    step counts (on the CPU, as a non-fused Adam keeps them) and one group with the current learning rate."""
    own = optim.optimizer.state_dict()
    state = {index: {name: value.detach().to("cpu", torch.float32) if name == "step" else value.detach().clone()
                     for name, value in entry.items()} for index, entry in own["state"].items()}
    group = {key: value for key, value in own["param_groups"][0].items() if key != "lr"}
    group.update(lr=optim.current_learning_rate(), foreach=None, fused=None, capturable=False)
    if len(own["param_groups"]) != 1:
        raise ValueError("one parameter group expected")
    return {"state": state, "param_groups": [group]}


def optimizer_from_rsl_rl(optim: PolicyOptimizer, saved: Any, source: str) -> dict[str, Any]:
    """rsl_rl's `optimizer_state_dict` as the state `optim.load_state_dict` takes (moments, step counts, learning
    rate; this run's other options kept), checked before anything is copied: moments shaped as the parameters and
    finite, step counts >= 0, a learning rate > 0; one line naming the file and the field otherwise."""
    return {"optimizer": {"state": adam_state(saved, optim.params, "optimizer_state_dict", source)},
            "lr": torch.tensor(learning_rate_of(saved, source), dtype=torch.float64),
            "skipped_steps": optim.skipped_steps.clone()}


def adam_state(saved: Any, params: Sequence[Tensor], name: str, source: str) -> dict[int, Any]:
    """The per-parameter state of the Adam state dict `saved` (the file's field `name`), indexed by the position of
    each parameter in `params` (the file's groups list their parameters' indices in that order), checked."""
    if not isinstance(saved, dict) or not isinstance(saved.get("state"), dict) or not isinstance(
            saved.get("param_groups"), list) or not saved["param_groups"]:
        raise UserError(f"{source}: {name} is not an optimizer's state dict (state and param_groups)")
    indices: list[Any] = []
    for i, group in enumerate(saved["param_groups"]):
        if not isinstance(group, dict) or not isinstance(group.get("params"), list):
            raise UserError(f"{source}: {name}.param_groups[{i}] does not list its params")
        indices += group["params"]
    if len(indices) != len(params):
        raise UserError(f"{source}: {name} holds {len(indices)} parameters but this policy has {len(params)}")
    if any(not isinstance(index, int) or isinstance(index, bool) for index in indices) or len(set(indices)) != len(
            indices):
        raise UserError(f"{source}: {name}.param_groups: the parameters' indices are not distinct integers")
    position = {index: i for i, index in enumerate(indices)}
    unknown = [index for index in saved["state"] if index not in position]
    if unknown:
        raise UserError(f"{source}: {name}.state[{unknown[0]!r}] is the state of no parameter its groups list")
    state = {position[index]: entry for index, entry in saved["state"].items()}
    try:
        check_optimizer_state({"state": state, "param_groups": saved["param_groups"]}, params, name, every=False)
    except UserError as e:
        raise UserError(f"{source}: {e}") from None
    return state


def learning_rate_of(saved: dict[str, Any], source: str) -> float:
    """The learning rate of rsl_rl's optimizer state (its first group's): a finite number > 0."""
    lr = saved["param_groups"][0].get("lr") if isinstance(saved["param_groups"][0], dict) else None
    if not isinstance(lr, int | float) or isinstance(lr, bool) or not math.isfinite(lr) or lr <= 0:
        raise UserError(f"{source}: optimizer_state_dict.param_groups[0].lr: expected a finite number > 0, found "
                        f"{describe(lr)}")
    return float(lr)


MAX_ITER = 10**12
"""The largest `iter` a checkpoint may hold (far beyond any run; TensorBoard's steps are 64-bit signed)."""


def iteration_of(loaded: dict[str, Any], source: str) -> int:
    """The checkpoint's `iter`, which the runner counts on from: an integer >= 0."""
    if "iter" not in loaded:
        raise UserError(f"{source}: no iter (load it with load_cfg={{..., 'iteration': False}} to count from the "
                        "runner's own)")
    value = loaded["iter"]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_ITER:
        raise UserError(f"{source}: iter: expected an integer in [0, {MAX_ITER:.0e}], found {describe(value)}")
    return value


def checked_tensor(found: Tensor, expected: Tensor, key: str, name: str, source: str) -> None:
    """`found` has `expected`'s dtype and shape and in-range values (`syncfree.train.schema.conform`: finite, and
    never negative where syncfree's key `key` never is); one line under rsl_rl's `name` otherwise."""
    try:
        conform(found, expected, key)
    except Mismatch as e:
        raise UserError(f"{source}: {name}{str(e).removeprefix(key)}") from None


_RND_NORMS = {"state_norm.": "state_normalizer.", "reward_norm.stats.": "reward_normalizer.emp_norm."}
"""syncfree's RND normalizers -> rsl_rl's (`_mean/_var/_std/count`; the state's statistics `[1, dim]`, the reward's
`[1]`, as in syncfree)."""

_RND_OWN = ("env_steps", "reward_norm.discounted")
"""syncfree's RND state rsl_rl does not save (its step count and discounted sums restart with each process)."""


def rnd_to_rsl_rl(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """syncfree's `RandomNetworkDistillation` state dict as rsl_rl's `rnd_state_dict`."""
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        if key in _RND_OWN:
            continue
        prefix = next((p for p in _RND_NORMS if key.startswith(p)), None)
        if prefix is None:  # predictor.<i>, target.<i>: the same names
            out[key] = value.clone()
            continue
        name, theirs = key.removeprefix(prefix), _RND_NORMS[prefix]
        shaped = value.reshape(1, -1).clone() if prefix == "state_norm." and name != "count" else value.clone()
        out[f"{theirs}{_NORM_TO_RSL[name]}"] = shaped
        if name == "var":
            out[f"{theirs}_std"] = shaped.sqrt()
    return out


def rnd_from_rsl_rl(saved: Any, saved_optimizer: Any, rnd: RND, source: str) -> dict[str, Any]:
    """rsl_rl's `rnd_state_dict` and `rnd_optimizer_state_dict` as the state `rnd.load_state_dict` takes (the step
    count and discounted sums kept from this run's, and its optimizer's options), checked before anything is
    copied; one line naming the file and the field when it does not fit this run's RND."""
    if not isinstance(saved, dict):
        raise UserError(f"{source}: rnd_state_dict is not a state dict")
    own = rnd.module.state_dict()
    expected = rnd_to_rsl_rl(own)
    missing = sorted(set(expected) - set(saved))
    extra = sorted(set(saved) - set(expected))
    if missing or extra:
        what = f"lacks {missing[0]}" if missing else f"has {extra[0]}, which this run's RND lacks"
        raise UserError(f"{source}: rnd_state_dict {what} (the checkpoint's rnd_cfg differs from this config's)")
    for theirs, value in expected.items():
        if not theirs.endswith("._std"):  # the variance's square root: syncfree computes it
            checked_tensor(saved[theirs], value, _rnd_key(theirs), f"rnd_state_dict.{theirs}", source)
    module = dict(own)
    for key in own:
        if key not in _RND_OWN:
            prefix = next((p for p in _RND_NORMS if key.startswith(p)), None)
            theirs = key if prefix is None else f"{_RND_NORMS[prefix]}{_NORM_TO_RSL[key.removeprefix(prefix)]}"
            module[key] = saved[theirs].reshape(own[key].shape)
    state = adam_state(saved_optimizer, rnd.params, "rnd_optimizer_state_dict", source)
    return {"module": module, "optimizer": {"state": state,
                                            "param_groups": rnd.optimizer.state_dict()["param_groups"]}}


def _rnd_key(theirs: str) -> str:
    """syncfree's name of rsl_rl's RND tensor `theirs` (whose end says the range its values keep)."""
    for ours, prefix in _RND_NORMS.items():
        if theirs.startswith(prefix):
            name = theirs.removeprefix(prefix)
            return f"{ours}{next(k for k, v in _NORM_TO_RSL.items() if v == name)}"
    return theirs
