"""MettaGrid -> syncfree `VecEnv`: many MettaGrid simulations in one process, each agent one row of the batch.

`num_simulations` simulations of `agents_per_env` agents each are flattened into one batch of
`num_envs = num_simulations * agents_per_env` rows (the trainer's "envs"). All simulations write into one set of
host arrays (token observations `[num_envs, tokens, 3]` uint8, rewards, terminals, truncations, actions): each
simulation is given a contiguous slice of them as its MettaGrid `Buffers`, so stepping copies nothing. The torch
tensors are views of these arrays, made once. The observations share one host buffer (`HostPack`) with the step's
rewards and episode ends, so on CUDA (pinned) a step's results reach the device in one non-blocking copy and the
actions reach the host in one.

A simulation whose episode ended (all its agents terminal or truncated) is closed and a new one is started on the
same slice, with seed `seed + k` (k counts the simulations started), in the same `step()`: the returned
observation is then the new episode's first one. Only the finished simulations cost Python work.

Observations are MettaGrid's tokens, `(packed coordinate, feature id, value)` per token, `0xFF` marking an empty
token: `obs = {"policy": x, "critic": x}` (the same uint8 tensor), for a token policy. MettaGrid episodes cannot be
saved (`saveable = False`): a resumed run restores the trainer state exactly and starts new episodes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import Tensor

from syncfree.envs.adapters.host_worker import HostWorker, SharedArrays
from syncfree.envs.adapters.mettagrid_map import ARENA_BORDER, ARENA_WALLS, MAPS, MettaGridMap
from syncfree.envs.adapters.mettagrid_sims import (
    SimulationRows,
    Simulations,
    array_layout,
    dtype_actions,
    dtype_observations,
    dtype_rewards,
    dtype_terminals,
    dtype_truncations,
    finished,
    rows_of,
)
from syncfree.envs.adapters.staging import ActionStaging, HostPack, HostProfile, HostStaging
from syncfree.envs.api import ActionSpec, StepResult, VecEnv
from syncfree.errors import UserError

_root = logging.getLogger()
_root_state = (_root.level, list(_root.handlers))
try:
    import pydantic
    from mettagrid import MettaGridConfig
    from mettagrid.builder.envs import make_arena
    from mettagrid.config.game_value import InventoryValue
    from mettagrid.config.handler_config import Handler
    from mettagrid.config.mettagrid_config import ChangeVibeActionConfig, GridObjectConfig
    from mettagrid.config.mutation import updateActor
    from mettagrid.config.reward_config import reward
    from mettagrid.map_builder.random_map import RandomMapBuilderConfig
    from mettagrid.mapgen.mapgen import MapGenConfig
    from mettagrid.mapgen.scenes.random import RandomConfig
    from mettagrid.simulator.simulator import Simulation
except ImportError as e:  # pragma: no cover - exercised only without mettagrid
    raise ImportError("the MettaGrid adapter needs mettagrid: pip install 'mettagrid==0.26.22'") from e
finally:  # importing mettagrid sets the root logger to INFO and gives it a handler: undo that
    _root.setLevel(_root_state[0])
    _root.handlers[:] = _root_state[1]

@dataclass
class MettaGridSpec(MettaGridMap):
    """One MettaGrid simulation (`MettaGridMap`'s settings), built with MettaGrid's own config builders
    (`to_config`).

    `map`: `"arena"` (`mettagrid.builder.envs.make_arena` on a `width` x `height` area with 10 random walls, inside
    a 6-cell wall border), `"empty-room"` (`MettaGridConfig.EmptyRoom`, inside a 1-cell wall border) or `"mines"`
    (the empty room with `mines` mines placed at random). `width` and `height` give the playable area, without the
    border. Episodes end by time-out after `max_steps` steps, reported as truncation. Vibe changes are disabled, so
    the actions are noop and the four moves on every map.

    Only `"mines"` pays reward: an agent that moves into a mine (mines block movement, like walls) gains one heart,
    and each heart gained is a reward of 1, so a policy that walks to a mine and keeps pushing into it earns 1 per
    step. Measured with mettagrid 0.26.22 (`random_policy_reward`, uniformly random actions, 2000 steps of 8
    simulations, seeds 0 and 1): `map="mines"` with 24 agents, 25 x 25 cells and 10 mines pays 0.012 per agent per
    step; the defaults (4 agents, 8 x 8, 6 mines, 64-step episodes) pay 0.064 (0.063 and 0.065). The arena rewards
    hearts but nothing on it makes them (and its attack, triggered by moving onto an agent with a matching vibe,
    never fires without vibes); the empty room pays nothing: both measure stepping throughput and exercise the
    token pipeline, not learning.
    """

    @classmethod
    def of(cls, grid: MettaGridMap) -> MettaGridSpec:
        """The spec of a map's settings (e.g. the grid-arena task's `env` section)."""
        return cls(**{f.name: getattr(grid, f.name) for f in dataclasses.fields(MettaGridMap)})

    def to_config(self, seed: int = 0) -> MettaGridConfig:
        """The MettaGrid config of one simulation. Maps are drawn from `seed`: a `Simulator` gives the k-th
        simulation it starts the map seed `seed + k`."""
        self.validate()
        a = self.agents_per_env
        try:
            if self.map in ("empty-room", "mines"):
                cfg = MettaGridConfig.EmptyRoom(num_agents=a, width=self.width + 2, height=self.height + 2,
                                                border_width=1)
                cfg.game.actions.change_vibe = ChangeVibeActionConfig(enabled=False)
                if self.map == "mines":
                    _add_mines(cfg, self.mines)
            else:
                builder = MapGenConfig(num_agents=a, width=self.width, height=self.height,
                                       border_width=ARENA_BORDER, instance_border_width=0,
                                       instance=RandomConfig(agents=a, objects={"wall": ARENA_WALLS}))
                cfg = make_arena(a, map_builder=builder)
        except pydantic.ValidationError as e:
            raise UserError(_validation_message(e)) from None
        cfg.game.max_steps = self.max_steps
        cfg.game.episode_truncates = True  # a time-out is a truncation: the trainer bootstraps from the value
        cast("MapGenConfig | RandomMapBuilderConfig", cfg.game.map_builder).seed = seed  # the builders used above
        return cfg


def learnable_spec(max_steps: int = 64) -> MettaGridSpec:
    """The default `"mines"` map a recurrent policy learns quickly: 4 agents and 6 mines on 8 x 8 cells. A random
    policy earns 0.064 per agent per step there (see `MettaGridSpec`); `benchmarks/grid_learning.py` passes
    3x that after about 5k agent steps (4 simulations)."""
    return MettaGridSpec(max_steps=max_steps)


def _add_mines(cfg: MettaGridConfig, mines: int) -> None:
    """Place `mines` mines on the map; moving into one gives the agent a heart, and each heart is a reward of 1."""
    cfg.game.resource_names = ["heart"]
    cfg.game.objects["mine"] = GridObjectConfig(name="mine",
                                                on_use_handler=Handler(mutations=[updateActor({"heart": 1})]))
    cfg.game.agent.rewards = {"heart": reward(InventoryValue(item="heart"))}
    cast(RandomMapBuilderConfig, cfg.game.map_builder).objects = {"mine": mines}  # `EmptyRoom`'s builder


_SPEC_FIELDS = {"num_agents": "agents_per_env", "agents": "agents_per_env", "width": "width", "height": "height",
                "max_steps": "max_steps"}


def _validation_message(e: pydantic.ValidationError) -> str:
    err = e.errors()[0]
    loc = [str(part) for part in err.get("loc", ())]
    field = next((_SPEC_FIELDS[p] for p in reversed(loc) if p in _SPEC_FIELDS), "map")
    where = ".".join(loc) or e.title
    return f"MettaGrid spec: {field}: MettaGrid rejects {where}: {' '.join(str(err.get('msg', e)).split())}"


class _SplitSimulations:
    """`num_simulations` simulations in two processes (`perf.host_env_worker`): the first half here, the second
    half in a worker process (`HostWorker`), all stepping into one set of shared arrays at the same time. The
    same interface as `Simulations` for the adapter, and the same episodes bit for bit: every new episode is seeded
    by its place in the order one set of all the simulations would start them (`restart` numbers them here and
    hands the worker its numbers). Observations are copied into `obs` (the adapter's buffer) after every step and
    restart."""

    def __init__(self, spec: MettaGridSpec, config: MettaGridConfig, num_simulations: int, seed: int,
                 obs: np.ndarray, cache_game_config: bool) -> None:
        self.config, self.seed, self.num_simulations = config, seed, num_simulations
        self.agents = a = config.game.num_agents
        self.arrays = SharedArrays({name: (shape, dtype.str)
                                    for name, (shape, dtype) in array_layout(config, num_simulations).items()})
        self.local_simulations = h = num_simulations // 2
        self.local = Simulations(config, h, seed, rows_of(self.arrays, 0, h * a), cache_game_config=cache_game_config)
        try:
            self.worker = HostWorker(f"MettaGrid simulations {h}-{num_simulations - 1}", self.arrays,
                                     SimulationRows, config, seed, h, num_simulations - h, cache_game_config)
        except BaseException:
            self.local.close()
            self.arrays.close()
            raise
        self.out_obs = obs
        self.obs = self.arrays["obs"]
        self.rewards, self.terminals, self.truncations, self.masks, self.actions = (
            self.arrays[name] for name in ("rewards", "terminals", "truncations", "masks", "actions"))
        self.terminals_2d = self.terminals.reshape(num_simulations, a)
        self.truncations_2d = self.truncations.reshape(num_simulations, a)
        self.started = num_simulations
        self.action_names = self.local.action_names
        np.copyto(self.out_obs, self.obs)

    @property
    def sims(self) -> list[Simulation]:
        """The simulations of this process (the first half)."""
        return self.local.sims

    def step(self) -> None:
        self.worker.call("step")
        self.local.step()
        self.worker.wait()
        np.copyto(self.out_obs, self.obs)

    def finished(self) -> np.ndarray:
        return finished(self.terminals_2d, self.truncations_2d)

    def restart(self, indices: np.ndarray | Sequence[int]) -> None:
        indices = list(indices)
        orders = range(self.started, self.started + len(indices))  # as one set restarts them, in index order
        self.started += len(indices)
        h = self.local_simulations
        theirs = [(i - h, k) for i, k in zip(indices, orders, strict=True) if i >= h]
        if theirs:
            self.worker.call("restart", [i for i, _ in theirs], [k for _, k in theirs])
        mine = [(i, k) for i, k in zip(indices, orders, strict=True) if i < h]
        if mine:
            self.local.restart([i for i, _ in mine], [k for _, k in mine])
        if theirs:
            self.worker.wait()
        np.copyto(self.out_obs, self.obs)

    def close(self) -> None:
        self.worker.close()
        self.local.close()
        self.arrays.close()  # the block is freed now; its mapping here goes with the last view of it


class MettaGridVecEnv(HostStaging, VecEnv):
    """`num_simulations` MettaGrid simulations of `spec`, one row per agent: `num_envs = num_simulations *
    spec.agents_per_env`, agent j of simulation i on row `i * agents_per_env + j`.

    Actions: one discrete choice per agent among `action_names` (int64 from the policy, copied into MettaGrid's
    int32 action array; MettaGrid counts a choice outside the range as a failed action, unchecked here).
    `terminated`/`truncated` are MettaGrid's terminals/truncations on the rows of the simulations that ended in
    this step (with `spec`'s configs, time-outs: truncated); `info["episode_return"]` and `info["episode_length"]`
    hold the finished episode's totals per agent. No `final_obs` is given (the new episode overwrites the slice):
    time-outs bootstrap from the value before the step.

    `teacher_actions` is None: MettaGrid 0.26's simulations never write teacher actions (only its PufferLib env
    does, from a supervisor policy that needs `mettagrid[train]`). `masks` is MettaGrid's mask array: all True,
    as MettaGrid does not write it either.

    `cache_game_config` (`perf.cache_game_config`): each new episode's simulation is built from the game config
    converted once; off, MettaGrid converts it again for every episode.

    `worker` (`perf.host_env_worker`, 2 simulations or more): the second half of the simulations steps in a worker
    process while this process steps the first half (`_SplitSimulations`); the same episodes bit for bit, the
    observations then copied once per step into the adapter's buffer. `simulations` lists this process's only.
    """

    saveable = False
    host_threads = True
    env_switches = frozenset({"cache_game_config", "host_env_worker"})

    def __init__(self, spec: MettaGridSpec, num_simulations: int, device: torch.device | str = "cpu",
                 seed: int = 0, staged: bool | None = None, cache_game_config: bool = True,
                 worker: bool = False) -> None:
        if not isinstance(spec, MettaGridSpec):
            raise UserError(f"MettaGrid adapter: spec is a {type(spec).__name__}, not a MettaGridSpec")
        if not isinstance(num_simulations, int) or isinstance(num_simulations, bool) or num_simulations < 1:
            raise UserError(f"MettaGrid adapter: num_simulations={num_simulations!r} must be an integer >= 1")
        if worker and num_simulations < 2:
            raise UserError(f"MettaGrid adapter: worker=True with num_simulations={num_simulations}; splitting needs "
                            "at least 2 simulations")
        self.spec = spec
        self.config = spec.to_config(seed)
        self.device = torch.device(device)
        cuda = self.device.type == "cuda"
        if cuda and not torch.cuda.is_available():
            raise UserError(f"MettaGrid adapter: device {self.device} requested but CUDA is not available")
        self._event = torch.cuda.Event() if cuda else None
        self.num_simulations, self.agents_per_env = num_simulations, spec.agents_per_env
        self.num_envs = self.num_agents_total = n = num_simulations * spec.agents_per_env
        obs_game = self.config.game.obs
        tokens = (obs_game.num_tokens, obs_game.token_dim)
        self._pack = pack = HostPack({"obs": ((n, *tokens), _torch_dtype(dtype_observations)),
                                      "reward": ((n,), _torch_dtype(dtype_rewards)),
                                      "terminated": ((n,), _torch_dtype(dtype_terminals)),
                                      "truncated": ((n,), _torch_dtype(dtype_truncations))}, self.device, staged)

        def host(name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
            if not cuda:
                return np.zeros(shape, dtype)
            return torch.zeros(shape, dtype=_torch_dtype(dtype), pin_memory=True).numpy()

        sims: Simulations | _SplitSimulations
        if worker:
            sims = _SplitSimulations(spec, self.config, num_simulations, seed, pack.array("obs"), cache_game_config)
        else:
            sims = Simulations(self.config, num_simulations, seed, host, obs=pack.array("obs"),
                                cache_game_config=cache_game_config)
        self._sims = sims
        self.max_episode_length = spec.max_steps
        self.action_names: list[str] = sims.action_names
        self.action_spec = ActionSpec("discrete", len(self.action_names))
        self.obs_shapes = {"policy": tokens, "critic": tokens}

        # The step's outputs, in the pack (copied from MettaGrid's before finished simulations restart).
        self.masks = torch.from_numpy(sims.masks)
        self.teacher_actions: Tensor | None = None
        self._reward_np, self._terminated_np, self._truncated_np = (
            pack.array(name) for name in ("reward", "terminated", "truncated"))
        self._terminated_2d = self._terminated_np.reshape(num_simulations, spec.agents_per_env)
        self._truncated_2d = self._truncated_np.reshape(num_simulations, spec.agents_per_env)
        self._obs, self._reward, self._terminated, self._truncated = (
            pack.dev[name] for name in ("obs", "reward", "terminated", "truncated"))
        host_actions = torch.from_numpy(sims.actions)
        self._act = ActionStaging(tuple(host_actions.shape), host_actions.dtype, self.device, pack.staged,
                                  host=host_actions)
        self._actions = self._act.dev
        self.host_profile = HostProfile(("actions", "simulator", "outputs", "restarts", "device"))
        zeros = lambda dtype: torch.zeros(n, dtype=dtype, device=self.device)  # noqa: E731
        self.episode_return, self.episode_length = zeros(torch.float32), zeros(torch.int64)
        self._final_return, self._final_length = zeros(torch.float32), zeros(torch.int64)
        self._done = zeros(torch.bool)
        self._obs_groups = {"policy": self._obs, "critic": self._obs}
        self._info = {"episode_return": self._final_return, "episode_length": self._final_length}
        self._stepped = False  # whether the simulations moved since they started (reset() restarts them then)
        self._restarts, self._restart_s = 0, 0.0
        pack.upload()

    @property
    def simulations(self) -> list[Simulation]:
        """The running MettaGrid simulations, simulation i on rows `i * agents_per_env` onwards."""
        return self._sims.sims

    def reset(self) -> dict[str, Tensor]:
        self._wait_for_copies()
        if self._stepped:
            self._sims.restart(range(self.num_simulations))
            self._stepped = False
        self._pack.upload()
        self.episode_return.zero_()
        self.episode_length.zero_()
        return self._obs_groups

    def step(self, actions: Tensor) -> StepResult:
        profile = self.host_profile
        profile.start()
        self._actions.copy_(actions.reshape(-1))
        self._act.download()
        self._wait_for_copies()  # the actions are on the host and the previous step's upload is done
        profile.lap("actions")
        sims = self._sims
        sims.step()
        self._stepped = True
        profile.lap("simulator")
        finished = sims.finished()
        np.copyto(self._reward_np, sims.rewards)
        np.logical_and(sims.terminals_2d, finished[:, None], out=self._terminated_2d)
        np.logical_and(sims.truncations_2d, finished[:, None], out=self._truncated_2d)
        np.logical_and(self._truncated_np, ~self._terminated_np, out=self._truncated_np)
        profile.lap("outputs")
        if finished.any():
            start = time.perf_counter()
            ended = np.flatnonzero(finished).tolist()
            sims.restart(ended)
            self._restarts += len(ended)
            self._restart_s += time.perf_counter() - start
        profile.lap("restarts")
        self._pack.upload()
        self.episode_return.add_(self._reward)
        self.episode_length.add_(1)
        done = torch.logical_or(self._terminated, self._truncated, out=self._done)
        self._final_return.copy_(self.episode_return)
        self._final_length.copy_(self.episode_length)
        self.episode_return.masked_fill_(done, 0.0)
        self.episode_length.masked_fill_(done, 0)
        profile.lap("device")
        profile.steps += 1
        return StepResult(self._obs_groups, self._reward, self._terminated, self._truncated, self._info)

    def pop_log(self) -> dict[str, Tensor]:
        """Simulations restarted since the last call, and the seconds spent restarting them (host counters, handed
        over as device tensors like every env's log)."""
        values = torch.tensor([float(self._restarts), self._restart_s], dtype=torch.float64, device=self.device)
        self._restarts, self._restart_s = 0, 0.0
        return {"mettagrid/restarts": values[0], "mettagrid/restart_s": values[1]}

    def close(self) -> None:
        self._wait_for_copies()
        self._sims.close()


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype)).dtype


