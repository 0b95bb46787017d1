"""Which bridge serves a tokenizer: its family's renderer, else its chat template.

``renderer=None`` finds the family (:func:`ors_gym.families.detect`: the hub
name, else the tokenizer's chat template and special tokens) and uses the
family's ``renderers`` renderer, which writes and reads its tokens; a family no
renderer serves here (gpt-oss without harmony's vocabulary files, DeepSeek
V3.1) goes through its chat template with the family's text parser. Where no
family can be told, the chat template with Hermes-style parsing, said once at
WARNING. A known family is never read by another family's rules in silence.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ors_gym.families import DEFAULT, detect, family
from ors_gym.tokens._renderers import RenderersBridge
from ors_gym.tokens.bridge import Bridge, TemplateBridge

__all__ = ["make_bridge"]

logger = logging.getLogger("ors_gym")

_warned: set[tuple[str, str]] = set()


def make_bridge(
    tokenizer: Any, renderer: Any, chat_template_kwargs: Mapping[str, Any] | None
) -> Bridge:
    """``renderer``: None (the tokenizer's family, found), ``"template"`` (its chat
    template, read by its family's rules), a renderers name/config/Renderer, or a
    :class:`~ors_gym.tokens.Bridge`."""
    if isinstance(renderer, Bridge) and not _is_renderers_object(renderer):
        return renderer
    kwargs = dict(chat_template_kwargs or {})
    found = detect(tokenizer)
    if renderer is None or renderer == "template":
        name = found.family
        if name is None:
            _warn_once(
                tokenizer,
                f"cannot tell the model family of tokenizer {_name(tokenizer)!r} "
                f"({found.how}): reading its completions as Hermes-style "
                '<tool_call>{"name": ..., "arguments": ...}</tool_call> calls with <think> '
                "reasoning; pass renderer=<family> (e.g. 'qwen3.5', 'glm-4.5', 'gpt-oss') "
                "if the model writes another format",
            )
            return TemplateBridge(tokenizer, kwargs, family=DEFAULT)
        fam = family(name)
        if renderer == "template" or fam.renderer is None:
            return TemplateBridge(tokenizer, kwargs, family=_text_or_refuse(name))
        return _renderers_or_template(tokenizer, fam.renderer, kwargs, how=found.how)
    if isinstance(renderer, str):
        asked = family(renderer)
        if found.family is not None and family(found.family).text != asked.text:
            _warn_once(
                tokenizer,
                f"renderer={renderer!r} reads {asked.name} completions, but tokenizer "
                f"{_name(tokenizer)!r} looks like {found.family} ({found.how}); its calls "
                "will be read by the renderer you asked for",
            )
        if asked.renderer is None:
            return TemplateBridge(tokenizer, kwargs, family=_text_or_refuse(asked.name))
        return _renderers_or_template(tokenizer, asked.renderer, kwargs, how="renderer=")
    return RenderersBridge(tokenizer, renderer, kwargs)


def _renderers_or_template(
    tokenizer: Any, name: str, kwargs: dict[str, Any], *, how: str
) -> Bridge:
    """The family's renderers renderer; its chat template and text parser where the
    renderer cannot be built here (say, it loads files from the network)."""
    try:
        return RenderersBridge(tokenizer, name, kwargs)
    except (TypeError, ValueError) as exc:
        if "chat_template_kwargs" in str(exc) or "Unsupported" in str(exc):
            raise ValueError(
                f"chat_template_kwargs {sorted(kwargs)} are not taken by the {name!r} "
                f"renderer: {exc}"
            ) from exc
        error: Exception = exc
    except Exception as exc:  # renderers' own loading failures (files, network)
        error = exc
    fam = family(name)
    if fam.text is None:
        raise ValueError(
            f"the {name!r} renderer cannot be built for tokenizer {_name(tokenizer)!r} "
            f"({type(error).__name__}: {error}) and no other reader of its format exists"
        ) from error
    _warn_once(
        tokenizer,
        f"the {name!r} renderer (found by {how}) cannot be built here "
        f"({type(error).__name__}: {error}); using the tokenizer's chat template with the "
        f"{fam.text!r} parser instead",
    )
    return TemplateBridge(tokenizer, kwargs, family=name)


def _text_or_refuse(name: str) -> str:
    if family(name).text is None:
        raise ValueError(
            f"the {name!r} family is read only by its renderers renderer, not by the chat "
            f"template: pass renderer={name!r}"
        )
    return name


def _is_renderers_object(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "renderers"


def _name(tokenizer: Any) -> str:
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)


def _warn_once(tokenizer: Any, message: str) -> None:
    key = (_name(tokenizer), message)
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)
