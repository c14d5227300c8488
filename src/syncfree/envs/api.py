"""Batched, device-resident environment protocol.

`step(actions)` returns device tensors only and resets finished environments itself, without a host
branch. Observation tensors are owned by the environment and stay valid until the next `step()` or
`reset()`: copy them if you need them longer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import torch
from torch import Tensor

from syncfree.core.compile import GraphBreak, graph_break
from syncfree.envs.contract import check_device, check_observations, check_vector, is_obs_shapes, mistake
from syncfree.errors import UserError

if TYPE_CHECKING:
    from syncfree.envs.mirror import Mirror


@dataclass(frozen=True)
class ActionSpec:
    """What the env takes as actions."""

    kind: Literal["continuous", "discrete"]
    """`continuous` (a float vector per env) or `discrete` (one int64 choice per env)."""
    size: int
    """Action dimension (continuous, values in [-1, 1]) or number of choices (discrete)."""


class StepResult(NamedTuple):
    """What `VecEnv.step` returns: device tensors, one row per env."""

    obs: dict[str, Tensor]
    """Observation groups, name -> [num_envs, dim]; at least `policy` and `critic`."""
    reward: Tensor
    """[num_envs] float32."""
    terminated: Tensor
    """[num_envs] bool: the episode ended in a terminal state (no bootstrapping)."""
    truncated: Tensor
    """[num_envs] bool: the episode hit its time limit (bootstrap from the value)."""
    info: dict[str, Any]
    """`episode_return` and `episode_length` hold the finished episode's totals where an episode ended. Envs that
    reset to a new observation in the same step may add `final_obs` (`{"critic": [num_envs, dim]}`, the last
    observation of the finished episodes): the trainer then bootstraps time-outs from its value instead of the
    pre-step value."""


class VecEnv(ABC):
    """A batch of `num_envs` environments on `device` that the trainer steps all at once (`syncfree.check_env`
    checks one against what it declares). Subclass it, set the attributes below and write `reset` and `step`."""

    num_envs: int
    device: torch.device
    obs_shapes: dict[str, tuple[int, ...]]
    action_spec: ActionSpec
    max_episode_length: int
    saveable: bool = True
    """Whether `state_dict()` captures everything needed to continue exactly."""
    host_threads: bool = False
    """The env steps a simulator on host threads of its own (C MuJoCo, MettaGrid, Gymnasium): torch's intra-op
    threads would compete with it for the cores."""
    env_switches: frozenset[str] = frozenset()
    """The perf switches (`syncfree.core.switches.PerfConfig`) this env reads itself, beyond the manager-based env
    layer's; the others are inert for it."""
    action_bounds: tuple[Tensor, Tensor] | None = None
    """Continuous actions: the lowest and highest action each dimension can use (`[size]` each, on `device`), where
    the env declares them, e.g. a joint-position task's joint limits as actions (g1-track). Learners whose actions
    are bounded (SAC, TD3: a tanh in [-1, 1]) map their range onto these; PPO's Gaussian actions are not bounded.
    None: [-1, 1]."""

    @abstractmethod
    def reset(self) -> dict[str, Tensor]:
        """New episodes everywhere -> the observation groups (`obs_shapes`' names, `[num_envs, *shape]`)."""

    @abstractmethod
    def step(self, actions: Tensor) -> StepResult:
        """Act (`[num_envs, size]` float or `[num_envs]` int64, per `action_spec`) -> the step's result; finished
        envs reset inside, without a host branch."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    def check_state_dict(self, state: Any) -> None:  # noqa: B027
        """Raise `UserError` (one line) where a saved state cannot be this env's for a reason worth naming (e.g.
        another clip set), before anything is restored; the checkpoint's schema checks the rest."""

    def end_iteration(self, reduce: Callable[[Tensor], Tensor] | None = None) -> None:  # noqa: B027
        """Called by the trainer once per iteration, after the rollout (e.g. to refresh sampling weights).

        `reduce` is given when training on several processes (each with its own envs): `reduce(t)` sums `t` over
        all ranks in place and returns it (one collective; every rank must call it equally often). An env whose
        statistics span envs (the adaptive sampler's visit and failure counts) stacks them into one tensor and
        reduces it, so that every rank acts on the statistics of all envs. Overrides may leave the argument out:
        the trainer then calls `end_iteration()` and the statistics stay per rank."""

    def pop_log(self) -> dict[str, Tensor]:
        """Task-specific statistics gathered since the last call, as 0-dim device tensors (called once per
        iteration; the trainer moves them to the host with everything else it logs, in one transfer). A statistic
        with no sample since the last call is NaN and is left out of the log."""
        return {}

    def compile_step(self, wrap: Callable[..., Callable]) -> None:  # noqa: B027
        """Called by the trainer with `perf.compile` on: an env whose step (or part of it) is a pure tensor
        function may replace it by `wrap(fn, *tensors)`, a whole compiled graph of it; `tensors`: those it updates in
        place, which keep their addresses (a graph replayed as a CUDA graph updates them where they are). Envs that
        cannot leave it."""

    def step_graph_break(self) -> GraphBreak | None:
        """Where the function `compile_step` would compile leaves one whole graph (a host read, a branch on a
        tensor's value), found by tracing it without running it (`syncfree.core.compile.graph_break`); None: it
        is one graph, or the env compiles nothing. Asked before `compile_step`, so that such a step runs eagerly
        instead of failing its compile."""
        return None

    def start_at_random_steps(self) -> None:
        """Move each env's running episode to a random step of its time limit, after `reset` (the trainer calls it
        with `env.random_start`, as rsl_rl's `init_at_random_ep_len` moves Isaac Lab's counters), so that the
        envs' episodes do not all end in the same step. An env without step counters refuses."""
        raise UserError(f"env.random_start: {type(self).__name__} keeps no episode step counts to start at random")

    def mirror(self) -> Mirror | None:
        """The env's mirror symmetry (`syncfree.envs.mirror`: how observations and actions reflect), which
        `symmetry` settings train with; None: the env has none (a run can name one, `symmetry.mirror`)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the env holds outside Python's reach (simulators, threads, renderers); the env is not
        stepped again. Envs holding nothing of the kind leave it."""


