"""Which bridge serves a tokenizer: its family's renderer, else its chat template.

``renderer=None`` finds the family (:func:`ors_gym.families.detect`: the hub
name, else the tokenizer's chat template) and uses the family's ``renderers``
renderer, which writes and reads its tokens, where it renders prompts exactly as
the tokenizer's own template does; elsewhere (another revision, a template of its
own) and for a family no renderer serves here (gpt-oss without harmony's
vocabulary files, DeepSeek V3.1) the chat template renders and the family's wire
format reads. Where no family can be told, the chat template with Hermes-style
parsing, said once at WARNING. A known family is never read by another family's
rules in silence. The choice is made once per tokenizer (weakly held), chat
template, ``renderer`` name and template arguments: later calls build the bridge
chosen without detecting or probing again (each call its own bridge). With a
vision model's processor the family's multimodal renderer is built with it (or
Qwen2.5-VL's template expands its images), chosen each time: the processor holds
the tokenizer the memo keys weakly, and a text choice must never serve it.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ors_gym.families import DEFAULT, Family, detect, family, warn_once
from ors_gym.tokens._renderers import RenderersBridge
from ors_gym.tokens._vision import vision_bridge
from ors_gym.tokens.bridge import _PROBE_TOOLS, Bridge, TemplateBridge

__all__ = ["make_bridge"]

@dataclass(frozen=True)
class _Choice:
    """What was chosen for a tokenizer, without the tokenizer (a cached bridge would hold
    it, and so keep its weak key alive): a renderers name, or the template's family and
    the end-of-turn ids its probe read."""

    renderer: str | None
    family: str | None = None
    ends: tuple[int, frozenset[int]] | None = None


#: The choices made, per tokenizer: (renderer name, template arguments, template) -> choice.
_CHOSEN: weakref.WeakKeyDictionary[Any, dict[tuple[str, str, int], _Choice]] = (
    weakref.WeakKeyDictionary()
)


def make_bridge(
    tokenizer: Any,
    renderer: Any,
    chat_template_kwargs: Mapping[str, Any] | None,
    processor: Any = None,
) -> Bridge:
    """``renderer``: None (the tokenizer's family, found), ``"template"`` (its chat
    template, read by its family's rules), a renderers name/config/Renderer, or a
    :class:`~ors_gym.tokens.Bridge`. ``processor``: a vision model's processor, for the
    family's multimodal renderer (:func:`ors_gym.tokens._vision.vision_bridge`)."""
    if isinstance(renderer, Bridge) and not _is_renderers_object(renderer):
        return renderer
    kwargs = dict(chat_template_kwargs or {})
    if processor is not None:  # not memoised: the processor holds the tokenizer it would key
        return vision_bridge(tokenizer, processor, renderer, kwargs)
    if renderer is not None and not isinstance(renderer, str):  # a renderers config/Renderer
        return _renderer_bridge(tokenizer, renderer, kwargs)
    template = getattr(tokenizer, "chat_template", None)
    key = (renderer or "", repr(sorted(kwargs.items())), hash(repr(template)))
    try:
        chosen = _CHOSEN.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced: chosen each time
        return _choose(tokenizer, renderer, kwargs)
    choice = chosen.get(key)
    if choice is not None:
        if choice.renderer is not None:
            return _renderer_bridge(tokenizer, choice.renderer, kwargs)
        assert choice.family is not None and choice.ends is not None
        return TemplateBridge._known(tokenizer, kwargs, choice.family, choice.ends)
    bridge = _choose(tokenizer, renderer, kwargs)
    if isinstance(bridge, TemplateBridge):
        chosen[key] = _Choice(None, bridge.family.name, (bridge.end_of_turn, bridge.stops))
    elif isinstance(bridge, RenderersBridge):
        chosen[key] = _Choice(bridge.name.removeprefix("renderers:"))
    return bridge


def _choose(tokenizer: Any, renderer: str | None, kwargs: dict[str, Any]) -> Bridge:
    """The bridge for a renderer name, ``"template"`` or None (the family found)."""
    found = detect(tokenizer)
    if renderer is None or renderer == "template":
        if found.family is None:
            warn_once(
                f"cannot tell the model family of tokenizer {_name(tokenizer)!r} "
                f"({found.how}): reading its completions as Hermes-style "
                '<tool_call>{"name": ..., "arguments": ...}</tool_call> calls with <think> '
                "reasoning; pass renderer=<family> (e.g. 'qwen3.5', 'glm-4.5', 'gpt-oss') "
                "if the model writes another format",
            )
        fam, how = family(found.family or DEFAULT), found.how
    else:
        fam, how = family(renderer), "renderer="
        if found.family is not None and family(found.family).format != fam.format:
            warn_once(
                f"renderer={renderer!r} reads {fam.name} completions, but tokenizer "
                f"{_name(tokenizer)!r} looks like {found.family} ({found.how}); its calls "
                "will be read by the renderer you asked for",
            )
    if renderer == "template" or fam.renderer is None:
        return TemplateBridge(tokenizer, kwargs, family=fam.name)
    try:
        bridge = _renderer_bridge(tokenizer, fam.renderer, kwargs)
    except Exception as exc:  # bad arguments, or renderers' own loading failures (network)
        said = str(exc)
        if isinstance(exc, TypeError | ValueError) and (
            "chat_template_kwargs" in said or "Unsupported" in said
        ):
            raise ValueError(
                f"chat_template_kwargs {sorted(kwargs)} are not taken by the {fam.renderer!r} "
                f"renderer: {exc}"
            ) from exc
        return _fallback(tokenizer, kwargs, fam, f"the {fam.renderer!r} renderer (found by "
                         f"{how}) cannot be built here ({type(exc).__name__}: {exc})", exc)
    if renderer is None and fam.format is not None and not _same_prompt(bridge, tokenizer,
                                                                        kwargs):
        return _fallback(tokenizer, kwargs, fam, (
            f"tokenizer {_name(tokenizer)!r} is read as {fam.name} ({how}), but its chat "
            f"template renders a prompt otherwise than renderers' {fam.renderer!r} renderer "
            "(another revision, or a template of its own)"), bridge)
    return bridge


def _renderer_bridge(tokenizer: Any, renderer: Any, kwargs: dict[str, Any]) -> RenderersBridge:
    """A renderers renderer (name, config or instance) as a bridge, for a text model."""
    return RenderersBridge(tokenizer, renderer, kwargs)


def _fallback(
    tokenizer: Any, kwargs: dict[str, Any], fam: Family, why: str,
    instead: Bridge | Exception,
) -> Bridge:
    """The tokenizer's own template, read by the family's format, where its renderer cannot
    serve (``why``, said once at WARNING); where the template cannot serve either, the
    renderer built (``instead``), or the renderer's failure named."""
    if fam.format is None:
        assert isinstance(instead, Exception)
        raise ValueError(
            f"{why}, and no other reader of the {fam.name!r} format exists"
        ) from instead
    try:
        own = TemplateBridge(tokenizer, kwargs, family=fam.name)
    except ValueError as exc:
        if isinstance(instead, Exception):
            raise
        warn_once(f"{why}; its template cannot bridge a turn ({exc}), so the renderer renders")
        return instead
    warn_once(
        f"{why}: rendering with the tokenizer's chat template and reading completions by "
        f"the {fam.format!r} rules"
    )
    return own


#: The prompts a renderer must render exactly as the tokenizer's own template does: with a
#: system prompt and without one (a template may write a default), a user turn, a tool.
_PROBES = (
    ({"role": "user", "content": "pong"},),
    ({"role": "system", "content": "ping"}, {"role": "user", "content": "pong"}),
)


def _same_prompt(bridge: RenderersBridge, tokenizer: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the renderer renders prompts as the tokenizer's own chat template does."""
    for probe in _PROBES:
        messages, tools = [dict(m) for m in probe], [dict(t) for t in _PROBE_TOOLS]
        try:
            want = tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=True, **kwargs
            )
            got = tokenizer.decode(bridge.prompt(messages, tools), skip_special_tokens=False)
        except Exception:  # a template or renderer that refuses the probe: no proof
            return False
        if got != want:
            return False
    return True


def _is_renderers_object(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "renderers"


def _name(tokenizer: Any) -> str:
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
