"""Checkpoint fuzz of the rsl_rl drop-in's `load()`: single-field corruptions of rsl_rl checkpoints (rsl_rl's own
runner's and the drop-in's: PPO with observation normalization and RND, a recurrent model, a distillation) are each
refused in one line with the runner as it was (policy, teacher, optimizer, learning rate, RND, iteration), or load
and leave the runner equal to what the intact file gives.

The corruptions are `test_checkpoint_fuzz`'s (a field's type, a tensor's dtype or shape, a dict's keys, a list's
length, a non-finite value, a negative value where there is none), and the iterations and learning rates the
drop-in once loaded: `iter` negative, past 10^12 or not an integer, a learning rate <= 0 or not finite.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("rsl_rl")
from rsl_rl.runners import OnPolicyRunner as RslRlRunner
from test_checkpoint_fuzz import corruptions, leaves, set_field
from test_rsl_rl_distillation import distillation_cfg
from test_rsl_rl_runner import RND_CFG, for_rsl_rl, rnn_cfg, rsl_env, train_cfg

from syncfree.errors import UserError
from syncfree.rsl_rl import DistillationRunner, OnPolicyRunner
from syncfree.rsl_rl.algorithms import StudentTeacher
from syncfree.train import checkpoint

TARGETED = [(("iter",), "negative", -5), (("iter",), "past int64", 2**63), (("iter",), "a str", "7"),
            (("iter",), "a float", 2.5),
            (("iter",), "a bool", True), (("iter",), "None", None),
            (("optimizer_state_dict", "param_groups", 0, "lr"), "negative", -1.0),
            (("optimizer_state_dict", "param_groups", 0, "lr"), "zero", 0.0),
            (("optimizer_state_dict", "param_groups", 0, "lr"), "infinite", float("inf")),
            (("optimizer_state_dict", "param_groups", 0, "lr"), "NaN", float("nan")),
            (("optimizer_state_dict", "param_groups", 0, "lr"), "a str", "0.001")]
"""The corruptions the drop-in once loaded, in every case's file."""

CASES = 200
"""Random corruptions per source file (three files: with `TARGETED`, 630 in all)."""


def ppo_with_rnd(folder: Path) -> tuple[OnPolicyRunner, Path]:
    """rsl_rl's own runner trains PPO with observation normalization and RND for an iteration and saves it."""
    cfg = train_cfg()
    cfg["algorithm"]["rnd_cfg"] = copy.deepcopy(RND_CFG)
    RslRlRunner(rsl_env(seed=2, step_dt=0.05), for_rsl_rl(cfg), log_dir=str(folder), device="cpu").learn(1)
    return OnPolicyRunner(rsl_env(step_dt=0.05), cfg, device="cpu"), folder / "model_0.pt"


def recurrent(folder: Path) -> tuple[OnPolicyRunner, Path]:
    """The drop-in trains a GRU model for an iteration and saves it."""
    OnPolicyRunner(rsl_env(seed=2), rnn_cfg("gru", 1), log_dir=str(folder), device="cpu").learn(1)
    return OnPolicyRunner(rsl_env(), rnn_cfg("gru", 1), device="cpu"), folder / "model_0.pt"


def distillation(folder: Path) -> tuple[DistillationRunner, Path]:
    """The drop-in distills a student from a PPO checkpoint's actor for an iteration and saves it (student,
    teacher, optimizer, iteration)."""
    OnPolicyRunner(rsl_env(), train_cfg(), device="cpu").save(str(folder / "teacher.pt"))
    student = DistillationRunner(rsl_env(seed=2), distillation_cfg(), log_dir=str(folder), device="cpu")
    student.load(str(folder / "teacher.pt"))
    student.learn(1)
    return DistillationRunner(rsl_env(), distillation_cfg(), device="cpu"), folder / "model_0.pt"


SOURCES: dict[str, Callable[[Path], tuple[Any, Path]]] = {
    "ppo-rnd (rsl_rl's file)": ppo_with_rnd, "gru": recurrent, "distillation": distillation}


