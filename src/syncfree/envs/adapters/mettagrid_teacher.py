"""A scripted teacher for the MettaGrid "mines" map: the target actions of a supervised imitation loss.

MettaGrid 0.26's simulations never fill their teacher-actions buffer, so a trainer that wants an imitation target
on `MettaGridSpec("mines", ...)` needs one computed from the observations themselves. `MinesTeacher` reads each
agent's tokens and walks it to the nearest visible mine along a shortest free path, then keeps pushing into the
mine (every push is a heart, a reward of 1).

Everything it needs to decode the tokens is read once from MettaGrid's own metadata
(`PolicyEnvInterface.from_mg_cfg`, `PackedCoordinate`, the action configs), so a MettaGrid release that renumbers
features or tags or repacks coordinates changes the teacher's tables, not its code:

- a token is `(packed coordinate, feature id, value)`; `PackedCoordinate.unpack` maps the coordinate byte to a
  `(row, col)` cell of the agent-centric window (rows grow southward) or to None for global (0xFE) and empty
  (0xFF) tokens. The agent itself is at the window's centre `(height // 2, width // 2)`. MettaGrid only reports
  the cells within a disk of that window (on the default 13 x 13 window, measured with mettagrid 0.26.22: the
  cells with row offset^2 + column offset^2 <= 37 from the centre): the corners never hold a token;
- every object on a cell emits one `tag` token per tag, whose value indexes MettaGrid's sorted tag list; each
  object type has the tag `typeTag(name)` (`"type:mine"`, `"type:wall"`, `"type:agent"`). Any tagged cell holds
  an object and blocks movement;
- the global `last_action` token holds the index of the agent's previous action (MettaGrid reports a move that
  failed as noop, 0).

The teacher is pure tensor code with fixed shapes: no host reads, no data-dependent shapes, no Python loop over
agents, so it runs inside `torch.compile(fullgraph=True)` and on CUDA without a host sync.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from syncfree.errors import UserError

try:  # the adapter first: it imports mettagrid and undoes mettagrid's root-logger setup
    from syncfree.envs.adapters.mettagrid import MettaGridVecEnv  # noqa: I001
    from mettagrid import MettaGridConfig
    from mettagrid.config.tag import typeTag
    from mettagrid.mettagrid_c import PackedCoordinate
    from mettagrid.policy.policy_env_interface import PolicyEnvInterface
except ImportError as e:  # pragma: no cover - exercised only without mettagrid
    raise ImportError("the MettaGrid teacher needs mettagrid: pip install 'mettagrid==0.26.22'") from e

MINE_OBJECT = "mine"
"""The object name `MettaGridSpec(map="mines")` gives its mines (a syncfree name, not a MettaGrid one)."""

CLOCKWISE: Final = ("north", "east", "south", "west")
"""The four moves in clockwise order: the teacher's internal move order, and its tie-break order."""

COMPASS = {"north": (-1, 0), "east": (0, 1), "south": (1, 0), "west": (0, -1)}
"""(row, col) step of each move: MettaGrid's grid convention, rows growing southward and columns eastward (the
window's packed coordinates use the same orientation)."""


@dataclass(frozen=True)
class MinesLayout:
    """What the teacher reads from a mines map's MettaGrid metadata, as plain Python values."""

    height: int
    width: int
    """The agent-centric observation window, in cells."""
    cell_of_coordinate: tuple[int, ...]
    """For each of the 256 coordinate bytes: the window cell `row * width + col`, or `height * width` (a spare
    slot) for global and empty tokens and for coordinates outside the window."""
    tag_feature: int
    """Feature id of the `tag` tokens."""
    mine_tag: int
    """Tag id (the value of a `tag` token) of `typeTag("mine")`."""
    last_action_feature: int | None
    """Feature id of the global `last_action` token, None when the config turns it off."""
    noop_action: int
    move_actions: tuple[int, int, int, int]
    """Action indices of the moves, in `CLOCKWISE` order."""

    @property
    def cells(self) -> int:
        return self.height * self.width

    @property
    def center(self) -> tuple[int, int]:
        return self.height // 2, self.width // 2

    def neighbor_cells(self) -> tuple[int, ...]:
        """The window cells one move from the agent, in `CLOCKWISE` order."""
        row, col = self.center
        return tuple((row + COMPASS[d][0]) * self.width + col + COMPASS[d][1] for d in CLOCKWISE)