def random_policy_reward(spec: MettaGridSpec, num_simulations: int, steps: int, seed: int = 0) -> float:
    """Mean reward per agent per step of uniformly random actions on `spec` over `steps` steps: the level a
    learning policy has to beat."""
    if steps < 1:
        raise UserError(f"random_policy_reward: steps={steps} must be >= 1")
    env = MettaGridVecEnv(spec, num_simulations, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    total = torch.zeros((), dtype=torch.float64)
    try:
        env.reset()
        for _ in range(steps):
            total += env.step(torch.randint(0, env.action_spec.size, (env.num_envs,), generator=gen)).reward.sum()
    finally:
        env.close()
    return total.item() / (steps * env.num_envs)


def mettagrid_raw_throughput(spec: MettaGridSpec, num_simulations: int, steps: int = 200, warmup: int = 10,
                             seed: int = 0) -> float:
    """Agent-steps per second of MettaGrid alone at the adapter's settings, without the adapter: the same
    simulations on shared numpy arrays, random actions (drawn beforehand) copied into the action array, a plain
    `sim.step()` loop, finished simulations restarted. The gap to `syncfree.envs.throughput.env_only_throughput` is the adapter's cost."""
    if steps < 1:
        raise UserError(f"mettagrid_raw_throughput: steps={steps} must be >= 1")
    sims = Simulations(spec.to_config(seed), num_simulations, seed, lambda name, shape, dtype: np.zeros(shape, dtype))
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, len(sims.action_names), (min(steps, 16), sims.actions.size)).astype(dtype_actions)
    try:
        for t in range(warmup + steps):
            if t == warmup:
                start = time.perf_counter()
            np.copyto(sims.actions, actions[t % len(actions)])
            for sim in sims.sims:
                sim.step()
            finished = sims.finished()
            if finished.any():
                sims.restart(np.flatnonzero(finished).tolist())
        elapsed = time.perf_counter() - start
    finally:
        sims.close()
    return steps * sims.actions.size / elapsed


__all__ = ["MAPS", "MettaGridSpec", "MettaGridVecEnv", "learnable_spec", "mettagrid_raw_throughput",
           "random_policy_reward"]
