"""A user's `TorchVecEnv` (the README's recipe) with a contract fault: one line naming the env, the output, what was
expected and what came, before any torch error; through `syncfree.learn` a `UserError`, through the CLI
`syncfree: error: ...` and exit code 2. A checked env's later steps cost nothing more."""

from __future__ import annotations

import importlib
import logging
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
import torch

import syncfree
from syncfree.cli import main
from syncfree.core.counters import count_syncs
from syncfree.envs.api import ActionSpec, StepResult, VecEnv
from syncfree.envs.builtin.classic import CartPole, Pendulum
from syncfree.envs.builtin.point_mass import PointMass
from syncfree.envs.check import CHECK_STEPS, LONGEST_CHECKED_EPISODE, check_env
from syncfree.errors import UserError

MODULE = '''
import torch

from syncfree.envs import ActionSpec, TorchVecEnv


class Reach(TorchVecEnv):
    """The README's env, with one fault a user could make (`fault`)."""

    state_names = ("x",)
    default_max_episode_length = 50

    def __init__(self, num_envs=16, device="cpu", seed=0, fault="none"):
        self.fault = fault
        if fault != "no_super_init":
            super().__init__(num_envs, device, seed)
        discrete = fault.startswith("discrete")
        self.action_spec = ActionSpec("discrete", 3) if discrete else ActionSpec("continuous", 1)
        self.obs_shapes = {"policy": (1,), "critic": (1,)}
        rows = num_envs // 2 if fault == "state_rows" else num_envs
        dtype = torch.float64 if fault == "float64_state" else torch.float32
        self.x = torch.zeros(rows, 1, device=self.device, dtype=dtype)
        if fault == "num_envs":
            self.num_envs = num_envs + 1
        self.reset()

    def _initial_state(self):
        return {"x": self._uniform(-1.0, 1.0, 1)}

    def _advance(self, actions):
        if self.fault == "discrete_in_place":  # written for [N, 1] float actions
            self.x.add_(0.1 * actions.clamp(-1.0, 1.0))  # [N, 1] += [N] fails
        elif self.fault == "discrete_reward":  # [N, 1] + [N] broadcasts to [N, N]
            return -(self.x + 0.1 * actions).abs().squeeze(-1), torch.zeros(self.num_envs, dtype=torch.bool)
        else:
            self.x.add_(0.1 * actions.clamp(-1.0, 1.0))
        reward = -self.x.abs().squeeze(-1)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        if self.fault == "reward_column":
            reward = reward.unsqueeze(1)
        if self.fault == "float64_reward":
            reward = reward.double()
        if self.fault == "float_terminated":
            terminated = terminated.float()
        if self.fault == "int64_terminated":
            terminated = terminated.long()
        return reward, terminated

    def _observe(self):
        x = self.x
        if self.fault == "float64_obs":
            x = x.double()
        if self.fault == "int64_obs":
            x = (10 * x).long()
        return {"policy": x, "critic": x}
'''

