"""MettaGrid simulations behind syncfree's env protocol: one row per agent, shared host arrays, restarts per slice."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("mettagrid")

import pydantic
from mettagrid import MettaGridConfig

from conftest import StagingCopies
from syncfree.envs.adapters import mettagrid as adapter
from syncfree.envs.adapters.mettagrid import (
    MettaGridSpec,
    MettaGridVecEnv,
    learnable_spec,
    mettagrid_raw_throughput,
    random_policy_reward,
)
from syncfree.envs.api import ActionSpec, StepResult
from syncfree.envs.throughput import env_only_throughput
from syncfree.errors import UserError

NOOP, NORTH, SOUTH, WEST, EAST = range(5)
MOVES = {NORTH: (-1, 0), SOUTH: (1, 0), WEST: (0, -1), EAST: (0, 1)}


def room(agents: int = 3, size: int = 9, max_steps: int = 50) -> MettaGridSpec:
    return MettaGridSpec("empty-room", agents_per_env=agents, width=size, height=size, max_steps=max_steps)


def positions(sim) -> dict[int, tuple[int, int]]:
    return {o["agent_id"]: (o["r"], o["c"]) for o in sim.grid_objects(ignore_types=["wall"]).values()
            if "agent_id" in o}


@pytest.mark.parametrize("spec", [room(), MettaGridSpec("arena", agents_per_env=4, width=8, height=8)])
def test_shapes_dtypes_and_spec(spec: MettaGridSpec) -> None:
    env = MettaGridVecEnv(spec, num_simulations=2, seed=1)
    n = 2 * spec.agents_per_env
    assert env.num_envs == env.num_agents_total == n and env.num_simulations == 2
    assert env.action_names[:5] == ["noop", "move_north", "move_south", "move_west", "move_east"]
    assert env.action_spec == ActionSpec("discrete", len(env.action_names))
    assert env.obs_shapes == {"policy": (500, 3), "critic": (500, 3)}
    assert env.max_episode_length == spec.max_steps and not env.saveable and env.teacher_actions is None
    obs = env.reset()
    assert obs["policy"] is obs["critic"] and obs["policy"].dtype == torch.uint8 and obs["policy"].shape == (n, 500, 3)
    assert ((obs["policy"][:, :, 1] != 0xFF).sum(1) > 0).all()  # every agent sees some tokens
    step = env.step(torch.zeros(n, dtype=torch.int64))
    assert step.reward.shape == (n,) and step.reward.dtype == torch.float32
    assert step.terminated.dtype == torch.bool and step.truncated.dtype == torch.bool
    assert step.info["episode_length"].dtype == torch.int64 and step.info["episode_return"].shape == (n,)
    assert env.masks.all() and env.masks.shape == (n,)
    env.close()


def test_a_step_changes_observations_and_views_share_memory_with_mettagrid() -> None:
    env = MettaGridVecEnv(room(agents=4), num_simulations=3, seed=0)
    obs = env.reset()["policy"]
    before = obs.clone()
    ptrs = (obs.data_ptr(), env._reward.data_ptr(), env._actions.data_ptr())
    for sim, rows in zip(env.simulations, obs.split(4), strict=True):  # MettaGrid writes straight into the view
        assert np.shares_memory(sim._c_sim.observations(), rows.numpy())
        assert np.shares_memory(sim._c_sim.actions(), env._actions.numpy())
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        step = env.step(torch.randint(1, 5, (12,), generator=gen))
        assert step.obs["policy"] is obs
        assert (obs.data_ptr(), step.reward.data_ptr(), env._actions.data_ptr()) == ptrs
    assert not torch.equal(obs, before)
    env.close()


def test_finished_simulations_restart_on_their_slice_only() -> None:
    env = MettaGridVecEnv(room(agents=2, max_steps=4), num_simulations=3, seed=10)
    env.reset()
    noop = torch.zeros(6, dtype=torch.int64)
    first = list(env.simulations)
    env.step(noop)
    env.simulations[0].end_episode()  # simulation 0 ends early (after 2 steps), the others at max_steps
    step = env.step(noop)
    assert step.truncated.tolist() == [True, True, False, False, False, False] and not step.terminated.any()
    assert step.info["episode_length"][:2].tolist() == [2, 2]
    assert env.simulations[0] is not first[0] and env.simulations[1:] == first[1:]
    assert env.simulations[0].seed == 13 and [s.current_step for s in env.simulations] == [0, 2, 2]
    assert env.episode_length.tolist() == [0, 0, 2, 2, 2, 2]
    lengths = []
    for _ in range(4):
        step = env.step(noop)
        lengths.append(torch.where(step.truncated, step.info["episode_length"], 0).tolist())
    assert lengths == [[0] * 6, [0, 0, 4, 4, 4, 4], [0] * 6, [4, 4, 0, 0, 0, 0]]
    assert [s.seed for s in env.simulations] == [16, 14, 15]  # seed + the count of simulations started before
    assert float(env.pop_log()["mettagrid/restarts"]) == 4 and float(env.pop_log()["mettagrid/restarts"]) == 0
    env.close()


def assert_same_step(x: StepResult, y: StepResult) -> None:
    """Two steps' observations, rewards, episode ends and episode totals, equal bit for bit."""
    for u, v in ((x.obs["policy"], y.obs["policy"]), (x.reward, y.reward), (x.terminated, y.terminated),
                 (x.truncated, y.truncated), (x.info["episode_return"], y.info["episode_return"]),
                 (x.info["episode_length"], y.info["episode_length"])):
        assert torch.equal(u, v)