def snapshot(runner: Any) -> dict[str, Any]:
    """What a load may change: the networks, the optimizer and its learning rate, RND, the iteration."""
    alg = runner.alg
    parts: dict[str, Any] = {"policy": alg.policy.state_dict(), "optimizer": alg.optim.state_dict()}
    if isinstance(alg, StudentTeacher):
        parts.update(teacher=alg.teacher.state_dict(), teacher_loaded=alg.teacher_loaded)
    if alg.rnd is not None:
        parts["rnd"] = alg.rnd.state_dict()
    parts["iteration"] = (runner.current_learning_iteration, runner.runner.iteration, runner.runner.env_steps)
    parts["lr"] = alg.learning_rate
    out: dict[str, Any] = {name: t.clone() for name, t in checkpoint._tensors(parts)}
    out.update((key, value) for key, value in parts.items() if not isinstance(value, dict))
    return out


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The entries of two snapshots that differ (a tensor's dtype too)."""
    def same(x: Any, y: Any) -> bool:
        if isinstance(x, torch.Tensor):
            return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)
        return x == y

    return sorted(set(a) ^ set(b)) + [k for k in a if k in b and not same(a[k], b[k])]


def with_targeted(value: Any, name: Any, rng: random.Random) -> list[tuple[str, Any]]:
    """`test_checkpoint_fuzz`'s corruptions, and those of the fields that are never negative by rsl_rl's names."""
    out = corruptions(value, name, rng)
    if name == "iter" and isinstance(value, int):
        out.append(("negative", -abs(value) - 1))
    if name == "lr" and isinstance(value, float):
        out += [("negative", -value), ("zero", 0.0)]
    return out


@pytest.mark.parametrize("source", list(SOURCES))
def test_corrupted_rsl_rl_checkpoints_are_refused_whole_or_load_as_the_intact_one(source: str, tmp_path: Path,
                                                                                   one_thread) -> None:
    runner, intact_path = SOURCES[source](tmp_path)
    fresh_path, path = tmp_path / "fresh.pt", tmp_path / "fuzz.pt"
    runner.current_learning_iteration = 5  # another iteration than the file's: a load of its shows
    runner.save(str(fresh_path))
    runner.load(str(fresh_path))
    fresh = snapshot(runner)
    runner.load(str(intact_path))
    clean = snapshot(runner)
    for part in ("policy.", "optimizer.", "iteration"):  # a half-done load would show in each part
        assert any(k.startswith(part) for k in differing(fresh, clean)), f"{part} is the same in both files"
    intact = torch.load(intact_path, weights_only=True)

    rng = random.Random(f"rsl_rl-fuzz-{source}")
    fields = [(p, v) for p, v in leaves(intact) if p]
    cases = [(p, what, bad) for p, what, bad in TARGETED]
    for _ in range(CASES):
        field_path, value = rng.choice(fields)
        what, bad = rng.choice(with_targeted(value, field_path[-1], rng))
        cases.append((field_path, what, bad))
    outcomes = {"refused": 0, "equal": 0}
    for field_path, what, bad in cases:
        where = ".".join(map(str, field_path))
        torch.save(set_field(intact, field_path, copy.deepcopy(bad)), path)
        runner.load(str(fresh_path))
        before = snapshot(runner)
        try:
            runner.load(str(path))
        except UserError as e:
            assert "\n" not in str(e) and str(e).startswith(f"checkpoint {path}: "), (where, what, str(e))
            assert not differing(snapshot(runner), before), f"{where} ({what}) refused, half loaded: {e}"
            outcomes["refused"] += 1
            continue
        except Exception as e:
            pytest.fail(f"{where} as {what}: {type(e).__name__}: {e}")
        changed = differing(snapshot(runner), clean)
        assert not changed, f"{where} as {what} loaded, unlike the intact file: {changed[:4]}"
        outcomes["equal"] += 1
    print(f"{source}: {outcomes}")
    assert sum(outcomes.values()) == len(cases) >= 210
    assert outcomes["refused"] >= len(cases) * 0.5, outcomes  # most corruptions are of fields that matter
