"""The settings of one MettaGrid simulation, as plain data: the grid-arena task's `env` section and the MettaGrid
adapter's spec share them (`syncfree.envs.adapters.mettagrid.MettaGridSpec` adds MettaGrid's own config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from syncfree.errors import UserError

MAPS = ("arena", "empty-room", "mines")
ARENA_WALLS = 10
"""Walls scattered at random in the arena (as in MettaGrid's `make_arena`)."""
ARENA_BORDER = 6
"""Wall border around the arena's playable area (as in MettaGrid's `make_arena`)."""


@dataclass
class MettaGridMap:
    """One MettaGrid simulation. The defaults are a small `mines` map a recurrent policy learns quickly: 4 agents
    and 6 mines on 8 x 8 cells, 64-step episodes (a random policy earns 0.064 per agent per step there)."""

    map: Literal["arena", "empty-room", "mines"] = "mines"
    """`mines`: mines placed at random, each push into one pays a heart (reward 1); `arena`: MettaGrid's arena
    builder (10 random walls); `empty-room`: no objects. Only `mines` pays reward (the others measure stepping
    speed)."""
    agents_per_env: int = 4
    """Agents per simulation."""
    width: int = 8
    """Playable width (without the wall border)."""
    height: int = 8
    """Playable height (without the wall border)."""
    max_steps: int = 64
    """Episode length (a time-out, bootstrapped from the value)."""
    mines: int = 6
    """Mines on the `mines` map (the other maps ignore it)."""

    def validate(self, prefix: str = "") -> None:
        """One line naming the first bad setting (`prefix`: how the caller names them, e.g. `env.`)."""
        where = "config: " if prefix else "MettaGrid spec: "
        if self.map not in MAPS:
            raise UserError(f"{where}{prefix}map={self.map!r} is invalid; allowed: {', '.join(MAPS)}")
        for name in ("agents_per_env", "width", "height", "max_steps") + (("mines",) if self.map == "mines" else ()):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"{where}{prefix}{name}={value!r} is invalid; allowed: an integer >= 1")
        objects = {"arena": (ARENA_WALLS, f" and its {ARENA_WALLS} walls"),
                   "mines": (self.mines, f" and {prefix}mines={self.mines}")}.get(self.map, (0, ""))
        needed = self.agents_per_env + objects[0]
        if needed > self.width * self.height:
            raise UserError(f"{where}{prefix}width x {prefix}height = {self.width} x {self.height} is too small for "
                            f"{prefix}agents_per_env={self.agents_per_env}{objects[1]} on map={self.map!r} "
                            f"(needs at least {needed} cells)")