def test_a_staged_step_is_one_copy_each_way_and_matches_the_unstaged_one() -> None:
    """With host buffers apart from the device tensors (the CUDA path, here on the CPU), a step's observations,
    rewards and episode ends reach the device in one copy of the shared buffer MettaGrid writes into, and the
    actions MettaGrid's action array in one; every output equals the unstaged adapter's, through restarts."""
    spec = learnable_spec(max_steps=20)
    direct, staged = MettaGridVecEnv(spec, 3, seed=5), MettaGridVecEnv(spec, 3, seed=5, staged=True)
    assert torch.equal(direct.reset()["policy"], staged.reset()["policy"])
    assert np.shares_memory(staged.simulations[0]._c_sim.observations(), staged._pack.array("obs"))
    gen = torch.Generator().manual_seed(1)
    rewarded = 0.0
    for _ in range(45):
        a = torch.randint(0, direct.action_spec.size, (12,), generator=gen)
        x = direct.step(a)
        with StagingCopies(staged) as copies:
            y = staged.step(a)
        assert (copies.uploads, copies.downloads) == (1, 1)
        assert_same_step(x, y)
        rewarded += float(x.reward.abs().sum())
    assert float(staged.pop_log()["mettagrid/restarts"]) == 6 and rewarded > 0
    assert staged.transfers() == {"uploads": 47, "downloads": 45}  # and at construction and reset
    direct.close()
    staged.close()


def test_cache_game_config_steps_the_same_simulations() -> None:
    """`cache_game_config` (equivalence): observations, rewards, episode ends and episode totals equal bit for bit
    with the game config converted once and with MettaGrid converting it for every episode, through restarts."""
    spec = learnable_spec(max_steps=10)
    cached, converted = (MettaGridVecEnv(spec, 3, seed=5, cache_game_config=c) for c in (True, False))
    assert torch.equal(cached.reset()["policy"], converted.reset()["policy"])
    gen = torch.Generator().manual_seed(2)
    for _ in range(35):
        a = torch.randint(0, cached.action_spec.size, (12,), generator=gen)
        x, y = cached.step(a), converted.step(a)
        assert_same_step(x, y)
    assert float(cached.pop_log()["mettagrid/restarts"]) == float(converted.pop_log()["mettagrid/restarts"]) == 9
    assert (cached._sims.game_config.conversions, converted._sims.game_config) == (1, None)
    cached.close()
    converted.close()


