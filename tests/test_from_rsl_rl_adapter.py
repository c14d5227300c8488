"""An env written for rsl_rl's VecEnv interface (as Isaac Lab's are) behind syncfree's env protocol."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("rsl_rl")

from rsl_rl.env import VecEnv
from tensordict import TensorDict

from conftest import TEST_DEVICE, small_config
from syncfree.envs.adapters.from_rsl_rl import RslRlVecEnv
from syncfree.errors import UserError
from syncfree.train.runner import Runner


class PointMass(VecEnv):
    """2-D point mass pushed towards the origin; fails when it leaves a 3 m box, times out after 6 steps.

    `policy` = position and velocity, `critic` = those and the time left. `broken` names one output to get wrong.
    """

    def __init__(self, num_envs: int = 8, groups: tuple[str, ...] = ("policy", "critic"), broken: str = "",
                 seed: int = 0, device: str = "cpu") -> None:
        self.num_envs, self.num_actions, self.max_episode_length = num_envs, 2, 6
        self.device, self.cfg = torch.device(device), {}
        self.groups, self.broken = groups, broken
        self.generator = torch.Generator().manual_seed(seed)
        self.state = torch.zeros(num_envs, 4, device=self.device)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.resets = 0
        self._reset_where(torch.ones(num_envs, dtype=torch.bool, device=self.device))

    def _reset_where(self, done: torch.Tensor) -> None:
        position = torch.rand(self.num_envs, 2, generator=self.generator).to(self.device) * 4 - 2
        fresh = torch.cat((position, torch.zeros_like(position)), dim=1)
        self.state = torch.where(done.unsqueeze(1), fresh, self.state)
        self.episode_length_buf = self.episode_length_buf.masked_fill(done, 0)

    def get_observations(self) -> TensorDict:
        time_left = (self.max_episode_length - self.episode_length_buf).float().unsqueeze(1)
        groups = {"policy": self.state.clone(), "critic": torch.cat((self.state, time_left), dim=1)}
        if self.broken == "obs_shape":
            groups["policy"] = groups["policy"][:, :3]
        if self.broken == "obs_rank":
            groups["policy"] = groups["policy"].unsqueeze(1)
        data = {g: groups[g] for g in self.groups}
        if self.broken == "nested":
            data["policy"] = TensorDict({"pos": self.state[:, :2]}, batch_size=[self.num_envs])
        return TensorDict(data, batch_size=[self.num_envs])

    def reset(self) -> tuple[TensorDict, dict]:
        self.resets += 1
        self._reset_where(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self.get_observations(), {}

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        pos, vel = self.state[:, :2], self.state[:, 2:]
        vel = 0.9 * vel + 0.1 * actions.clamp(-1, 1)
        pos = pos + 0.1 * vel
        self.state = torch.cat((pos, vel), dim=1)
        self.episode_length_buf = self.episode_length_buf + 1
        distance = pos.norm(dim=1)
        reward = 1.0 - distance / 4
        failed = pos.abs().max(dim=1).values > 3.0
        time_outs = (self.episode_length_buf >= self.max_episode_length) & ~failed
        dones = (failed | time_outs).long()  # Isaac Lab returns integer dones
        extras = {"time_outs": time_outs, "log": {"Metrics/distance": distance, "Episode_Termination/failed": 0.5}}
        if self.broken == "reward_shape":
            reward = reward.unsqueeze(1)
        if self.broken == "dones_type":
            dones = dones.tolist()
        self._reset_where(dones.bool() if isinstance(dones, torch.Tensor) else failed | time_outs)
        return self.get_observations(), reward, dones, extras


def test_adapter_maps_groups_and_episode_ends() -> None:
    inner = PointMass(4)
    env = RslRlVecEnv(inner)
    assert env.obs_shapes == {"policy": (4,), "critic": (5,)}
    assert env.action_spec.kind == "continuous" and env.action_spec.size == 2
    assert env.max_episode_length == 6 and not env.saveable
    obs = env.reset()
    assert inner.resets == 1 and obs["critic"][:, 4].tolist() == [6.0] * 4
    push = torch.tensor([[20.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    inner.state[0] = torch.tensor([2.99, 0.0, 5.0, 0.0])  # env 0 leaves the box at the first step
    step = env.step(push)
    assert step.terminated.tolist() == [True, False, False, False] and not step.truncated.any()
    assert step.info["episode_length"][0] == 1 and env.episode_length.tolist() == [0, 1, 1, 1]
    rewards = step.reward.clone()
    for _ in range(5):
        step = env.step(torch.zeros(4, 2))
        rewards += step.reward
    assert step.truncated.tolist() == [False, True, True, True] and not step.terminated.any()
    assert step.info["episode_length"][1:].tolist() == [6, 6, 6]
    assert torch.allclose(step.info["episode_return"][1:], rewards[1:])
    assert step.obs["critic"][1:, 4].tolist() == [6.0] * 3  # the env reset them


def test_pop_log_returns_means_since_the_last_call() -> None:
    env = RslRlVecEnv(PointMass(4))
    env.reset()
    distances = []
    for _ in range(3):
        env.step(torch.zeros(4, 2))
        distances.append(env.env.state[:, :2].norm(dim=1).mean())  # no episode ends in 3 steps
    log = env.pop_log()
    assert float(log["Episode_Termination/failed"]) == 0.5
    assert float(log["Metrics/distance"]) == pytest.approx(torch.stack(distances).mean().item(), rel=1e-6)
    assert env.pop_log() == {}


def test_critic_falls_back_to_the_policy_group() -> None:
    env = RslRlVecEnv(PointMass(4, groups=("policy",)))
    assert env.critic_group == "policy" and env.obs_shapes["critic"] == (4,)
    obs = env.reset()
    assert obs["critic"] is obs["policy"]


def test_trainer_runs_two_iterations_on_an_rsl_rl_env() -> None:
    cfg = small_config("point-mass")
    cfg.env.num_envs = 16
    cfg.iterations = 2
    inner = PointMass(16, device=TEST_DEVICE)
    trainer = Runner(cfg, env=RslRlVecEnv(inner))
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    record = trainer.learn()
    assert record["iteration"] == 2 and record["episodes"] > 0
    assert "Metrics/distance" in record and record["Episode_Termination/failed"] == 0.5
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters(), strict=True))
    state = trainer.state_dict()
    assert state["env"] is None
    resets = inner.resets
    trainer.load_state_dict(state)
    assert inner.resets == resets + 1  # external envs start new episodes on resume


@pytest.mark.parametrize(("broken", "groups", "message"), [
    ("", ("critic",), "get_observations\\(\\) has no observation group 'policy' \\(has critic\\)"),
    ("nested", ("policy", "critic"), "observation group 'policy' is a TensorDict, not a tensor"),
    ("obs_rank", ("policy", "critic"), "observation group 'policy' has shape \\(4, 1, 4\\); expected"),
])
def test_bad_observations_are_refused_at_construction(broken: str, groups: tuple[str, ...], message: str) -> None:
    with pytest.raises(UserError, match=message) as e:
        RslRlVecEnv(PointMass(4, groups=groups, broken=broken))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("broken", "message"), [
    ("reward_shape", "step\\(\\) rewards has shape \\(4, 1\\); expected \\[num_envs\\]"),
    ("dones_type", "step\\(\\) dones is a list, not a tensor"),
    ("obs_shape", "observation group 'policy' has shape \\(4, 3\\), expected \\(4, 4\\)"),
])
def test_bad_step_results_are_refused_at_the_first_step(broken: str, message: str) -> None:
    inner = PointMass(4)
    env = RslRlVecEnv(inner)
    env.reset()
    inner.broken = broken
    with pytest.raises(UserError, match=message):
        env.step(torch.zeros(4, 2))


def test_other_group_names_and_a_missing_critic_at_step() -> None:
    env = RslRlVecEnv(PointMass(4), policy_group="critic", critic_group="policy")
    assert env.obs_shapes == {"policy": (5,), "critic": (4,)}
    inner = PointMass(4)
    env = RslRlVecEnv(inner)
    inner.groups = ("policy",)
    with pytest.raises(UserError, match="step\\(\\) has no observation group 'critic'"):
        env.step(torch.zeros(4, 2))
    with pytest.raises(UserError, match="rsl_rl env object: no 'num_envs'"):
        RslRlVecEnv(object())
