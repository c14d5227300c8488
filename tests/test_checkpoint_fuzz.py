"""Checkpoint fuzz: single-field corruptions of real checkpoints, each written with a valid digest, are either
refused in one line before anything is restored, or load and train exactly as the intact checkpoint does.

Corruptions change a field's type, a tensor's dtype or shape, a dict's keys or a list's length, put a non-finite
value in a floating-point tensor, or make a field that is never negative (iteration, env steps, learning rate,
normalizer variance and count, Adam's second moment and step count) negative. Values that are merely different
(another weight) are data, not corruption, and are not drawn.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import grid_config, recurrent_config, small_config
from syncfree.errors import UserError
from syncfree.tasks import preset, with_algorithm
from syncfree.train import checkpoint
from syncfree.train.runner import Runner

NON_NEGATIVE = ("iteration", "env_steps", "lr", "var", "count", "exp_avg_sq", "step", "skipped_steps")

Path_ = tuple[Any, ...]


def leaves(tree: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every field of a checkpoint: containers and the values inside them."""
    yield path, tree
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from leaves(value, (*path, key))
    elif isinstance(tree, (list, tuple)) and len(tree) < 50:  # long lists of numbers: the list itself is a field
        for i, value in enumerate(tree):
            yield from leaves(value, (*path, i))


def corruptions(value: Any, name: Any, rng: random.Random) -> list[tuple[str, Any]]:
    """Ways to corrupt one field (the description and the new value)."""
    out: list[tuple[str, Any]] = [("a string", "corrupt"), ("None", None)] if value is not None else [("an int", 7)]
    if isinstance(value, torch.Tensor):
        other = torch.int64 if value.is_floating_point() else torch.float32
        out.append(("another dtype", value.to(other)))
        out.append(("an extra dimension", value.unsqueeze(0)))
        if value.dim() >= 1 and value.shape[0] > 0:
            out.append(("one row short", value[:-1].clone()))
        if value.dim() == 2 and value.shape[0] != value.shape[1]:
            out.append(("transposed", value.t().contiguous()))
        if value.is_floating_point() and value.numel():
            bad = value.clone()
            bad.view(-1)[rng.randrange(bad.numel())] = rng.choice([float("nan"), float("inf")])
            out.append(("a non-finite value", bad))
        if str(name).endswith(NON_NEGATIVE) and value.numel() and value.dtype != torch.bool:
            out.append(("negative", -value.abs() - 1))
    elif isinstance(value, bool):
        out.append(("a float", 0.5))
    elif isinstance(value, int):
        out += [("a float", value + 0.5), ("a str of it", str(value))]
        if str(name) in NON_NEGATIVE:
            out.append(("negative", -abs(value) - 1))
    elif isinstance(value, float):
        out += [("a str of it", str(value)), ("NaN", float("nan"))]
    elif isinstance(value, dict) and value:
        key = rng.choice(list(value))
        out += [(f"without {key!r}", {k: v for k, v in value.items() if k != key}),
                ("an unexpected key", {**value, "unexpected": 1}), ("a list", list(value.values()))]
    elif isinstance(value, (list, tuple)) and value:
        out += [("one item short", type(value)(value[:-1])), ("a dict", {"0": value[0]})]
    return out


def set_field(tree: Any, path: Path_, value: Any) -> Any:
    """`tree` with the field at `path` replaced (the containers on the way copied, the rest shared)."""
    if not path:
        return value
    head, *rest = path
    return _with(tree, head, set_field(tree[head], tuple(rest), value))


def _with(container: Any, key: Any, value: Any) -> Any:
    if isinstance(container, dict):
        return {**container, key: value}
    items = list(container)
    items[key] = value
    return type(container)(items) if isinstance(container, tuple) else items


def trained(state_of: Runner) -> dict[str, torch.Tensor]:
    """What training changed: the policy's and the optimizer's tensors."""
    state = state_of.state_dict()
    return {name: t.clone() for name, t in checkpoint._tensors({"policy": state["policy"], "algorithm": state["algorithm"]})}


