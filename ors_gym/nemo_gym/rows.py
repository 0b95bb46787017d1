"""NeMo Gym dataset rows for an ORS environment's tasks, and the server root NeMo Gym searches.

A row is what NeMo Gym's agents run: ``responses_create_params`` (the task's
messages as Responses ``input``, its tools as Responses function tools with the
terminal tool hidden) plus the fields ``OrsResourcesServer``'s ``seed_session``
reads to reopen the task (``ors_split``, ``ors_index``) and to check that the
live prompt is still the one written (``ors_prompt_sha256``), and a ``task_id``.
Each task's session is opened once to read its prompt and tools, then deleted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming

from ors_gym._runtime import Runtime
from ors_gym.nemo_gym._responses import prompt_digest, responses_input, responses_tools
from ors_gym.tokens import EnvPool, EpisodeRow

__all__ = ["dataset_rows", "root", "write_rows"]

#: Task sessions open at once while rows are written.
_OPEN_AT_ONCE = 8


def root() -> Path:
    """The folder holding ``resources_servers/ors`` (the server's ``app.py`` and its
    config), for NeMo Gym's ``--search-dir``."""
    return Path(__file__).resolve().parent / "root"


def dataset_rows(env_id: str = "ors/Remote-v0", *, split: str | None = None,
                 limit: int | None = None, agent: str | None = None,
                 **make_kwargs: Any) -> list[dict[str, Any]]:
    """One NeMo Gym row per task of ``split`` (the environment's default split when None),
    the first ``limit`` tasks when given. ``env_id`` and ``make_kwargs`` name the
    environment as ``gymnasium.make`` does (``base_url=``, ``env_name=``...). ``agent``:
    the NeMo Gym agent each row names (``agent_ref``, which NeMo-RL routes rows by)."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be a count of tasks (0 or more), got {limit}")
    runtime = Runtime("ors-nemo-gym-rows")
    pool = EnvPool(on_error="raise")
    try:
        rows = runtime.run(_rows(pool, EpisodeRow(env_id, dict(make_kwargs)), split, limit))
    finally:
        runtime.close(pool.aclose())
    if agent is not None:
        for row in rows:
            row["agent_ref"] = {"type": "responses_api_agents", "name": agent}
    return rows


async def _rows(pool: EnvPool, row: EpisodeRow, split: str | None,
                limit: int | None) -> list[dict[str, Any]]:
    catalog = pool.env(row).catalog
    split = split or await catalog.default_split()
    count = await catalog.num_tasks(split)
    count = count if limit is None else min(count, limit)
    bound = asyncio.Semaphore(_OPEN_AT_ONCE)

    async def one(index: int) -> dict[str, Any]:
        async with bound:
            return await _row(pool, row, split, index)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def _row(pool: EnvPool, row: EpisodeRow, split: str, index: int) -> dict[str, Any]:
    env = pool.env(row)
    env.prefetch_messages = True
    try:
        await env.reset(options={"split": split, "index": index})
        items = responses_input(await env.messages())
        params = {"input": items, "tools": responses_tools(env.tools)}
    finally:
        await env.close()
    NeMoGymResponseCreateParamsNonStreaming.model_validate(params)  # as NeMo Gym reads it
    return {
        "responses_create_params": params,
        "task_id": f"{env.env_name}:{split}:{index}",
        "ors_split": split,
        "ors_index": index,
        "ors_prompt_sha256": prompt_digest(items),
    }


def write_rows(rows: Iterable[Mapping[str, Any]], path: str | Path) -> int:
    """Write ``rows`` as JSON Lines to ``path``; returns how many were written."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count
