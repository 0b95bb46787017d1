"""Run N episodes of a chat model on an ORS environment, K at once (``ors-gym eval``).

The loop of one episode, on ``AsyncOrsEnv`` (every episode shares one
backend and one discovery)::

    reset(task i of the split) -> prompt as an OpenAI user message
    repeat: model.respond(conversation, env.tools_as("openai")) -> assistant message
            env.step(message)  (tool calls run; a plain answer goes to the terminal tool)
            conversation += the assistant turn and the environment's reply
    until terminated or truncated (``max_turns`` truncates)

An endpoint failure (:class:`~ors_gym.eval.models.ModelEndpointError`) or an
environment failure (an ``OrsError``) ends that episode only: it is recorded
with its ``error`` reason and counted, and the run goes on. Each finished
episode is appended to ``trajectories.jsonl`` at once (the
``RecordTrajectories`` format); ``summary.json`` and ``report.html`` follow
at the end.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from ors_gym.async_env import AsyncOrsEnv, make_async_backend
from ors_gym.errors import OrsActionError, OrsError, redact_url
from ors_gym.eval.models import (
    SCRIPTED,
    ChatModel,
    ModelEndpointError,
    OpenAIChatModel,
    ScriptedChatModel,
)
from ors_gym.eval.record import EpisodeRecord, record_line
from ors_gym.eval.summary import failed_outside_the_model, summarize
from ors_gym.formats import (
    as_block,
    assistant_turn,
    exchange_messages,
    render_messages,
    step_exchange,
)
from ors_gym.protocol import Message
from ors_gym.settings import EnvSettings

if TYPE_CHECKING:
    from ors_gym.platform import RolloutUploader

__all__ = ["aevaluate", "evaluate", "make_model"]

logger = logging.getLogger("ors_gym")

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"
REPORT = "report.html"


def make_model(
    model: str, base_url: str | None = None, *, api_key: str | None = None,
    max_retries: int = 2, timeout: float = 120.0, temperature: float | None = None,
    seed: int = 0,
) -> ChatModel:
    """``ScriptedChatModel`` for ``model="scripted"``, else ``OpenAIChatModel`` at ``base_url``."""
    if model == SCRIPTED:
        return ScriptedChatModel(seed=seed)
    if base_url is None:
        raise ValueError(
            f"model {model!r} needs base_url (an OpenAI-compatible endpoint such as "
            "'http://127.0.0.1:8000/v1'); model='scripted' needs none"
        )
    return OpenAIChatModel(model, base_url, api_key=api_key, max_retries=max_retries,
                           timeout=timeout, temperature=temperature)


def evaluate(
    env_id: str,
    model: str,
    base_url: str | None = None,
    *,
    episodes: int = 10,
    concurrency: int = 4,
    split: str | None = None,
    out: str | os.PathLike[str] | None = "runs/eval",
    max_turns: int = 20,
    api_key: str | None = None,
    max_retries: int = 2,
    timeout: float = 120.0,
    temperature: float | None = None,
    seed: int = 0,
    env_options: Mapping[str, Any] | None = None,
    progress: bool = False,
    report: bool = True,
    overwrite: bool = False,
    upload: str | RolloutUploader | None = None,
) -> dict[str, Any]:
    """Evaluate ``model`` on ``episodes`` episodes of ``env_id``; returns the summary.

    ``env_id`` is a registered gym id (``ors/Math-v0``, ``ors-remote/...``);
    ``env_options`` override its kwargs (``base_url`` for a server...).
    ``model`` is the endpoint's model name, or ``"scripted"`` (``ScriptedLLM``,
    no endpoint). Episode ``i`` plays task ``i mod num_tasks`` of ``split``
    (default: the environment's default split); ``concurrency`` episodes run
    at once. ``out`` (None: write nothing) receives ``trajectories.jsonl``
    (images as base64), ``summary.json`` and, with ``report``, ``report.html``.
    The summary holds ``episodes``, ``scored_episodes``, ``failed_episodes``
    (cut short by the endpoint or the environment: not scored), ``mean_reward``,
    ``reward_ci95`` (bootstrap), ``success_rate``, ``mean_turns``, ``errors`` (count by reason),
    ``usage`` (tokens), ``wall_seconds`` and the paths written; a figure with no
    episode scored is ``None``. An ``out`` that already holds a run raises
    ``FileExistsError`` before anything is written, unless ``overwrite=True``.
    ``upload``: a run name (or a ``RolloutUploader``) to upload each scored episode to
    the platform's rollout log as it finishes, in the background (a run name's
    uploader is closed, and so flushed, before this returns).
    Blocking: from a running event loop (Jupyter), await :func:`aevaluate`.
    """
    return asyncio.run(aevaluate(
        env_id, model, base_url, episodes=episodes, concurrency=concurrency, split=split,
        out=out, max_turns=max_turns, api_key=api_key, max_retries=max_retries,
        timeout=timeout, temperature=temperature, seed=seed, env_options=env_options,
        progress=progress, report=report, overwrite=overwrite, upload=upload,
    ))


async def aevaluate(
    env_id: str,
    model: str | ChatModel,
    base_url: str | None = None,
    *,
    episodes: int = 10,
    concurrency: int = 4,
    split: str | None = None,
    out: str | os.PathLike[str] | None = "runs/eval",
    max_turns: int = 20,
    api_key: str | None = None,
    max_retries: int = 2,
    timeout: float = 120.0,
    temperature: float | None = None,
    seed: int = 0,
    env_options: Mapping[str, Any] | None = None,
    progress: bool = False,
    report: bool = True,
    overwrite: bool = False,
    upload: str | RolloutUploader | None = None,
) -> dict[str, Any]:
    """:func:`evaluate`, awaited; ``model`` may also be a ready ``ChatModel`` (left open)."""
    out_dir = Path(out) if out is not None else None
    if out_dir is not None and not overwrite:
        _refuse_an_earlier_run(out_dir)
    for name, value in (("episodes", episodes), ("concurrency", concurrency),
                        ("max_turns", max_turns)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    where, options = _env_kwargs(env_id, env_options)
    owns_chat = isinstance(model, str)
    chat = model if not isinstance(model, str) else make_model(
        model, base_url, api_key=api_key, max_retries=max_retries, timeout=timeout,
        temperature=temperature, seed=seed)
    settings = EnvSettings.from_options({**options, "max_steps": max_turns,
                                         **({"split": split} if split else {})})
    backend = make_async_backend(
        settings, base_url=where.get("base_url"), env_class=where.get("env_class")
    )
    uploader = None if isinstance(upload, str) else upload
    if isinstance(upload, str):
        from ors_gym.platform import RolloutUploader

        uploader = RolloutUploader(upload, run_info={"model_name": chat.name, "run_type": "eval"})
    path = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / TRAJECTORIES
        path.write_text("")
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    bar = _progress_bar(episodes, chat.name, progress)
    try:
        first = AsyncOrsEnv(env_name=where.get("env_name"), backend=backend, settings=settings)
        if settings.check_secrets and settings.deployment is not None:
            await _check_secrets(settings)
        n_tasks = await first.catalog.num_tasks(settings.split)
        chosen_split = settings.split or await first.catalog.default_split()
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(episodes):
            queue.put_nowait(i)

        def done(record: dict[str, Any]) -> None:
            records.append(record)
            if path is not None:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(record_line(record))
            if uploader is not None and not failed_outside_the_model(record):
                uploader.submit(record, environment=settings.deployment,
                                variant=settings.variant,
                                rollout_name=f"episode {record['episode']}")
            bar(record)

        async def worker(env: AsyncOrsEnv) -> None:
            async with env:
                while not queue.empty():
                    number = queue.get_nowait()
                    done(await _episode(env, chat, env_id, number, chosen_split,
                                        number % n_tasks))

        envs = [first] + [
            AsyncOrsEnv(env_name=where.get("env_name"), backend=backend, settings=settings,
                        catalog=first.catalog)
            for _ in range(min(concurrency, episodes) - 1)
        ]
        await asyncio.gather(*(worker(e) for e in envs))
    finally:
        bar(None)
        await backend.aclose()
        if owns_chat:
            await chat.aclose()
        if isinstance(upload, str) and uploader is not None:
            await asyncio.to_thread(uploader.close)
    records.sort(key=lambda r: int(r["episode"]))
    summary = summarize(
        records, model=chat.name, env_id=env_id, split=chosen_split, concurrency=concurrency,
        max_turns=max_turns, base_url=redact_url(base_url),
        wall_seconds=time.perf_counter() - started,
    )
    if out_dir is not None and path is not None:
        _rewrite_in_order(path, records)
        summary["trajectories"] = str(path)
        if report:
            from ors_gym.viewer import write_report

            summary["report"] = str(write_report(path, out_dir / REPORT))
        summary["summary_path"] = str(out_dir / SUMMARY)
        (out_dir / SUMMARY).write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    return summary


async def _episode(env: AsyncOrsEnv, chat: ChatModel, env_id: str, number: int,
                   split: str, index: int) -> dict[str, Any]:
    """Play one episode on task ``index``; its record (with ``error`` if cut short)."""
    try:
        _, info = await env.reset(options={"split": split, "index": index})
    except OrsError as exc:
        return _failed_reset(env_id, chat.name, number, split, index, exc)
    record = EpisodeRecord(env_id=env_id, model=chat.name, number=number, info=info,
                           server=redact_url(env.location))
    prompt = Message(role="user", blocks=[as_block(b) for b in info.get("blocks") or ()])
    messages: list[dict[str, Any]] = render_messages([prompt], "openai")
    error: tuple[str, str] | None = None
    step_number = 0
    try:
        while True:
            step_number += 1
            reply = await chat.respond(messages, env.tools_as("openai"))
            turn = assistant_turn(reply.message, step=step_number,
                                  tool_format=env.settings.tool_format,
                                  tools=lambda: env.tools_as("openai"))
            result = await env.step(turn)
            exchange = step_exchange(turn, result[4])
            record.add_step(reply.message, exchange, result, reply.usage)
            if result[2] or result[3]:
                break
            messages += render_messages(exchange_messages(exchange), "openai")
    except ModelEndpointError as exc:
        error = (f"endpoint_{exc.reason}", str(exc))
        logger.warning("episode %d: the model endpoint failed: %s", number, exc)
    except OrsActionError as exc:  # a reply no action can be read from: the model's fault
        error = ("invalid_model_output", str(exc))
        logger.warning("episode %d: unreadable model output: %s", number, exc)
    except OrsError as exc:
        error = (f"env_{type(exc).__name__}", str(exc))
        logger.warning("episode %d: the environment failed: %s", number, exc)
    return record.finish(error=error)


async def _check_secrets(settings: EnvSettings) -> None:
    """The secrets preflight once for the run, before any episode opens a session."""
    from ors_gym.platform import check_required_secrets
    from ors_gym.secret import reveal

    assert settings.deployment is not None
    await check_required_secrets(settings.deployment, settings.secrets or {},
                                 reveal(settings.api_key) or os.environ.get("OPENREWARD_API_KEY"))


def _refuse_an_earlier_run(out_dir: Path) -> None:
    """``FileExistsError`` when ``out_dir`` holds what a run writes: a new run would replace it."""
    found = [name for name in (TRAJECTORIES, SUMMARY, REPORT) if (out_dir / name).exists()]
    if found:
        raise FileExistsError(
            f"{out_dir} already holds an evaluation ({', '.join(found)}); choose another "
            "folder, or replace it with overwrite=True (ors-gym eval: --overwrite)"
        )


def _failed_reset(env_id: str, model: str, number: int, split: str, index: int,
                  exc: OrsError) -> dict[str, Any]:
    record = EpisodeRecord(env_id=env_id, model=model, number=number,
                           info={"split": split, "index": index}, server=None)
    return record.finish(error=(f"env_{type(exc).__name__}", str(exc)))


def _env_kwargs(env_id: str, overrides: Mapping[str, Any] | None) -> tuple[dict[str, Any],
                                                                          dict[str, Any]]:
    """``(where, options)``: the backend's ``base_url``/``env_class``/``env_name`` and the
    ``EnvSettings`` options of the registered id ``env_id``, with ``overrides`` applied."""
    # The ors/... ids are registered: importing this module ran ors_gym/__init__ first.
    if env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("ors"))
        raise ValueError(f"unknown environment id {env_id!r}; registered ORS ids: {known}")
    spec = gym.spec(env_id)
    kwargs = {**spec.kwargs, **(overrides or {})}
    where = {k: kwargs.pop(k) for k in ("base_url", "env_class", "env_name") if k in kwargs}
    if where.get("base_url") is not None:
        where.pop("env_class", None)
        if not where.get("env_name"):  # a bundled id served elsewhere: ors/Math-v0 -> "math"
            where["env_name"] = spec.name.lower()
    for gym_only in ("render_mode", "max_steps"):
        kwargs.pop(gym_only, None)
    return where, kwargs


def _progress_bar(total: int, label: str, show: bool) -> Callable[[dict[str, Any] | None], None]:
    """A callback advancing a tqdm bar per finished record (None closes it); no-op if hidden."""
    if not show:
        return lambda record: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=f"eval {label}", unit="episode")
    rewards: list[float] = []

    def update(record: dict[str, Any] | None) -> None:
        if record is None:
            bar.close()
            return
        if not failed_outside_the_model(record):  # as the summary scores them
            rewards.append(float(record["total_reward"]))
        if rewards:
            bar.set_postfix(mean_reward=f"{sum(rewards) / len(rewards):.3f}", refresh=False)
        bar.update(1)

    return update


def _rewrite_in_order(path: Path, records: list[dict[str, Any]]) -> None:
    """Rewrite the (finish-ordered) trajectories file in episode order, atomically."""
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(record_line(r) for r in records), encoding="utf-8")
    os.replace(tmp, path)
