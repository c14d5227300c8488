"""`check_env`: every built-in task's env passes it; a user's env with a mistake is refused in one line naming the
field, expected and got, before the policy is built or anything compiles."""

from __future__ import annotations

import time

import pytest
import torch

import syncfree
from syncfree.envs.api import StepResult
from syncfree.envs.builtin.classic import Pendulum
from syncfree.errors import UserError
from syncfree.tasks import TASKS, make_env


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_built_in_tasks_env_passes(task: str) -> None:
    if task == "grid-arena":
        pytest.importorskip("mettagrid")
    syncfree.check_env(make_env(task, 4, seed=1))


class Mistaken(Pendulum):
    """Pendulum with one mistake a user's env could make."""

    def __init__(self, mistake: str) -> None:
        self.mistake = mistake
        super().__init__(16, seed=0)
        if mistake == "declared_width":
            self.obs_shapes = {"policy": (4,), "critic": (3,)}  # returns 3 wide
        if mistake == "device_name":
            self.device = "gpu0"  # type: ignore[assignment]

    def __getattribute__(self, name: str):  # an env that never declared its action_spec
        if name == "action_spec" and object.__getattribute__(self, "__dict__").get("mistake") == "no_action_spec":
            raise AttributeError(name)
        return super().__getattribute__(name)

    def reset(self) -> dict[str, torch.Tensor]:
        obs = super().reset()
        if self.mistake == "missing_group":
            return {"policy": obs["policy"]}
        if self.mistake == "nan_obs":
            return {**obs, "policy": obs["policy"].clone().fill_(float("nan"))}
        return obs

    def step(self, actions: torch.Tensor) -> StepResult:
        out = super().step(actions)
        if self.mistake == "reward_shape":
            return out._replace(reward=out.reward.unsqueeze(1))
        if self.mistake == "reward_dtype":
            return out._replace(reward=out.reward.to(torch.int64))
        if self.mistake == "done_dtype":
            return out._replace(terminated=out.terminated.float())
        if self.mistake == "obs_shape":
            return out._replace(obs={**out.obs, "critic": out.obs["critic"][:, :2]})
        if self.mistake == "obs_dtype":
            return out._replace(obs={**out.obs, "policy": out.obs["policy"].double()})
        if self.mistake == "tuple":
            return tuple(out)  # type: ignore[return-value]
        return out


@pytest.mark.parametrize(("mistake", "line"), [
    ("declared_width", "env Mistaken: _observe()['policy']: expected shape (16, 4) (num_envs, *obs_shapes['policy']), "
                       "got shape (16, 3)"),
    ("no_action_spec", "env Mistaken: action_spec: expected declared on the env (a VecEnv attribute), got missing"),
    ("missing_group", "env Mistaken: reset()['critic']: expected the group obs_shapes declares"),
    ("nan_obs", "env Mistaken: reset()['policy']: expected finite values, got NaN or infinity"),
    ("reward_shape", "env Mistaken: step().reward: expected shape (16,) (one per env), got shape (16, 1)"),
    ("reward_dtype", "env Mistaken: step().reward: expected a floating-point tensor, got torch.int64"),
    ("done_dtype", "env Mistaken: step().terminated: expected a bool tensor, got torch.float32"),
    ("obs_shape", "env Mistaken: step().obs['critic']: expected shape (16, 3)"),
    ("obs_dtype", "env Mistaken: step().obs['policy']: expected torch.float32, got torch.float64"),
    ("tuple", "env Mistaken: step(): expected a StepResult"),
])
def test_a_mistake_in_a_users_env_is_one_line_before_anything_compiles(mistake: str, line: str) -> None:
    """Through `syncfree.learn(env)` with the default (compiled) settings: refused within 5 s."""
    start = time.perf_counter()
    with pytest.raises(UserError) as error:
        syncfree.learn(Mistaken(mistake), run_dir=False, iterations=1, log={"progress": False})
    assert time.perf_counter() - start < 5
    assert str(error.value).startswith(line) and "\n" not in str(error.value), str(error.value)


def test_a_device_that_is_no_device_is_one_line() -> None:
    with pytest.raises(UserError) as error:
        syncfree.check_env(Mistaken("device_name"))
    assert str(error.value) == "env Mistaken: device: expected a torch.device (or a name such as 'cpu'), got 'gpu0'"


def test_a_correct_users_env_trains_after_the_check() -> None:
    result = syncfree.learn(Mistaken("none"), run_dir=False, iterations=1, perf={"compile": "off"},
                            ppo={"steps_per_env": 8}, log={"progress": False})
    assert result.record["iteration"] == 1