def read_layout(config: MettaGridConfig, action_names: Sequence[str]) -> MinesLayout:
    """The `MinesLayout` of a mines map, or a `UserError` naming what the config lacks."""
    if MINE_OBJECT not in config.game.objects:
        objects = ", ".join(sorted(config.game.objects)) or "none"
        raise UserError(f"MinesTeacher: the MettaGrid config has no {MINE_OBJECT!r} object (objects: {objects}); "
                        f"it needs a mines map, e.g. MettaGridSpec('mines', ...)")
    interface = PolicyEnvInterface.from_mg_cfg(config)
    height, width = interface.egocentric_shape
    if height < 3 or width < 3:
        raise UserError(f"MinesTeacher: the observation window {height} x {width} is too small to see the cells "
                        f"around the agent (needs at least 3 x 3)")
    features = {f.name: f.id for f in interface.obs_features}
    if "tag" not in features:
        raise UserError("MinesTeacher: MettaGrid's observation features have no 'tag' feature")
    mine_tag_name = typeTag(MINE_OBJECT)
    if mine_tag_name not in interface.tags:
        raise UserError(f"MinesTeacher: MettaGrid's tags have no {mine_tag_name!r} (tags: {interface.tags})")
    actions = config.game.actions
    wanted = {"noop": actions.noop.Noop().name} | {d: actions.move.Move(d).name for d in CLOCKWISE}
    missing = [name for name in wanted.values() if name not in action_names]
    if missing:
        raise UserError(f"MinesTeacher: the env's actions lack {', '.join(missing)} (actions: {list(action_names)})")
    index = {name: i for i, name in enumerate(action_names)}
    last_action = features.get("last_action") if config.game.obs.global_obs.last_action else None
    return MinesLayout(
        height=height, width=width,
        cell_of_coordinate=tuple(_window_cell(byte, height, width) for byte in range(256)),
        tag_feature=features["tag"], mine_tag=interface.tags.index(mine_tag_name), last_action_feature=last_action,
        noop_action=index[wanted["noop"]],
        move_actions=cast("tuple[int, int, int, int]", tuple(index[wanted[d]] for d in CLOCKWISE)))


def _window_cell(byte: int, height: int, width: int) -> int:
    """The window cell of a coordinate byte (`PackedCoordinate.unpack`), or the spare slot `height * width`."""
    cell = PackedCoordinate.unpack(byte)
    if cell is None or not (0 <= cell[0] < height and 0 <= cell[1] < width):
        return height * width
    return cell[0] * width + cell[1]


@dataclass(frozen=True)
class _Tables:
    """The layout's lookup tables on one device."""

    cell_of_coordinate: Tensor  # [256] int64
    neighbors: Tensor  # [4] int64, window cells in CLOCKWISE order
    move_actions: Tensor  # [4] int64, in CLOCKWISE order
    heading_of_action: Tensor  # [256] int64: CLOCKWISE index of a move action, 0 (north) for anything else


def _tables(layout: MinesLayout, device: torch.device) -> _Tables:
    heading = [0] * 256
    for k, action in enumerate(layout.move_actions):
        heading[action] = k
    as_tensor = lambda values: torch.tensor(values, dtype=torch.int64, device=device)  # noqa: E731
    return _Tables(as_tensor(layout.cell_of_coordinate), as_tensor(layout.neighbor_cells()),
                   as_tensor(layout.move_actions), as_tensor(heading))


def window_maps(tokens: Tensor, layout: MinesLayout, cell_of_coordinate: Tensor) -> tuple[Tensor, Tensor]:
    """`(blocked, mines)`, each `[B, height, width]` bool: the window cells holding any object (the agent's own
    cell included), and those holding a mine. Cells nobody reports (outside the map, in the window's corners
    outside MettaGrid's view disk, beyond the token budget) count as free."""
    batch = tokens.shape[0]
    cell = cell_of_coordinate[tokens[..., 0].long()]
    is_tag = tokens[..., 1] == layout.tag_feature
    is_mine = is_tag & (tokens[..., 2] == layout.mine_tag)
    spare = torch.full_like(cell, layout.cells)

    def paint(where: Tensor) -> Tensor:
        grid = torch.zeros(batch, layout.cells + 1, dtype=torch.bool, device=tokens.device)
        return grid.scatter_(1, torch.where(where, cell, spare), True)[:, :-1].view(batch, layout.height,
                                                                                    layout.width)

    return paint(is_tag), paint(is_mine)


def distance_to_mines(blocked: Tensor, mines: Tensor, iterations: int) -> Tensor:
    """`[B, height, width]` int32: moves from each cell to the nearest mine cell over free cells (a mine counts 0,
    a cell next to one 1), `unreachable()` where no such path of at most `iterations` moves exists. A fixed
    number of relaxation sweeps (breadth-first search without a queue) keeps the shapes and the work static."""
    far = unreachable(blocked)
    dist = torch.where(mines, 0, far).to(torch.int32)
    free = ~blocked
    for _ in range(iterations):
        padded = F.pad(dist, (1, 1, 1, 1), value=far)
        nearest = torch.minimum(torch.minimum(padded[:, :-2, 1:-1], padded[:, 2:, 1:-1]),
                                torch.minimum(padded[:, 1:-1, :-2], padded[:, 1:-1, 2:]))
        dist = torch.where(free, torch.minimum(dist, nearest + 1), dist)
    return dist


