"""MettaGrid simulations stepping into slices of host arrays: the part of the MettaGrid adapter that runs in the
trainer's process and, split (`perf.host_env_worker`), in a worker process. It imports no torch, so a worker
starts with numpy and MettaGrid only."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from syncfree.envs.adapters.host_worker import SharedArrays

_root = logging.getLogger()
_root_state = (_root.level, list(_root.handlers))
try:
    import mettagrid.config.mettagrid_c_config as mettagrid_c_config
    from mettagrid import MettaGridConfig, Simulator
    from mettagrid.mettagrid_c import (
        dtype_actions,
        dtype_masks,
        dtype_observations,
        dtype_rewards,
        dtype_terminals,
        dtype_truncations,
    )
    from mettagrid.simulator.simulator import Buffers, Simulation
except ImportError as e:  # pragma: no cover - exercised only without mettagrid
    raise ImportError("the MettaGrid adapter needs mettagrid: pip install 'mettagrid==0.26.22'") from e
finally:  # importing mettagrid sets the root logger to INFO and gives it a handler: undo that
    _root.setLevel(_root_state[0])
    _root.handlers[:] = _root_state[1]


class ConvertedOnce:
    """MettaGrid's conversion of a game config to its C++ form (`convert_to_cpp_game_config`, which
    `Simulation.__init__` calls on every construction), done once per config object and handed back after
    (`perf.cache_game_config`). `conversions` counts the real ones."""

    def __init__(self) -> None:
        self._game: object = None
        self._converted: Any = None
        self.conversions = 0

    @contextlib.contextmanager
    def around_construction(self) -> Iterator[None]:
        """While a simulation is built: MettaGrid's module-level converter answers from this cache (MettaGrid looks
        it up on the module at each call)."""
        convert = mettagrid_c_config.convert_to_cpp_game_config

        def converted_once(mettagrid_config: Any) -> Any:  # MettaGrid's name for the argument
            if mettagrid_config is not self._game:
                self._game, self._converted = mettagrid_config, convert(mettagrid_config)
                self.conversions += 1
            return self._converted

        mettagrid_c_config.convert_to_cpp_game_config = converted_once
        try:
            yield
        finally:
            mettagrid_c_config.convert_to_cpp_game_config = convert


Alloc = Callable[[str, tuple[int, ...], np.dtype], np.ndarray]
"""Where a simulation set's host arrays come from: (name, shape, dtype) -> array."""


