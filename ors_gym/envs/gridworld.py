"""GridWorld: walk an agent to a goal on a small grid, seeing text and a PNG.

Task spec: ``size`` (default 5), ``start`` and ``goal`` as ``[row, col]`` (row 0
at the top), optional ``walls`` (list of ``[row, col]``), ``max_steps`` (a
truncation hint for wrappers; the environment itself does not enforce it) and
``cell_px`` (pixels per cell: the frame's scale; by default the smallest that
makes the frame at least 160 px wide, so a 5x5 grid renders 160x160 RGB at 32 px
per cell, large enough to see; frames are at most 2048 px wide).

Rewards: 1.0 when ``move`` reaches the goal (``finished=True``); every other
move costs -0.01 (a step penalty, so shorter paths score higher), including a
move blocked by a wall or the edge (the agent stays put).

Each ``move`` answers a TextBlock (position, with ``detail`` =
``{"agent": [r, c], "goal": [r, c], "size": n}``) and an ImageBlock (PNG of the
grid: floor dark grey, walls mid grey, goal green, agent red), and the same
positions in ``ToolOutput.metadata`` so wrappers can build vector observations.
Images are cached per (grid, agent position): a step costs a dict lookup.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

from openreward.environments import (
    ImageBlock,
    JSONObject,
    TextBlock,
    ToolOutput,
    tool,
)
from PIL import Image, ImageDraw
from pydantic import BaseModel, Field

from ors_gym.envs._common import BundledEnvironment, png_b64, seeded_rng

__all__ = ["GOAL_REWARD", "STEP_PENALTY", "GridWorld", "default_cell_px"]

GOAL_REWARD = 1.0
STEP_PENALTY = -0.01
_DEFAULT_SIZE = 5
_MIN_FRAME_PX = 160  # the default cell_px makes frames at least this wide
_MAX_FRAME_PX = 2048
_SIZES = {"train": 64, "test": 16}

_FLOOR = (40, 40, 40)
_WALL = (128, 128, 128)
_GOAL = (0, 200, 0)
_AGENT = (230, 40, 40)

_DELTAS: dict[str, tuple[int, int]] = {
    "up": (-1, 0),
    "down": (1, 0),
    "left": (0, -1),
    "right": (0, 1),
}

Cell = tuple[int, int]


class MoveInput(BaseModel):
    """Input of ``move``."""

    direction: Literal["up", "down", "left", "right"] = Field(
        description="Which way to step: up (row - 1), down (row + 1), left or right."
    )


def _shortest_path(size: int, start: Cell, goal: Cell, walls: frozenset[Cell]) -> int | None:
    """Breadth-first distance from start to goal, or None if walled off."""
    seen = {start}
    queue: deque[tuple[Cell, int]] = deque([(start, 0)])
    while queue:
        (r, c), dist = queue.popleft()
        if (r, c) == goal:
            return dist
        for dr, dc in _DELTAS.values():
            nxt = (r + dr, c + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in walls and nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, dist + 1))
    return None


def _make_task(split: str, index: int, size: int = _DEFAULT_SIZE) -> dict[str, Any]:
    """Task ``index`` of ``split``: random start/goal, 0-3 walls that keep the goal reachable."""
    rng = seeded_rng("gridworld", split, index)
    cells = [(r, c) for r in range(size) for c in range(size)]
    start, goal = rng.sample(cells, 2)
    walls: set[Cell] = set()
    for cell in rng.sample(cells, len(cells))[: rng.randint(0, 3) * 2]:
        if len(walls) >= 3 or cell in (start, goal):
            continue
        if _shortest_path(size, start, goal, frozenset(walls | {cell})) is not None:
            walls.add(cell)
    return {
        "id": f"{split}-{index}",
        "size": size,
        "start": list(start),
        "goal": list(goal),
        "walls": sorted([list(w) for w in walls]),
        "max_steps": 10 * size,
        "cell_px": default_cell_px(size),
    }


def default_cell_px(size: int) -> int:
    """Pixels per cell for a ``size`` x ``size`` grid: the frame is at least 160 px wide."""
    return max(1, math.ceil(_MIN_FRAME_PX / size))


@lru_cache(maxsize=256)
def _background(size: int, cell_px: int, goal: Cell, walls: frozenset[Cell]) -> Image.Image:
    """The static part of the picture (floor, walls, goal), drawn once per grid."""
    image = Image.new("RGB", (size * cell_px, size * cell_px), _FLOOR)
    draw = ImageDraw.Draw(image)
    for cell, colour in [*((w, _WALL) for w in walls), (goal, _GOAL)]:
        r, c = cell
        draw.rectangle(
            (c * cell_px, r * cell_px, (c + 1) * cell_px - 1, (r + 1) * cell_px - 1), fill=colour
        )
    return image


@lru_cache(maxsize=8192)
def _frame_b64(size: int, cell_px: int, goal: Cell, walls: frozenset[Cell], agent: Cell) -> str:
    """Base64 PNG of the grid with the agent drawn at ``agent``."""
    image = _background(size, cell_px, goal, walls).copy()
    r, c = agent
    ImageDraw.Draw(image).rectangle(
        (c * cell_px, r * cell_px, (c + 1) * cell_px - 1, (r + 1) * cell_px - 1), fill=_AGENT
    )
    return png_b64(image)


def _cell(value: object, what: str, size: int) -> Cell:
    """Validate a ``[row, col]`` pair from a task spec."""
    if not (
        isinstance(value, Sequence) and len(value) == 2 and all(isinstance(v, int) for v in value)
    ):
        raise ValueError(f"GridWorld task field {what} must be [row, col] integers, got {value!r}")
    row, col = int(value[0]), int(value[1])
    if not (0 <= row < size and 0 <= col < size):
        raise ValueError(f"GridWorld task field {what}={value!r} is outside the {size}x{size} grid")
    return row, col


class GridWorld(BundledEnvironment):
    """Reach the goal cell with ``move``: +1 at the goal, -0.01 per other step."""

    def _read_task(self, task_spec: JSONObject) -> None:
        size = task_spec.get("size", _DEFAULT_SIZE)
        if not isinstance(size, int) or not 2 <= size <= 64:
            raise ValueError(f"GridWorld 'size' must be an integer from 2 to 64, got {size!r}")
        cell_px = task_spec.get("cell_px", default_cell_px(size))
        largest = _MAX_FRAME_PX // size
        if not isinstance(cell_px, int) or not 1 <= cell_px <= largest:
            raise ValueError(
                f"GridWorld 'cell_px' must be an integer from 1 to {largest} for a {size}x{size} "
                f"grid (frames up to {_MAX_FRAME_PX} px), got {cell_px!r}"
            )
        self.size, self.cell_px = size, cell_px
        self.start = _cell(task_spec.get("start", [0, 0]), "start", size)
        self.goal = _cell(task_spec.get("goal", [size - 1, size - 1]), "goal", size)
        raw_walls = task_spec.get("walls") or []
        self.walls = frozenset(_cell(w, "walls[]", size) for w in raw_walls)
        if self.start == self.goal:
            raise ValueError("GridWorld 'start' and 'goal' must differ")
        if self.start in self.walls or self.goal in self.walls:
            raise ValueError("GridWorld 'walls' must not cover 'start' or 'goal'")
        max_steps = task_spec.get("max_steps", 10 * size)
        self.max_steps = int(max_steps)
        self.agent = self.start
        self.steps = 0

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        cls._check_split(split)
        return [_make_task(split, i) for i in range(_SIZES[split])]

    def _positions(self) -> dict[str, Any]:
        return {"agent": list(self.agent), "goal": list(self.goal), "size": self.size}

    def _image(self) -> ImageBlock:
        data = _frame_b64(self.size, self.cell_px, self.goal, self.walls, self.agent)
        return ImageBlock(data=data, mimeType="image/png")

    async def get_prompt(self) -> list[TextBlock | ImageBlock]:
        walls = ", ".join(str(list(w)) for w in sorted(self.walls)) or "none"
        text = (
            f"You are on a {self.size}x{self.size} grid (row 0 is the top) at "
            f"{list(self.agent)}. Reach the goal at {list(self.goal)} with the move tool "
            f"(up, down, left, right). Walls: {walls}. Reaching the goal gives +1; "
            f"every other step costs 0.01. Try to finish within {self.max_steps} steps."
        )
        return [TextBlock(text=text, detail=self._positions()), self._image()]

    @tool
    async def move(self, params: MoveInput) -> ToolOutput:
        """Step one cell up, down, left or right; walls and edges block the move."""
        dr, dc = _DELTAS[params.direction]
        nxt = (self.agent[0] + dr, self.agent[1] + dc)
        blocked = not (0 <= nxt[0] < self.size and 0 <= nxt[1] < self.size) or nxt in self.walls
        if not blocked:
            self.agent = nxt
        self.steps += 1
        at_goal = self.agent == self.goal
        if at_goal:
            text = f"Moved {params.direction} to {list(self.agent)}: you reached the goal!"
        elif blocked:
            text = f"Blocked: cannot move {params.direction}; still at {list(self.agent)}."
        else:
            text = (
                f"Moved {params.direction} to {list(self.agent)}; the goal is at {list(self.goal)}."
            )
        positions = self._positions()
        metadata = {
            **positions,
            "walls": [list(w) for w in sorted(self.walls)],
            "steps": self.steps,
            "max_steps": self.max_steps,
            "blocked": blocked,
        }
        return ToolOutput(
            blocks=[TextBlock(text=text, detail=positions), self._image()],
            metadata=metadata,
            reward=GOAL_REWARD if at_goal else STEP_PENALTY,
            finished=at_goal,
        )