_BASE_STATE = frozenset({"num_envs", "device", "max_episode_length", "generator", "episode_return",
                         "episode_length", "_final_return", "_final_length", "_checked"})
"""What `TorchVecEnv.__init__` sets: one of them missing means a subclass never called it."""


class TorchVecEnv(VecEnv):
    """Base of the torch-native tasks: episode bookkeeping and branchless auto-reset.

    Subclasses keep their physical state in tensors named in `state_names`, updated in place, and
    implement `_advance`, `_initial_state` and `_observe`. What they return is checked once, on its metadata, before
    anything reads it (at the first reset and step: `_checked`); a mistake is one line naming the env and the output.
    """

    state_names: tuple[str, ...] = ()
    default_max_episode_length: int = 1000

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
                 max_episode_length: int = 0) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_episode_length = max_episode_length or self.default_max_episode_length
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        zeros = lambda dtype: torch.zeros(num_envs, dtype=dtype, device=self.device)  # noqa: E731
        self.episode_return = zeros(torch.float32)
        self.episode_length = zeros(torch.int64)
        self._final_return = zeros(torch.float32)
        self._final_length = zeros(torch.int64)
        self._checked = False
        """Whether the first step has checked what the subclass returns; after it, steps check nothing."""

    if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise take any name as an env attribute
        def __getattr__(self, name: str) -> Any:
            """Only reached for a name the env lacks: the base's state lacking means `__init__` never ran."""
            if name in _BASE_STATE:
                raise UserError(f"env {type(self).__name__}: no {name}: its __init__ must call "
                                "super().__init__(num_envs, device, seed) before the env is used (TorchVecEnv keeps "
                                "its state there)")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @abstractmethod
    def _advance(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Integrate one control step in place; return (reward, terminated)."""

    @abstractmethod
    def _initial_state(self) -> dict[str, Tensor]:
        """Fresh initial states for all envs (drawn for all N so that every path consumes the same numbers)."""

    @abstractmethod
    def _observe(self) -> dict[str, Tensor]: ...

    def _uniform(self, low: Tensor | float, high: Tensor | float, *shape: int) -> Tensor:
        u = torch.rand(self.num_envs, *shape, generator=self.generator, device=self.device)
        return low + (high - low) * u

    def reset(self) -> dict[str, Tensor]:
        fresh = self._initial_state()
        if not self._checked:
            self._check_initial_state(fresh)
        for name, value in fresh.items():
            getattr(self, name).copy_(value)
        self.episode_return.zero_()
        self.episode_length.zero_()
        obs = self._observe()
        if not self._checked:
            self._check_observed(obs)
        return obs

    def step(self, actions: Tensor) -> StepResult:
        if not self._checked:
            return self._first_step(actions)
        return self._transition(actions, self._initial_state())

    def start_at_random_steps(self) -> None:
        draw_episode_steps(self.episode_length, self.max_episode_length, self.generator)

    def _transition(self, actions: Tensor, fresh: dict[str, Tensor]) -> StepResult:
        """`step` without its random draws (`fresh`: the states finished envs restart from): a pure function of
        tensors, which `compile_step` may compile."""
        reward, terminated = self._advance(actions)
        return self._finish(reward, terminated, fresh)

    def _first_step(self, actions: Tensor) -> StepResult:
        """`step`, eager, with what the subclass returns checked before anything reads it; later steps skip this."""
        fresh = self._initial_state()
        self._check_initial_state(fresh)
        advanced = self._advance(actions)
        name, device = type(self).__name__, self.device
        if not isinstance(advanced, (tuple, list)) or len(advanced) != 2:
            raise mistake(name, "_advance()", "a (reward, terminated) pair of tensors",
                          f"{len(advanced)} values" if isinstance(advanced, (tuple, list)) else type(advanced).__name__)
        reward, terminated = advanced
        check_vector(name, "_advance() reward", reward, self.num_envs, device, floating=True)
        check_vector(name, "_advance() terminated", terminated, self.num_envs, device, floating=False)
        result = self._finish(reward, terminated, fresh)
        self._check_observed(result.obs)
        self._checked = True
        return result

    def _finish(self, reward: Tensor, terminated: Tensor, fresh: dict[str, Tensor]) -> StepResult:
        """The step after `_advance`: episode bookkeeping, auto-reset of the finished envs, the observations."""
        self.episode_return.add_(reward)
        self.episode_length.add_(1)
        truncated = (self.episode_length >= self.max_episode_length) & ~terminated
        done = terminated | truncated
        self._final_return.copy_(self.episode_return)
        self._final_length.copy_(self.episode_length)
        self._reset_where(done, fresh)
        info = {"episode_return": self._final_return, "episode_length": self._final_length}
        return StepResult(self._observe(), reward, terminated, truncated, info)

    def step_graph_break(self) -> GraphBreak | None:
        """`_transition` traced on zero actions and the states `_initial_state` draws, the env's random state and
        torch's restored afterwards, so that the probe draws nothing the run would have drawn."""
        spec = self.action_spec
        actions = (torch.zeros(self.num_envs, spec.size, device=self.device) if spec.kind == "continuous"
                   else torch.zeros(self.num_envs, dtype=torch.int64, device=self.device))
        generator = self.generator.get_state()
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            fresh = self._initial_state()
        self.generator.set_state(generator)
        with torch.inference_mode():
            return graph_break(type(self)._transition, self, actions, fresh)

    def compile_step(self, wrap: Callable[..., Callable]) -> None:
        """Run the deterministic part of every `step` after the first (which checks what the subclass returns,
        eagerly) through `wrap(fn, *tensors)`, `tensors` being every tensor the env holds (its state, bookkeeping and
        output buffers); the random draws stay outside, on the env's own generator, so the random stream is the same
        either way. Once per env: a second call keeps the first wrapper."""
        if "_transition" not in vars(self):
            held = [value for value in vars(self).values() if isinstance(value, Tensor)]
            vars(self)["_transition"] = wrap(self._transition, *held)

    def _check_initial_state(self, fresh: Any) -> None:
        """`num_envs` as `__init__` was given it, and `_initial_state()`: one tensor per state the env holds, of the
        state's shape, dtype and device, one row per env (finished envs restart from it with `torch.where`)."""
        name, rows = type(self).__name__, self.episode_return.shape[0]
        if self.num_envs != rows:
            raise mistake(name, "num_envs", f"{rows} (the count given to TorchVecEnv.__init__)", repr(self.num_envs))
        if not isinstance(fresh, Mapping):
            raise mistake(name, "_initial_state()", "a dict of state name -> tensor", type(fresh).__name__)
        for state, value in fresh.items():
            field = f"_initial_state()[{state!r}]"
            current = getattr(self, state, None) if isinstance(state, str) else None
            if not isinstance(current, Tensor):
                raise mistake(name, field, f"the name of a tensor the env holds (self.{state})",
                              "no such tensor" if current is None else type(current).__name__)
            if current.dim() == 0 or current.shape[0] != rows:
                raise mistake(name, f"self.{state}", f"{rows} rows (one per env)", f"shape {tuple(current.shape)}")
            check_device(name, f"self.{state}", current, self.device)
            if not isinstance(value, Tensor):
                raise mistake(name, field, "a tensor", type(value).__name__)
            if value.shape != current.shape or value.dtype != current.dtype or value.device != current.device:
                raise mistake(name, field, f"{_describe(current)} (as self.{state})", _describe(value))

    def _check_observed(self, obs: Any) -> None:
        """`_observe()`: the groups `obs_shapes` declares, once it is declared (`check_env` names a missing or
        malformed declaration)."""
        shapes = getattr(self, "obs_shapes", None)
        if is_obs_shapes(shapes):
            check_observations(type(self).__name__, "_observe()", obs, shapes, self.num_envs, self.device)

    def _reset_where(self, done: Tensor, fresh_states: dict[str, Tensor]) -> None:
        for name, fresh in fresh_states.items():
            current = getattr(self, name)
            mask = done.view(-1, *([1] * (current.dim() - 1)))
            current.copy_(torch.where(mask, fresh, current))
        self.episode_return.masked_fill_(done, 0.0)
        self.episode_length.masked_fill_(done, 0)

    def state_dict(self) -> dict[str, Any]:
        state = {name: getattr(self, name).clone() for name in self.state_names}
        state.update(episode_return=self.episode_return.clone(), episode_length=self.episode_length.clone(),
                     generator=self.generator.get_state())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in (*self.state_names, "episode_return", "episode_length"):
            target = getattr(self, name)
            if name not in state or state[name].shape != target.shape:
                got = tuple(state[name].shape) if name in state else "missing"
                raise ValueError(f"env state {name!r}: expected shape {tuple(target.shape)}, got {got}")
            target.copy_(state[name])
        self.generator.set_state(state["generator"])


def _describe(value: Tensor) -> str:
    return f"shape {tuple(value.shape)} {value.dtype} on {value.device}"


def draw_episode_steps(episode_length: Tensor, max_episode_length: int, generator: torch.Generator) -> None:
    """Each env's step count drawn uniformly from [0, max_episode_length), in place (`start_at_random_steps`)."""
    episode_length.copy_(torch.randint(0, max_episode_length, episode_length.shape, generator=generator,
                                       device=episode_length.device))