def array_layout(config: MettaGridConfig, num_simulations: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The host arrays `num_simulations` simulations of `config` step into, by name."""
    n = num_simulations * config.game.num_agents
    tokens = (config.game.obs.num_tokens, config.game.obs.token_dim)
    return {"obs": ((n, *tokens), np.dtype(dtype_observations)), "rewards": ((n,), np.dtype(dtype_rewards)),
            "terminals": ((n,), np.dtype(dtype_terminals)), "truncations": ((n,), np.dtype(dtype_truncations)),
            "masks": ((n,), np.dtype(dtype_masks)), "actions": ((n,), np.dtype(dtype_actions)),
            "teacher_actions": ((n,), np.dtype(dtype_actions)), "vibe_actions": ((n,), np.dtype(dtype_actions))}


def finished(terminals_2d: np.ndarray, truncations_2d: np.ndarray) -> np.ndarray:
    """[simulations] bool: the simulations whose episode ended (MettaGrid's `Simulation.is_done`)."""
    # numpy's stubs allow a scalar for `all(axis=1)` (a 1-D array's); these arrays are 2-D
    return cast(np.ndarray, terminals_2d.all(axis=1) | truncations_2d.all(axis=1))


class Simulations:
    """`num_simulations` MettaGrid simulations stepping into slices of shared host arrays; `cache_game_config`:
    the game config converted to MettaGrid's C++ form once (`ConvertedOnce`), not at every simulation's start.
    `first`: the index of the first of them among all the run's simulations (a split's second part), which seeds
    the first episodes as one set of all of them would (simulation i: `seed + i`)."""

    def __init__(self, config: MettaGridConfig, num_simulations: int, seed: int, alloc: Alloc,
                 obs: np.ndarray | None = None, cache_game_config: bool = False, first: int = 0) -> None:
        self.config, self.seed = config, seed
        self.game_config = ConvertedOnce() if cache_game_config else None
        self.num_simulations = e = num_simulations
        self.agents = a = config.game.num_agents
        layout = array_layout(config, e)
        shape = layout["obs"][0]
        self.obs = alloc("obs", *layout["obs"]) if obs is None else obs
        if self.obs.shape != shape or self.obs.dtype != dtype_observations:
            raise ValueError(f"observation array of shape {self.obs.shape} and {self.obs.dtype}: needs {shape}, "
                             f"{np.dtype(dtype_observations)}")
        self.rewards, self.terminals, self.truncations, self.masks, self.actions, self.teacher_actions = (
            alloc(name, *layout[name]) for name in ("rewards", "terminals", "truncations", "masks", "actions",
                                                    "teacher_actions"))
        self.masks.fill(True)
        self.vibe_actions = alloc("vibe_actions", *layout["vibe_actions"])  # stays 0: no vibe change
        self.terminals_2d = self.terminals.reshape(e, a)
        self.truncations_2d = self.truncations.reshape(e, a)
        self.buffers = [Buffers(observations=self.obs[s], terminals=self.terminals[s], truncations=self.truncations[s],
                                rewards=self.rewards[s], masks=self.masks[s], actions=self.actions[s],
                                teacher_actions=self.teacher_actions[s], vibe_actions=self.vibe_actions[s])
                        for s in (slice(i * a, (i + 1) * a) for i in range(e))]
        self.simulator = Simulator()
        self.steps = 0
        """Steps taken (each steps every simulation here)."""
        self.started = first
        """The run order (seed offset) of the next simulation started without an explicit order."""
        self.sims: list[Simulation] = []
        self.steppers: list[Callable[[], None]] = []
        for buffers in self.buffers:
            sim = self._new(buffers)
            self.sims.append(sim)
            self.steppers.append(sim.step)
        self.action_names = self.sims[0].action_names

    def _new(self, buffers: Buffers, order: int | None = None) -> Simulation:
        """The `order`-th simulation of the run (default: the next one here), seeded as one `Simulator` starting
        every simulation of the run in order would seed it: simulation seed `seed + order`, and map seed from
        MettaGrid's own count of simulations started (`Simulator._map_seed_offset`, which a part of a split run
        would otherwise count from 0)."""
        if order is None:
            order = self.started
            self.started += 1
        self.simulator._map_seed_offset = order
        if self.game_config is None:
            return self.simulator.new_simulation(self.config, self.seed + order, buffers=buffers)
        with self.game_config.around_construction():
            return self.simulator.new_simulation(self.config, self.seed + order, buffers=buffers)

    def step(self) -> None:
        self.steps += 1
        for step in self.steppers:
            step()

    def finished(self) -> np.ndarray:
        """[num_simulations] bool: the simulations whose episode ended (MettaGrid's `Simulation.is_done`)."""
        return finished(self.terminals_2d, self.truncations_2d)

    def restart(self, indices: np.ndarray | Sequence[int], orders: Sequence[int] | None = None) -> None:
        """New episodes on the given simulations' slices (rewards, terminals and truncations there are reset),
        started as the run's `orders`-th simulations (default: the next ones here)."""
        for k, i in enumerate(indices):
            self.sims[i].close()
            sim = self.sims[i] = self._new(self.buffers[i], None if orders is None else orders[k])
            self.steppers[i] = sim.step

    def close(self) -> None:
        for sim in self.sims:
            sim.close()
        self.sims, self.steppers = [], []


def rows_of(arrays: SharedArrays, first: int, count: int) -> Alloc:
    """An `Alloc` handing out rows `first` to `first + count - 1` of the shared arrays."""
    def alloc(name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        rows = arrays[name][first:first + count]
        assert rows.shape == shape and rows.dtype == dtype, (name, rows.shape, shape)
        return rows
    return alloc


class SimulationRows(Simulations):
    """The worker process's part of a split set (`mettagrid._SplitSimulations`): simulations `first` onwards, on
    their rows of the shared arrays (`config` arrives pickled)."""

    def __init__(self, arrays: SharedArrays, config: MettaGridConfig, seed: int, first: int, count: int,
                 cache_game_config: bool) -> None:
        a = config.game.num_agents
        super().__init__(config, count, seed, rows_of(arrays, first * a, count * a), cache_game_config=cache_game_config,
                         first=first)