def unreachable(grid: Tensor) -> int:
    """The distance that marks "no mine reachable": more moves than the window has cells."""
    return grid.shape[-2] * grid.shape[-1] + 1


def first_in_order(candidates: Tensor) -> Tensor:
    """`[B]` int64: the first True column of `[B, k]` bool (k where none is), without a data-dependent shape."""
    order = torch.arange(candidates.shape[-1], device=candidates.device)
    return torch.where(candidates, order, candidates.shape[-1]).amin(dim=-1)


def last_actions(tokens: Tensor, feature: int | None) -> Tensor:
    """`[B]` int64: the value of each agent's `last_action` token, 255 when it has none."""
    if feature is None:
        return torch.full(tokens.shape[:1], 255, dtype=torch.int64, device=tokens.device)
    is_last = tokens[..., 1] == feature
    return torch.where(is_last, tokens[..., 2].long(), 255).amin(dim=-1)


class MinesTeacher:
    """Scripted actions for `MettaGridSpec(map="mines")`: `teacher(tokens)` maps `[B, tokens, 3]` uint8 MettaGrid
    observations (one agent per row) to `[B]` int64 action indices in the env's `action_names`.

    Per agent, from its own window only:

    1. Toward a mine: a breadth-first distance to the nearest visible mine over free cells (walls, other agents
       and other mines block) picks the move to the neighbouring cell closest to a mine. Next to a mine that cell
       is the mine itself, so the agent keeps moving into it and gains a heart every step. Equal distances go to
       the earlier move in `CLOCKWISE` order (north, east, south, west), so the choice never depends on the order
       MettaGrid emits its tokens in.
    2. No reachable mine (none visible, or every path blocked by agents or longer than `height + width` moves):
       a deterministic sweep. The agent keeps the heading of its last move if the cell ahead is free, and
       otherwise turns clockwise to the first free neighbour; with no move as last action (start of an episode,
       or a move MettaGrid reported as failed) it heads north first. With all four neighbours blocked it does
       nothing (noop). Sweeping, rather than standing still, brings mines into view on maps larger than the
       window; on `learnable_spec()` (8 x 8 cells, 6 mines) some mine is nearly always in reach.

    Build it with `MinesTeacher.from_env(env)` or `MinesTeacher(config, action_names)`: the constructor reads
    the token layout from MettaGrid's metadata (`read_layout`) and raises a `UserError` if the config is not a
    mines map. Lookup tables are made per device on first use (or by `to(device)` ahead of a compiled call).
    """

    def __init__(self, config: MettaGridConfig, action_names: Sequence[str]) -> None:
        self.layout = read_layout(config, action_names)
        self.iterations = self.layout.height + self.layout.width
        self._by_device: dict[torch.device, _Tables] = {}

    @classmethod
    def from_env(cls, env: MettaGridVecEnv) -> MinesTeacher:
        return cls(env.config, env.action_names)

    def to(self, device: torch.device | str) -> MinesTeacher:
        """Place the lookup tables on `device` now (a host-to-device copy), so calls there copy nothing."""
        self._on(torch.empty(0, device=device).device)  # "cuda" -> "cuda:0", the device tensors report
        return self

    def _on(self, device: torch.device) -> _Tables:
        tables = self._by_device.get(device)
        if tables is None:
            tables = self._by_device[device] = _tables(self.layout, device)
        return tables

    def __call__(self, tokens: Tensor) -> Tensor:
        if tokens.dim() != 3 or tokens.shape[-1] < 3 or tokens.dtype != torch.uint8:
            raise UserError(f"MinesTeacher: tokens must be [B, tokens, 3] uint8, got {list(tokens.shape)} "
                            f"{tokens.dtype}")
        layout, tables = self.layout, self._on(tokens.device)
        blocked, mines = window_maps(tokens, layout, tables.cell_of_coordinate)
        batch = tokens.shape[0]
        dist = distance_to_mines(blocked, mines, self.iterations).view(batch, layout.cells)
        around = dist[:, tables.neighbors]  # [B, 4], CLOCKWISE
        toward = first_in_order(around == around.amin(dim=-1, keepdim=True))
        reachable = around.amin(dim=-1) < unreachable(blocked)

        free = ~blocked.view(batch, layout.cells)[:, tables.neighbors]  # [B, 4], CLOCKWISE
        heading = tables.heading_of_action[last_actions(tokens, layout.last_action_feature)]
        turns = (heading[:, None] + torch.arange(4, device=tokens.device)) % 4
        turn = first_in_order(free.gather(1, turns))  # 4: every neighbour blocked
        sweep = turns.gather(1, turn.clamp_max(3)[:, None]).squeeze(1)

        move = torch.where(reachable, toward, sweep)
        action = tables.move_actions[move]
        return torch.where(reachable | (turn < 4), action, layout.noop_action)


__all__ = ["CLOCKWISE", "COMPASS", "MINE_OBJECT", "MinesLayout", "MinesTeacher", "read_layout"]
