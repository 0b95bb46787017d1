"""The ORS wire format as pydantic models, in one place.

Every message a server sends or accepts is modelled here; backends parse into
these and the Gym adapter reads only these. Models ignore unknown fields (a
newer server may add some) and default the optional fields older servers omit;
a payload that does not fit raises :class:`~ors_gym.errors.OrsProtocolError`
through :func:`parse`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ors_gym.errors import OrsProtocolError

__all__ = [
    "Block",
    "CallResult",
    "ImageBlock",
    "ListToolsOutput",
    "Message",
    "MessageBlock",
    "ReasoningBlock",
    "RunToolError",
    "RunToolSuccess",
    "Split",
    "TerminalToolSpec",
    "TextBlock",
    "ToolCallBlock",
    "ToolOutput",
    "ToolResultBlock",
    "ToolSpec",
    "check_secrets",
    "parse",
]

JSONObject = dict[str, Any]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextBlock(_Model):
    """A piece of text in a prompt or tool result."""

    type: Literal["text"] = "text"
    text: str
    detail: JSONObject | None = None


class ImageBlock(_Model):
    """A base64-encoded image; decoded to pixels only by ``observations``."""

    type: Literal["image"] = "image"
    data: str
    mimeType: str = "image/png"  # the wire name
    detail: JSONObject | None = None


class ReasoningBlock(_Model):
    """A reasoning segment of an assistant turn (``/messages`` only)."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    signature: str | None = None
    detail: JSONObject | None = None


class ToolCallBlock(_Model):
    """A tool invocation inside an assistant turn (``/messages`` only)."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    input: JSONObject = Field(default_factory=dict)
    detail: JSONObject | None = None


Block = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResultBlock(_Model):
    """A tool result inside a user turn, matched to a call by ``tool_call_id``."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    blocks: list[Block] = Field(default_factory=list)
    is_error: bool = False
    detail: JSONObject | None = None


MessageBlock = Annotated[
    TextBlock | ImageBlock | ReasoningBlock | ToolCallBlock | ToolResultBlock,
    Field(discriminator="type"),
]


class Message(_Model):
    """One role-tagged turn of a conversation (``/messages``)."""

    role: Literal["system", "user", "assistant"]
    blocks: list[MessageBlock]
    detail: JSONObject | None = None


class ToolSpec(_Model):
    """A tool the agent may call; ``input_schema`` is a JSON Schema or None."""

    name: str
    description: str = ""
    input_schema: JSONObject | None = None


class TerminalToolSpec(_Model):
    """The hidden tool a plain assistant message is routed into.

    ``arg`` names its single input field, or is None for a tool that takes no
    input and grades from the environment's state.
    """

    name: str
    arg: str | None = None
    description: str = ""


class ListToolsOutput(_Model):
    """The answer of ``/tools`` and ``/task_tools``; old servers omit the last three."""

    tools: list[ToolSpec]
    terminal_tool: TerminalToolSpec | None = None
    supports_score_group: bool = False
    message_block_types: list[str] = Field(default_factory=lambda: ["text", "image"])

    def tool(self, name: str) -> ToolSpec | None:
        """The listed tool called ``name``, or None."""
        for spec in self.tools:
            if spec.name == name:
                return spec
        return None


class ToolOutput(_Model):
    """What one tool call produced: blocks, reward (None = no signal), finished."""

    blocks: list[Block] = Field(default_factory=list)
    metadata: JSONObject | None = None
    reward: float | None = None
    finished: bool = False


class RunToolSuccess(_Model):
    """A call that ran: ``ok`` is true and ``output`` holds the ToolOutput."""

    ok: Literal[True] = True
    output: ToolOutput


class RunToolError(_Model):
    """An agent mistake the server refused to run (unknown tool, bad input, ...).

    ``reason`` is one of ``not_found``, ``name_collision``, ``input_validation``,
    ``episode_finished``; older servers omit it.
    """

    ok: Literal[False] = False
    error: str
    reason: str | None = None


CallResult = Annotated[RunToolSuccess | RunToolError, Field(discriminator="ok")]


class Split(_Model):
    """A named task split; ``type`` is train, validation or test."""

    name: str
    type: str = "validation"


class GroupScore(_Model):
    """One candidate's score from ``/score_group``."""

    reward: float
    metadata: JSONObject | None = None


def check_secrets(secrets: Mapping[str, str] | None) -> dict[str, str]:
    """``secrets`` as a plain dict, after checking it maps str names to str values."""
    plain: dict[str, str] = {}
    for key, value in (secrets or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                "secrets must map str names to str values, e.g. {'OPENAI_API_KEY': 'sk-...'}; "
                f"got a {type(value).__name__} value for a {type(key).__name__} key"
            )
        plain[key] = value
    return plain


_T = TypeVar("_T")
_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def parse(kind: Any, payload: Any, *, what: str, where: str = "") -> Any:
    """Validate ``payload`` as ``kind`` or raise :class:`OrsProtocolError`.

    ``what`` names the message (``"/tools answer"``) and ``where`` the server
    or environment, so the error says which answer was malformed.
    """
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _ADAPTERS[kind] = TypeAdapter(kind)
    try:
        return adapter.validate_python(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "<root>"
        raise OrsProtocolError(
            f"malformed {what}: {first.get('msg')} at {loc} "
            f"(got {_preview(payload)}). The server does not speak the ORS format "
            "ors_gym expects; check the URL points at an ORS server and its SDK version.",
            server=where or None,
        ) from None


def _preview(payload: Any, limit: int = 120) -> str:
    text = repr(payload) if not isinstance(payload, Mapping) else repr(dict(payload))
    return text if len(text) <= limit else text[: limit - 3] + "..."
