"""One token-level episode's bookkeeping, shared by ``TokenEnv``, ``AsyncTokenEnv`` and
``TokenBatch``.

The env I/O (``reset``, ``step``) is the caller's; this holds everything around
it: the sampled ids read once, by the model family's parser (the bridge's
``parse``), into the turn the env runs as it is, before the step; the
environment's reply turned into chat messages and bridged into ids after it
(``finish`` changes the record only once nothing can raise, so a failed step
leaves it as it was). Its rows grow only through the token engine,
:class:`ors_gym.tokens.engine.RowEngine`, as the capture gateway's do. The record
also owns an episode's end by failure (``fail_start``, ``fail``, ``end``), for a
batch whose failures stay in their episode.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym.actions import AssistantTurn
from ors_gym.errors import OrsError
from ors_gym.formats import StepExchange, exchange_messages, step_exchange
from ors_gym.protocol import Message
from ors_gym.reward_parts import add_parts, step_parts
from ors_gym.tokens import stops
from ors_gym.tokens._choose import make_bridge
from ors_gym.tokens._vision import split_processor
from ors_gym.tokens.chat import chat_messages
from ors_gym.tokens.engine import Growth, RowEngine
from ors_gym.tokens.trajectory import Trajectory

logger = logging.getLogger("ors_gym")

__all__ = ["Read", "TokenRecord", "TokenStep", "ors_core", "over_env"]

#: What ``TokenRecord.read`` gives: the sampled ids, their logprobs, text and parsed turn.
Read = tuple[list[int], list[float] | None, str, AssistantTurn]
#: A token step's result: the ids, reward, terminated, truncated and info (``Step`` in
#: :mod:`ors_gym.turn` is the Gymnasium step's, with an observation dict).
TokenStep = tuple[list[int], float, bool, bool, dict[str, Any]]


def read_action(action: Any, vocab_size: int) -> tuple[list[int], list[float] | None]:
    """(ids, logprobs) of a ``step`` action: a list of ids or ``{"ids", "logprobs"}``."""
    logprobs: Any = None
    if isinstance(action, Mapping):
        if "ids" not in action:
            raise ValueError(
                "a dict action needs 'ids' (the sampled token ids) and may have 'logprobs' "
                "and 'policy_version'; "
                f"got keys {sorted(map(str, action))}"
            )
        ids, logprobs = action["ids"], action.get("logprobs")
    else:
        ids = action
    if isinstance(ids, str):
        raise TypeError(
            "TokenEnv.step takes the sampled token ids, not text: pass list[int] (use "
            "ors_gym.wrappers.Conversation or OrsEnv for text actions)"
        )
    ids = _as_list(ids, "ids")
    out = []
    for tid in ids:
        if isinstance(tid, bool) or not isinstance(tid, int) or not 0 <= tid < vocab_size:
            raise ValueError(
                f"token id {tid!r} is not an int in [0, {vocab_size}) (the tokenizer's vocabulary)"
            )
        out.append(tid)
    if logprobs is None:
        return out, None
    lps = [float(x) for x in _as_list(logprobs, "logprobs")]
    if len(lps) != len(out):
        raise ValueError(
            f"logprobs has {len(lps)} values for {len(out)} ids: give one logprob per sampled id"
        )
    return out, lps


def read_version(action: Any) -> int | None:
    """The ``"policy_version"`` of a mapping action (the weights' version that sampled the
    turn), or None when it names none."""
    if not isinstance(action, Mapping):
        return None
    version = action.get("policy_version")
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, numbers.Integral):  # numpy ints too
        raise ValueError(
            f"policy_version must be an int (the version of the weights that sampled the "
            f"turn) or None, got {version!r}"
        )
    return int(version)


def _as_list(value: Any, what: str) -> list[Any]:
    if hasattr(value, "tolist"):  # numpy arrays, torch tensors
        value = value.tolist()
    if not isinstance(value, Sequence):
        raise TypeError(f"{what} must be a list, got {type(value).__name__}")
    return list(value)


class TokenRecord:
    """The token record of one episode and the steps that grow it."""

    def __init__(
        self,
        tokenizer: Any,
        renderer: Any,
        chat_template_kwargs: Mapping[str, Any] | None,
        *,
        max_tokens: int | None,
        system: str | None,
        processor: Any = None,
    ) -> None:
        tokenizer, processor = split_processor(tokenizer, processor)
        bridge = make_bridge(tokenizer, renderer, chat_template_kwargs, processor)
        if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
            raise ValueError(f"max_tokens must be a positive int or None, got {max_tokens!r}")
        self.tokenizer = tokenizer
        self.bridge = bridge
        self.max_tokens = max_tokens
        self.system = system
        self.vocab_size = len(tokenizer)
        self.trajectory: Trajectory | None = None
        self.rows: RowEngine | None = None  # the engine that grows the trajectory's rows
        self.steps = 0
        self.version: int | None = None  # the policy version of the turn being stepped

    # -- reset ----------------------------------------------------------------------------
    def start(
        self, opening: Sequence[Message], tools: list[dict[str, Any]], observation: Any
    ) -> list[int]:
        self.steps = 0
        messages: list[dict[str, Any]] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages += chat_messages(opening, multimodal=self.bridge.multimodal)
        traj = Trajectory(rows=[], messages=[], tools=tools, renderer=self.bridge.name,
                          images=_images(observation))
        self.rows = RowEngine(self.bridge, traj)
        row = self.rows.grow(self.rows.restart(None, messages, tools))
        self.trajectory = traj
        return list(row.prompt_ids)

    def reset_info(self, info: Mapping[str, Any], observation: Any) -> dict[str, Any]:
        """The env's reset ``info`` plus what a trainer reads at an episode's start."""
        traj = self.trajectory
        assert traj is not None
        out = dict(info)
        out.update(
            observation=observation,
            messages=list(traj.messages),
            tools=traj.tools,
            renderer=self.bridge.name,
        )
        return out

    # -- step, before the env's ---------------------------------------------------------------
    def read(self, action: Any) -> tuple[list[int], list[float] | None, str, AssistantTurn]:
        """The sampled ids, their logprobs, their text and the turn the family's parser
        reads from them, each call with an id (the next step's number is taken only when
        the action reads). The env runs that turn as it is."""
        traj = self.trajectory
        if traj is None:
            raise RuntimeError("call reset() before step()")
        if traj.done:
            raise RuntimeError(
                f"the episode has ended ({traj.stop_reason}); call reset() to start another"
            )
        self.version = read_version(action)
        ids, logprobs = read_action(action, self.vocab_size)
        turn = self.bridge.parse(traj.rows[-1].ids, ids, traj.tools)
        self.steps += 1
        return ids, logprobs, self._text(ids), turn.numbered(self.steps)

    def _text(self, ids: list[int]) -> str:
        """The completion's text up to its end-of-turn token (what the model wrote)."""
        said = stops.cut_at_stop(ids, self.bridge.stops, keep=False)
        return str(self.tokenizer.decode(said, skip_special_tokens=False))

    # -- step, after the env's ---------------------------------------------------------------
    def finish(
        self,
        ids: list[int],
        logprobs: list[float] | None,
        text: str,
        turn: AssistantTurn,
        result: tuple[Any, Any, bool, bool, dict[str, Any]],
    ) -> TokenStep:
        traj, rows = self.trajectory, self.rows
        assert traj is not None and rows is not None
        observation, reward, terminated, truncated, info = result
        exchange: StepExchange = step_exchange(turn, info)
        reply = exchange_messages(exchange)[1]
        new = chat_messages([reply], multimodal=self.bridge.multimodal)
        # Everything that may raise (the bridge, the template) runs before the record
        # changes: a step that raises leaves the record as it was.
        row = traj.rows[-1]
        message = rows.message(turn, text)
        sampled = rows.turn(ids, message)
        terminated, truncated = bool(terminated), bool(truncated)
        stop = stops.from_step(terminated, truncated, info, plain=not turn.tool_calls,
                               parse_errors=bool(turn.errors))
        growth: Growth | None = None
        if stop is None:  # the model reads on: the reply appended, else a new row
            growth = rows.follow(sampled, new, traj.tools)
            if growth is None:  # not provably append-only: a new row from the conversation
                growth = rows.restart(sampled, [*traj.messages, message, *new], traj.tools)
                assert growth.row is not None
                # a new row's prompt counts what it adds beyond the episode's first prompt
                if self.max_tokens is not None and (
                        len(growth.row.prompt_ids) - len(traj.rows[0].prompt_ids)
                        > self.max_tokens):
                    growth = None
            elif (self.max_tokens is not None and len(row.completion_ids) + len(ids)
                  + len(growth.tail) > self.max_tokens):
                growth = None
            if growth is None:
                stop, truncated = stops.MAX_TOKENS, True
        if growth is None:  # the model reads no more: only close its turn
            growth = rows.closing(sampled)
        parts = step_parts(info)
        # -- the record changes from here on; nothing below raises --
        rows.add_turn(ids, logprobs, self.version, message)
        traj.rewards.append(float(reward))
        row = rows.grow(growth)
        add_parts(traj.reward_parts, parts)
        traj.images += _images(observation)
        if growth.new_row:
            logger.debug("new token row at turn %d (history not provably kept)", traj.turns)
        if (
            stop is None
            and self.max_tokens is not None
            and len(row.completion_ids) >= self.max_tokens
        ):
            stop, truncated = stops.MAX_TOKENS, True
        traj.stop_reason = stop
        info = dict(info)
        info.update(
            exchange=exchange,
            reward_parts=parts,
            text=text,
            turn=turn,
            new_messages=new,
            stop_reason=stop,
            rows=len(traj.rows),
            observation=observation,
        )
        return row.ids, float(reward), terminated, truncated, info

    # -- an episode a failure ended -------------------------------------------------------
    def fail_start(self, exc: BaseException) -> tuple[list[int], dict[str, Any]]:
        """Record an episode whose reset failed: an empty user turn's prompt (none if the
        bridge cannot render even that), no turn, the failure's stop reason."""
        reason = stops.from_failure(exc)
        messages: list[dict[str, Any]] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": ""})
        traj = Trajectory(rows=[], messages=[], tools=[], renderer=self.bridge.name)
        self.rows = RowEngine(self.bridge, traj)
        try:
            growth = self.rows.restart(None, messages, [])
        except Exception:  # the bridge's own failure, logged by the caller
            growth = RowEngine.unrendered(messages)
        row = self.rows.grow(growth)
        self.steps = 0
        traj.stop_reason = reason
        self.trajectory = traj
        return list(row.prompt_ids), {"error": describe(exc), "stop_reason": reason}

    def fail(self, ids: list[int], logprobs: list[float] | None, text: str,
             exc: BaseException) -> TokenStep:
        """End the episode whose step raised (``finish`` left the record as it was): the
        sampled turn kept and closed, no reward, the failure's stop reason."""
        traj, rows = self.trajectory, self.rows
        assert traj is not None and rows is not None
        message = {"role": "assistant", "content": text}
        try:
            closing = rows.closing(rows.turn(ids, message))
        except Exception:  # a broken bridge: the turn stays as sampled
            closing = Growth([])
        rows.add_turn(ids, logprobs, self.version, message)
        traj.rewards.append(0.0)
        row = rows.grow(closing)
        traj.stop_reason = stops.from_failure(exc)
        info = {"error": describe(exc), "stop_reason": traj.stop_reason, "text": text}
        return row.ids, 0.0, False, True, info

    def end(self, reason: str) -> None:
        """End the episode now with ``reason`` (one of the stop reasons), if it runs."""
        if self.trajectory is not None and not self.trajectory.done:
            self.trajectory.stop_reason = reason