def g1_config():
    cfg = preset("g1-track")
    cfg.env.num_envs, cfg.iterations, cfg.log.progress = 4, 1, False
    cfg.ppo = dataclasses.replace(cfg.ppo, steps_per_env=2, num_minibatches=1, num_epochs=1)
    cfg.perf = dataclasses.replace(cfg.perf, compile="off")
    return cfg


def normalized_pendulum():
    cfg = small_config("pendulum")
    cfg.ppo.normalize_rewards = True
    return cfg


def sac_pendulum():
    """SAC whose checkpoint holds its replay buffer (filled, n-step) and takes gradient steps from the start."""
    cfg = with_algorithm(preset("pendulum"), "sac")
    cfg.env.num_envs, cfg.log.progress = 4, False
    cfg.policy = dataclasses.replace(cfg.policy, actor_hidden=[16], critic_hidden=[16])
    cfg.sac = dataclasses.replace(cfg.sac, steps_per_env=4, updates_per_iteration=2, batch_size=8, buffer_size=32,
                                  learning_starts=0, n_step=2, save_buffer=True)
    cfg.perf = dataclasses.replace(cfg.perf, compile="off")
    return cfg


TASKS = {"pendulum": normalized_pendulum, "cartpole": lambda: small_config("cartpole"),
         "pendulum-recurrent": recurrent_config, "grid-arena": grid_config, "g1-track": g1_config,
         "pendulum-sac": sac_pendulum}
CASES_PER_TASK = 110


@pytest.mark.parametrize("task", list(TASKS))
def test_corrupted_checkpoints_are_refused_or_train_identically(task: str, tmp_path: Path) -> None:
    if task == "grid-arena":
        pytest.importorskip("mettagrid")
    cfg = TASKS[task]()
    cfg.iterations = 1
    reference = Runner(cfg)
    reference.learn()
    runner = Runner(dataclasses.replace(cfg))  # seeded at construction: it trains as the reference did
    runner.learn()
    path = tmp_path / "fuzz.pt"
    checkpoint.save_atomic(reference.state_dict(), path)
    intact = checkpoint.load(path)  # as read back: what a resume restores
    # two runners kept in step: the reference trains from the intact checkpoint whenever the other trains from a
    # corrupted one that loaded (state a checkpoint does not hold, such as a recurrent rollout's, evolves alike)
    for each in (reference, runner):
        each.load_state_dict(copy.deepcopy(intact))

    rng = random.Random(f"fuzz-{task}")
    fields = [(p, v) for p, v in leaves(intact) if p and p[0] != "format"]
    outcomes = {"refused": 0, "identical": 0}
    for case in range(CASES_PER_TASK):
        field_path, value = rng.choice(fields)
        what, bad = rng.choice(corruptions(value, field_path[-1], rng))
        where = ".".join(map(str, field_path))
        corrupted = set_field(intact, field_path, bad)
        runner.load_state_dict(copy.deepcopy(intact))  # (an env may keep the tensors it is given)
        before = trained(runner)
        try:
            checkpoint.save_atomic(corrupted, path)
            checkpoint.read(path)
            runner.load_state_dict(checkpoint.load(path))
        except UserError as e:
            assert "\n" not in str(e) and str(e), (where, what)
            after = trained(runner)
            assert all(torch.equal(after[k], before[k]) for k in before), f"{where} ({what}): half restored"
            outcomes["refused"] += 1
            continue
        except Exception as e:
            pytest.fail(f"case {case}: {where} as {what}: {type(e).__name__}: {e}")
        runner.iterate()
        reference.load_state_dict(copy.deepcopy(intact))
        reference.iterate()
        got, expected = trained(runner), trained(reference)
        differ = [k for k in expected if k not in got or not torch.equal(got[k], expected[k])]
        assert got.keys() == expected.keys() and not differ, \
            f"case {case}: {where} as {what} was loaded and trained differently: {differ[:4]}"
        outcomes["identical"] += 1
    reference.close()
    print(f"{task}: {outcomes}")
    runner.close()
    assert outcomes["refused"] + outcomes["identical"] == CASES_PER_TASK
    assert outcomes["refused"] >= CASES_PER_TASK * 0.6, outcomes  # most corruptions are of fields that matter
