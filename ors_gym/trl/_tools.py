"""Python functions generated from ORS tool schemas, for TRL's tool discovery.

TRL offers every public function of an environment class to the model as a
tool, and reads each one's schema back from its type hints and Google-style
docstring (``transformers.utils.get_json_schema``). So each ORS tool becomes a
function with a real ``inspect`` signature (keyword-only parameters, typed from
the JSON schema), a docstring with one ``Args:`` line per parameter, and the
tool's own name as ``__name__`` (TRL dispatches calls by it). Calls are checked
against the signature, so a wrong argument fails as a Python call would.

JSON-schema features a Python type hint cannot carry (bounds, patterns, nested
object properties) are not part of the generated schema; the server still
enforces them and answers a bad call with an error the model reads.
"""

from __future__ import annotations

import inspect
import keyword
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union

logger = logging.getLogger("ors_gym")

__all__ = ["attribute_name", "tool_function"]

_JSON_TO_PY: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def python_type(schema: Mapping[str, Any]) -> Any:
    """The type hint whose ``get_json_schema`` rendering matches ``schema`` best."""
    if schema.get("enum"):
        return Literal[tuple(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        options = [python_type({**schema, "type": k}) for k in kind]
        return Union[tuple(options)] if len(options) > 1 else options[0]  # noqa: UP007
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, Mapping) and items:
            return list[python_type(items)]  # type: ignore[misc]
        return list
    if kind == "null":
        return type(None)
    if isinstance(kind, str) and kind in _JSON_TO_PY:
        return _JSON_TO_PY[kind]
    for key in ("anyOf", "oneOf"):
        options = [python_type(o) for o in schema.get(key) or [] if isinstance(o, Mapping)]
        if options:
            return Union[tuple(options)] if len(options) > 1 else options[0]  # noqa: UP007
    return Any


def _one_line(text: str) -> str:
    return " ".join(text.split())


def tool_function(
    name: str,
    description: str | None,
    schema: Mapping[str, Any] | None,
    call: Callable[[Any, str, dict[str, Any]], Any],
) -> Callable[..., Any] | None:
    """A method ``(self, *, <schema's properties>)`` that runs ``call(self, name, arguments)``.

    Only the arguments given are sent (the server applies its own defaults).
    None (with a WARNING) when a parameter name cannot be a Python parameter.
    """
    schema = schema or {}
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    first = "self" if "self" not in properties else "self_"
    parameters = [inspect.Parameter(first, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    doc_args: list[str] = []
    for pname, pschema in properties.items():
        if not _IDENTIFIER.match(pname) or keyword.iskeyword(pname):
            logger.warning(
                "ors_gym.trl: tool %r is not offered to the model: its parameter %r is not a "
                "valid Python name; rename the parameter in the environment",
                name,
                pname,
            )
            return None
        pschema = pschema if isinstance(pschema, Mapping) else {}
        hint = python_type(pschema)
        default = inspect.Parameter.empty if pname in required else pschema.get("default")
        kind = inspect.Parameter.KEYWORD_ONLY
        parameters.append(inspect.Parameter(pname, kind, default=default, annotation=hint))
        annotations[pname] = hint
        text = pschema.get("description") or pschema.get("title") or pname
        doc_args.append(f"    {pname}: {_one_line(str(text))}")
    signature = inspect.Signature(parameters)

    accepted = ", ".join(properties) or "no arguments"

    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"tool {name!r}: {exc}; it takes {accepted}") from None
        arguments = dict(bound.arguments)
        self = arguments.pop(first)
        return call(self, name, arguments)

    summary = (description or "").strip() or f"Call the {name} tool."
    tool.__doc__ = summary + ("\n\nArgs:\n" + "\n".join(doc_args) if doc_args else "")
    tool.__name__ = name
    tool.__qualname__ = name
    tool.__signature__ = signature  # type: ignore[attr-defined]
    tool.__annotations__ = annotations
    return tool


def attribute_name(tool_name: str, taken: set[str]) -> str:
    """The class attribute a tool is bound to: its name where Python and TRL allow it.

    TRL hides attributes starting with ``_`` and reserves ``reset`` and
    ``get_reward``; such names (and non-identifiers) get a ``tool_`` prefix.
    The model still sees the tool's own name (the function's ``__name__``).
    """
    base = tool_name
    if not _IDENTIFIER.match(base) or keyword.iskeyword(base) or base.startswith("_"):
        base = "tool_" + re.sub(r"\W", "_", base).lstrip("_")
    while base in taken:
        base = "tool_" + base
    return base