def test_host_env_worker_steps_the_same_simulations() -> None:
    """`perf.host_env_worker` (equivalence): 5 simulations split 2 here and 3 in a worker process step the same
    episodes bit for bit as one set of 5, through restarts (each new episode seeded by its place in the run's
    order, map seeds included) and a reset of every simulation mid-run; the worker's simulations are the ones that
    get rewarded too."""
    spec = learnable_spec(max_steps=12)
    split, whole = (MettaGridVecEnv(spec, 5, seed=5, worker=w) for w in (True, False))
    assert split._sims.local_simulations == 2 and split._sims.worker.alive
    assert torch.equal(split.reset()["policy"], whole.reset()["policy"])
    gen = torch.Generator().manual_seed(2)
    rewarded = torch.zeros(20)
    for t in range(40):
        if t == 30:
            assert torch.equal(split.reset()["policy"], whole.reset()["policy"])
        a = torch.randint(0, split.action_spec.size, (20,), generator=gen)
        x, y = split.step(a), whole.step(a)
        assert_same_step(x, y)
        rewarded += y.reward
    assert float(split.pop_log()["mettagrid/restarts"]) == float(whole.pop_log()["mettagrid/restarts"]) == 10
    assert split._sims.started == whole._sims.started == 5 + 10 + 5  # the reset restarts all 5
    assert float(rewarded[8:].sum()) > 0  # the worker's rows
    process = split._sims.worker.process
    split.close()
    whole.close()
    assert process.returncode == 0


def test_host_env_worker_names_a_dead_worker_and_refuses_one_simulation() -> None:
    env = MettaGridVecEnv(learnable_spec(), 2, seed=0, worker=True)
    env.reset()
    env._sims.worker.process.kill()
    env._sims.worker.process.wait()
    with pytest.raises(UserError, match=r"MettaGrid simulations 1-1: its worker process exited \(code -9\)"):
        env.step(torch.zeros(env.num_envs, dtype=torch.int64))
    with pytest.raises(UserError, match="splitting needs at least 2 simulations"):
        MettaGridVecEnv(learnable_spec(), 1, worker=True)


def test_actions_land_in_their_simulations_slice() -> None:
    env = MettaGridVecEnv(room(agents=3, size=12), num_simulations=2, seed=3)
    env.reset()
    start = [positions(sim) for sim in env.simulations]
    actions = torch.tensor([NOOP, NOOP, NOOP, NORTH, SOUTH, EAST])  # simulation 0 waits, simulation 1 moves
    env.step(actions)
    after = [positions(sim) for sim in env.simulations]
    assert after[0] == start[0]
    success = env.simulations[1].action_success
    moved = 0
    for agent, action in enumerate(actions[3:].tolist()):
        dr, dc = MOVES[action] if success[agent] else (0, 0)
        r, c = start[1][agent]
        assert after[1][agent] == (r + dr, c + dc)
        moved += success[agent]
    assert moved >= 2  # in a 12 x 12 room with 3 agents, at most one move can be blocked
    env.close()


def test_same_seed_same_maps_and_simulations_differ() -> None:
    spec = MettaGridSpec("arena", agents_per_env=3, width=8, height=8)
    a, b = (MettaGridVecEnv(spec, num_simulations=2, seed=7).reset()["policy"] for _ in range(2))
    assert torch.equal(a, b) and not torch.equal(a[:3], a[3:])


def test_reset_restarts_every_simulation_after_steps() -> None:
    env = MettaGridVecEnv(room(agents=2), num_simulations=2, seed=0)
    first = list(env.simulations)
    env.reset()
    assert env.simulations == first  # nothing stepped yet: reset keeps the fresh simulations
    env.step(torch.ones(4, dtype=torch.int64))
    env.reset()
    assert all(s is not f and s.current_step == 0 for s, f in zip(env.simulations, first, strict=True))
    assert env.episode_length.eq(0).all()
    env.close()


