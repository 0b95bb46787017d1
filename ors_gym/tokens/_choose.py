"""Which bridge serves a tokenizer: its family's renderer, else its chat template.

``renderer=None`` finds the family (:func:`ors_gym.families.detect`: the hub
name, else the tokenizer's chat template and special tokens) and uses the
family's ``renderers`` renderer, which writes and reads its tokens, where it
renders prompts exactly as the tokenizer's own template does; elsewhere (another
revision, a template of its own) and for a family no renderer serves here
(gpt-oss without harmony's vocabulary files, DeepSeek V3.1) the chat template
renders and the family's text parser reads. Where no family can be told, the
chat template with Hermes-style parsing, said once at WARNING. A known family is
never read by another family's rules in silence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ors_gym.families import DEFAULT, detect, family, warn_once
from ors_gym.tokens._images import vision_bridge
from ors_gym.tokens._renderers import RenderersBridge
from ors_gym.tokens.bridge import Bridge, TemplateBridge

__all__ = ["make_bridge"]


def make_bridge(
    tokenizer: Any,
    renderer: Any,
    chat_template_kwargs: Mapping[str, Any] | None,
    processor: Any = None,
) -> Bridge:
    """``renderer``: None (the tokenizer's family, found), ``"template"`` (its chat
    template, read by its family's rules), a renderers name/config/Renderer, or a
    :class:`~ors_gym.tokens.Bridge`. ``processor``: a vision model's processor, for the
    family's multimodal renderer (:mod:`ors_gym.tokens._images`)."""
    if isinstance(renderer, Bridge) and not _is_renderers_object(renderer):
        return renderer
    kwargs = dict(chat_template_kwargs or {})
    if processor is not None:
        return vision_bridge(tokenizer, processor, renderer, kwargs)
    found = detect(tokenizer)
    if renderer is None or renderer == "template":
        name = found.family
        if name is None:
            warn_once(
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
        bridge = _renderers_or_template(tokenizer, fam.renderer, kwargs, how=found.how)
        if isinstance(bridge, RenderersBridge) and fam.text is not None and not _same_prompt(
            bridge, tokenizer, kwargs
        ):
            return _own_template(tokenizer, kwargs, bridge, name, found.how)
        return bridge
    if isinstance(renderer, str):
        asked = family(renderer)
        if found.family is not None and family(found.family).text != asked.text:
            warn_once(
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
    warn_once(
        f"the {name!r} renderer (found by {how}) cannot be built here "
        f"({type(error).__name__}: {error}); using the tokenizer's chat template with the "
        f"{fam.text!r} parser instead",
    )
    return TemplateBridge(tokenizer, kwargs, family=name)


#: The prompts a renderer must render exactly as the tokenizer's own template does: with a
#: system prompt and without one (a template may write a default), a user turn, a tool.
_PROBES = (
    ({"role": "user", "content": "pong"},),
    ({"role": "system", "content": "ping"}, {"role": "user", "content": "pong"}),
)
_PROBE_TOOLS = ({"type": "function", "function": {
    "name": "probe", "description": "a probe", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}},)


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


def _own_template(
    tokenizer: Any, kwargs: dict[str, Any], bridge: Bridge, name: str, how: str
) -> Bridge:
    """The tokenizer's own template, read by the family's rules, where it renders otherwise
    than the family's renderer; the renderer, said, where the template cannot bridge."""
    renderer = bridge.name.removeprefix("renderers:")
    differs = (f"tokenizer {_name(tokenizer)!r} is read as {name} ({how}), but its chat "
               f"template renders a prompt otherwise than renderers' {renderer!r} renderer "
               "(another revision, or a template of its own)")
    try:
        own = TemplateBridge(tokenizer, kwargs, family=name)
    except ValueError as exc:
        warn_once(
            f"{differs}; its template cannot bridge a turn ({exc}), so the "
            "renderer renders"
        )
        return bridge
    warn_once(
        f"{differs}: rendering with the tokenizer's template and reading "
        f"completions by the {family(name).text!r} rules"
    )
    return own


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
