"""`env.random_start`: training starts each env's first episode at a random step of its time limit (rsl_rl's
`init_at_random_ep_len`); evaluation starts at step 0; a resumed run continues where it stopped."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import small_config
from syncfree.envs.api import ActionSpec, StepResult, VecEnv
from syncfree.errors import UserError
from syncfree.tasks import make_env
from syncfree.train.evaluate import evaluate_task
from syncfree.train.runner import Runner


@pytest.mark.parametrize("random_start", [False, True])
def test_training_starts_the_episodes_at_random_steps_of_the_time_limit(random_start: bool) -> None:
    cfg = small_config("pendulum")
    cfg.env.num_envs, cfg.env.max_episode_length, cfg.env.random_start = 64, 10, random_start
    runner = Runner(cfg)
    steps = runner.env.episode_length.clone()
    if not random_start:
        assert (steps == 0).all()
        return
    assert (steps >= 0).all() and (steps < 10).all()
    assert len(steps.unique()) >= 8  # 64 draws from 10 values
    first_end = torch.zeros(64, dtype=torch.int64)
    for t in range(1, 11):  # the first episodes end at their own steps, not all together
        step = runner.env.step(torch.zeros(64, 1))
        first_end = torch.where((first_end == 0) & step.truncated, t, first_end)
    assert torch.equal(first_end, 10 - steps)

def test_evaluation_starts_every_episode_at_step_zero() -> None:
    cfg = small_config("pendulum")
    cfg.env.max_episode_length = 10
    policy = Runner(cfg).policy
    plain = evaluate_task(cfg, policy, 16, torch.device("cpu"), seed=5)
    cfg.env.random_start = True
    np.testing.assert_array_equal(evaluate_task(cfg, policy, 16, torch.device("cpu"), seed=5), plain)


def test_the_manager_based_env_starts_at_random_steps() -> None:
    env = make_env("g1-track", 32, seed=1, max_episode_length=50)
    env.reset()
    env.start_at_random_steps()
    assert (env.episode_length >= 0).all() and (env.episode_length < 50).all()
    assert len(env.episode_length.unique()) > 1


class Counterless(VecEnv):
    """An env that keeps no step counts of its own."""

    num_envs, device, obs_shapes = 1, torch.device("cpu"), {"policy": (1,), "critic": (1,)}
    action_spec, max_episode_length = ActionSpec("continuous", 1), 10

    def reset(self) -> dict[str, torch.Tensor]:
        return {"policy": torch.zeros(1, 1), "critic": torch.zeros(1, 1)}

    def step(self, actions: torch.Tensor) -> StepResult:
        raise NotImplementedError


def test_an_env_without_step_counts_refuses_in_one_line() -> None:
    with pytest.raises(UserError, match=r"^env.random_start: Counterless keeps no episode step counts"):
        Counterless().start_at_random_steps()