FAULTS = {
    "reward_column": "env Reach: _advance() reward: expected shape (16,) (one per env), got shape (16, 1)",
    "discrete_reward": "env Reach: _advance() reward: expected shape (16,) (one per env), got shape (16, 16)",
    "discrete_in_place": "env Reach: step(actions) raised RuntimeError: output with shape [16, 1] doesn't match the "
                         "broadcast shape [16, 16] (at {module}.py:",
    "no_super_init": "env Reach: no device: its __init__ must call super().__init__(num_envs, device, seed) before "
                     "the env is used",
    "float64_obs": "env Reach: _observe()['policy']: expected torch.float32, got torch.float64",
    "int64_obs": "env Reach: _observe()['policy']: expected torch.float32, got torch.int64",
    "float64_state": "env Reach: _initial_state()['x']: expected shape (16, 1) torch.float64 on cpu (as self.x), got "
                     "shape (16, 1) torch.float32 on cpu",
    "float_terminated": "env Reach: _advance() terminated: expected a bool tensor, got torch.float32",
    "int64_terminated": "env Reach: _advance() terminated: expected a bool tensor, got torch.int64",
    "num_envs": "env Reach: num_envs: expected 16 (the count given to TorchVecEnv.__init__), got 17",
    "state_rows": "env Reach: self.x: expected 16 rows (one per env), got shape (8, 1)",
}
"""Each fault's line (its beginning), as `syncfree.learn` raises it and the CLI prints it."""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                request: pytest.FixtureRequest) -> tuple[ModuleType, str]:
    """The user's module in the current folder, with a factory per fault (a name of its own per test: modules are
    imported once)."""
    name = "user_reach_" + re.sub(r"\W", "_", request.node.name)[-60:]
    factories = "".join(f'\n\ndef make_{fault}(num_envs=16, device="cpu", seed=0):\n'
                        f'    return Reach(num_envs, device, seed, fault="{fault}")\n' for fault in [*FAULTS, "float64_reward"])
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE) + factories)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(name), name
    sys.modules.pop(name, None)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_of_a_users_env_is_one_user_error_through_learn(user_module, fault: str) -> None:
    module, name = user_module
    with pytest.raises(UserError) as error:
        syncfree.learn(getattr(module, f"make_{fault}")(), run_dir=False, iterations=1, perf={"compile": "off"},
                       log={"progress": False})
    message = str(error.value)
    assert message.startswith(FAULTS[fault].format(module=name)) and "\n" not in message, message


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_of_a_users_env_is_one_line_and_exit_2_through_the_cli(user_module, capsys, fault: str) -> None:
    _, name = user_module
    assert main(["train", "--task", f"{name}:make_{fault}", "--iterations", "1", "--perf.compile", "off",
                 "--log.progress", "false", "--log.dir", "runs"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("syncfree: error: " + FAULTS[fault].format(module=name)) and "\n" not in err, err


def test_the_env_that_step_raised_in_names_the_actions_it_was_given(user_module) -> None:
    module, name = user_module
    line = next(i for i, text in enumerate(MODULE.splitlines(), 1) if text.endswith("# [N, 1] += [N] fails"))
    with pytest.raises(UserError) as error:
        check_env(module.make_discrete_in_place())
    assert str(error.value).endswith(f"(at {name}.py:{line}, in _advance); it was given actions of shape (16,) "
                                     "torch.int64 [0, 0, 0, 0, ...] (action_spec discrete, 3 choices)"), error.value
    assert isinstance(error.value.__cause__, RuntimeError)  # the original, for a debugger


def test_float64_rewards_train_with_one_warning(user_module, caplog) -> None:
    """Rewards are stored as float32: right, but the env's float64 arithmetic buys nothing."""
    module, _ = user_module
    with caplog.at_level(logging.WARNING, logger="syncfree"):
        result = syncfree.learn(module.make_float64_reward(), run_dir=False, iterations=1, ppo={"steps_per_env": 8},
                                perf={"compile": "off"}, log={"progress": False})
    assert result.record["iteration"] == 1
    lines = [r.getMessage() for r in caplog.records if "float64" in r.getMessage()]
    assert lines == ["env Reach: step().reward is float64; the trainer keeps rewards in float32, so the env "
                     "computes them in float64 for nothing"]


class Endless(VecEnv):
    """Declares a 10-step time limit and never ends an episode (only the last `stopping` envs time out)."""

    def __init__(self, num_envs: int = 8, stopping: int = 0) -> None:
        self.num_envs, self.device, self.max_episode_length = num_envs, torch.device("cpu"), 10
        self.obs_shapes = {"policy": (2,), "critic": (2,)}
        self.action_spec = ActionSpec("continuous", 1)
        self.stopping, self.t, self.steps = stopping, 0, 0
        self.obs = torch.zeros(num_envs, 2)

    def reset(self) -> dict[str, torch.Tensor]:
        self.t = 0
        return {"policy": self.obs, "critic": self.obs}

    def step(self, actions: torch.Tensor) -> StepResult:
        self.t, self.steps = self.t + 1, self.steps + 1
        truncated = torch.zeros(self.num_envs, dtype=torch.bool)
        truncated[self.num_envs - self.stopping:] = self.t % self.max_episode_length == 0
        zeros = torch.zeros(self.num_envs)
        return StepResult({"policy": self.obs, "critic": self.obs}, zeros, torch.zeros_like(truncated), truncated,
                          {"episode_return": zeros, "episode_length": zeros})


def test_an_env_that_never_ends_an_episode_within_its_time_limit_is_one_warning(caplog) -> None:
    """Training is right (no episode boundary to bootstrap across), but no return is ever logged and evaluation
    scores NaN: a warning after `max_episode_length` steps, not an error."""
    env = Endless(stopping=2)
    with caplog.at_level(logging.WARNING, logger="syncfree"):
        check_env(env)
    assert env.steps == 10
    assert [r.getMessage() for r in caplog.records] == [
        "env Endless: 6 of 8 envs ran max_episode_length=10 steps (neutral actions) without ending an episode: their "
        "returns are never logged and evaluation, which runs that many steps, scores them NaN; end each episode at "
        "its time limit (truncated) or declare the limit the env keeps"]


def test_a_time_limit_longer_than_checked_is_not_waited_for(caplog) -> None:
    env = Endless()
    env.max_episode_length = LONGEST_CHECKED_EPISODE + 1
    with caplog.at_level(logging.WARNING, logger="syncfree"):
        check_env(env)
    assert env.steps == CHECK_STEPS and not caplog.records


class CountedCartPole(CartPole):
    steps = 0

    def step(self, actions: torch.Tensor) -> StepResult:
        self.steps += 1
        return super().step(actions)


def test_an_env_whose_episodes_all_end_is_stepped_no_further_and_not_warned_of(caplog) -> None:
    env = Endless(stopping=8)
    with caplog.at_level(logging.WARNING, logger="syncfree"):
        check_env(env)
    assert env.steps == 10 and not caplog.records
    cartpole = CountedCartPole(8)  # action 0 pushes left: every pole falls long before the 500-step limit
    with caplog.at_level(logging.WARNING, logger="syncfree"):
        check_env(cartpole)
    assert 3 <= cartpole.steps < 100 and not caplog.records


@pytest.mark.parametrize(("env_type", "actions", "ops"), [
    (Pendulum, torch.zeros(16, 1), 50), (CartPole, torch.zeros(16, dtype=torch.int64), 59),
    (PointMass, torch.zeros(16, 2), 34)])
def test_a_checked_envs_later_steps_dispatch_no_more_ops_and_read_nothing(env_type, actions, ops: int) -> None:
    """The first step checks; every later one is `_initial_state` and `_transition` alone: the counts the built-in
    envs had before the check existed, and no host read."""
    env = env_type(16)
    check_env(env)
    for _ in range(3):
        with count_syncs() as counted:
            env.step(actions)
        assert (counted.num_ops, counted.syncs) == (ops, 0)
    with count_syncs() as bare:
        env._transition(actions, env._initial_state())
    assert bare.num_ops == ops