def describe(exc: BaseException) -> str:
    """``info["error"]``: an ORS error's own message; any other names its type too."""
    return str(exc) if isinstance(exc, OrsError) else f"{type(exc).__name__}: {exc}"


def _images(observation: Any) -> list[Any]:
    if isinstance(observation, Mapping):
        return list(observation.get("images") or ())
    return []


def over_env(env: Any, tokenizer: Any, renderer: Any, chat_template_kwargs: Any, *,
             max_tokens: int | None, system: str | None, processor: Any
             ) -> tuple[Any, TokenRecord]:
    """What ``TokenEnv`` and ``AsyncTokenEnv`` start from: the ORS env under ``env``'s
    wrappers (its messages fetched with each step) and the episode's token record."""
    core = ors_core(env)
    core.prefetch_messages = True
    record = TokenRecord(tokenizer, renderer, chat_template_kwargs, max_tokens=max_tokens,
                         system=system, processor=processor)
    return core, record


def ors_core(env: Any) -> Any:
    """The ORS env under ``env``'s wrappers, checked to have what a token episode reads."""
    core = getattr(env, "unwrapped", env)
    if not callable(getattr(core, "messages", None)) or not callable(
        getattr(core, "tools_as", None)
    ):
        raise TypeError(
            "TokenEnv needs an ORS environment (gym.make('ors/...'), OrsEnv or AsyncOrsEnv): "
            f"{type(core).__name__} has no messages() and tools_as()"
        )
    return core
