"""Values in and out of the SDK: what the caller gets equals what the HTTP backend parses.

Inputs (task specs, tool arguments, score-group candidates) are copied as the
server would receive them through JSON; outputs (blocks, tool results, splits)
are built as ``ors_gym.protocol`` models straight from the SDK's objects,
without a JSON round trip.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from ors_gym import _json
from ors_gym._compat.openreward import list_splits
from ors_gym._compat.pydantic import build_unvalidated
from ors_gym.backends.local import sdk as _sdk
from ors_gym.protocol import (
    Block,
    CallResult,
    ImageBlock,
    RunToolError,
    RunToolSuccess,
    TextBlock,
    ToolOutput,
    parse,
)

__all__ = [
    "LOCATION",
    "NotJSON",
    "Refused",
    "call_result",
    "convert_split",
    "exc_detail",
    "json_in",
    "json_out",
    "model_json",
    "not_json",
    "split_names",
    "to_block",
]

#: What in-process backends name as their location in messages.
LOCATION = "in-process"

def json_in(value: Any) -> Any:
    """``value`` as the server would receive it through JSON: a plain, detached copy.

    Plain dicts, lists, str, int, float, bool and None are copied directly;
    anything else takes the exact route HttpBackend takes (``json.dumps`` with
    numpy values as lists), so the environment sees the same input either way.
    """
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                return _json_in_slow(value)
            of = type(item)  # a scalar (the usual argument) is itself, without a call
            out[key] = (
                item if of is str or of is int or of is float or of is bool or item is None
                else json_in(item)
            )
        return out
    if kind is list or kind is tuple:
        return [json_in(item) for item in value]
    return _json_in_slow(value)


def _json_in_slow(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=_json.default))
    except (TypeError, ValueError) as exc:
        raise NotJSON(str(exc)) from None


class NotJSON(TypeError):
    """A value HttpBackend could not send either; the caller names which one."""


def not_json(what: str, exc: NotJSON) -> TypeError:
    return TypeError(
        f"{what} cannot be sent as JSON: {exc}. "
        "Pass only dicts, lists, str, int, float, bool and None."
    )


def json_out(value: Any) -> Any:
    """``value`` as it reads after the server's ``model_dump_json``: tuples become lists,
    mappings dicts, inf/nan None; anything else goes through pydantic's own serialiser."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if value - value == 0 else None  # inf and nan serialise as null
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                return _json_out_slow(value)
            of = type(item)  # a scalar other than a float is itself, without a call
            out[key] = (
                item if of is str or of is int or of is bool or item is None else json_out(item)
            )
        return out
    if kind is list or kind is tuple:
        return [json_out(item) for item in value]
    return _json_out_slow(value)


def _json_out_slow(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, inf_nan_mode="null")


def to_block(block: Any) -> Any:
    """An SDK TextBlock/ImageBlock as the ors_gym one; anything else via its JSON form."""
    kind = type(block)
    if kind is _sdk.sdk.TextBlock:
        detail = block.detail
        return build_unvalidated(
            TextBlock,
            {
                "type": "text",
                "text": block.text,
                "detail": None if detail is None else json_out(detail),
            },
        )
    if kind is _sdk.sdk.ImageBlock:
        detail = block.detail
        return build_unvalidated(
            ImageBlock,
            {
                "type": "image",
                "data": block.data,
                "mimeType": block.mimeType,
                "detail": None if detail is None else json_out(detail),
            },
        )
    data = block.model_dump(mode="json") if isinstance(block, BaseModel) else json_out(block)
    return parse(Block, data, what="block", where=LOCATION)


def _reward(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if value - value == 0 else None


def call_result(result: Any) -> CallResult:
    """The SDK's RunToolSuccess/RunToolError as the ors_gym model HttpBackend would return."""
    if result.ok:
        out = result.output
        metadata = out.metadata
        reward = out.reward
        if type(reward) is not float or reward - reward != 0:
            reward = _reward(reward)
        return build_unvalidated(
            RunToolSuccess,
            {
                "ok": True,
                "output": build_unvalidated(
                    ToolOutput,
                    {
                        "blocks": list(map(to_block, out.blocks)),
                        "metadata": None if metadata is None else json_out(metadata),
                        "reward": reward,
                        "finished": bool(out.finished),
                    },
                ),
            },
        )
    return build_unvalidated(
        RunToolError, {"ok": False, "error": result.error, "reason": result.reason}
    )


def model_json(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else json_out(value)


def convert_split(split: Any) -> dict[str, Any]:
    """A split as the server lists it (its ``_convert_to_split``)."""
    if isinstance(split, BaseModel):
        return split.model_dump(mode="json")
    if split in ("train", "validation", "test"):
        return {"name": split, "type": split}
    return {"name": split, "type": "validation"}


def split_names(cls: Any) -> list[str]:
    return [s if isinstance(s, str) else s.name for s in list_splits(cls)]


def exc_detail(exc: BaseException) -> str:
    """The ``detail`` the SDK server answers a 500 with (``return_errors="exception"``)."""
    return f"{type(exc).__name__}: {exc}"


class Refused(Exception):
    """What the server answers as an HTTP error status, raised inside a coroutine."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