def test_pushing_into_a_mine_pays_one_heart_per_step_and_other_agents_nothing() -> None:
    env = MettaGridVecEnv(learnable_spec(), num_simulations=1, seed=0)
    env.reset()
    sim = env.simulations[0]
    mines = {(o["r"], o["c"]) for o in sim.grid_objects(ignore_types=["wall"]).values() if o["type_name"] == "mine"}
    actions = torch.zeros(4, dtype=torch.int64)
    for agent, (r, c) in positions(sim).items():
        actions[agent] = next((a for a, (dr, dc) in MOVES.items() if (r + dr, c + dc) in mines), NOOP)
    pushing = actions != NOOP
    assert pushing.any() and not pushing.all()  # seed 0 puts two of the four agents next to a mine
    for _ in range(3):
        step = env.step(actions)
        assert torch.equal(step.reward, pushing.float())
    hearts = {o["agent_id"]: o["inventory"].get(0, 0) for o in sim.grid_objects(ignore_types=["wall"]).values()
              if "agent_id" in o}
    assert [hearts[a] for a in range(4)] == (3 * pushing.long()).tolist()
    env.close()


def test_a_random_policy_earns_a_little_on_mines_and_nothing_elsewhere() -> None:
    mines = random_policy_reward(learnable_spec(), num_simulations=2, steps=100)
    assert 0.01 < mines < 0.2
    assert random_policy_reward(room(), num_simulations=1, steps=20) == 0.0
    with pytest.raises(UserError, match="mines"):
        MettaGridSpec("mines", agents_per_env=4, width=3, height=3, mines=6).to_config()


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"map": "maze"}, "map"),
    ({"agents_per_env": 0}, "agents_per_env"),
    ({"agents_per_env": 2.5}, "agents_per_env"),
    ({"width": 0}, "width"),
    ({"max_steps": 0}, "max_steps"),
    ({"map": "mines", "mines": 0}, "mines"),
    ({"map": "empty-room", "agents_per_env": 10, "width": 3, "height": 3}, "width x height"),
    ({"map": "arena", "agents_per_env": 24, "width": 5, "height": 6}, "width x height"),
])
def test_bad_specs_give_one_line_user_errors(kwargs: dict, field: str) -> None:
    with pytest.raises(UserError) as e:
        MettaGridVecEnv(MettaGridSpec(**kwargs), num_simulations=1)
    assert "\n" not in str(e.value) and field in str(e.value)


def test_bad_arguments_and_mettagrid_validation_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in (0, -1, "2"):
        with pytest.raises(UserError, match="num_simulations"):
            MettaGridVecEnv(room(), num_simulations=bad)
    with pytest.raises(UserError, match="MettaGridSpec"):
        MettaGridVecEnv({"map": "arena"}, num_simulations=1)

    def rejects(**kwargs: object) -> MettaGridConfig:
        return MettaGridConfig.model_validate({"game": {"num_agents": -kwargs["num_agents"]}})

    monkeypatch.setattr(adapter.MettaGridConfig, "EmptyRoom", rejects)
    with pytest.raises(UserError) as e:
        room().to_config()
    assert "\n" not in str(e.value) and "agents_per_env" in str(e.value) and "num_agents" in str(e.value)
    assert isinstance(e.value.__context__, pydantic.ValidationError)


def test_throughput_of_the_adapter_and_of_mettagrid_alone() -> None:
    spec = room(agents=4, max_steps=8)  # restarts happen during the measurement
    env = MettaGridVecEnv(spec, num_simulations=2)
    assert env_only_throughput(env, steps=20, warmup=2) > 0
    assert mettagrid_raw_throughput(spec, num_simulations=2, steps=20, warmup=2) > 0
    env.close()
