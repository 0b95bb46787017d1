"""The ``renderers`` library as a bridge (the ``tokens`` extra).

``renderers`` (PrimeIntellect) renders a model family's conversations in Python,
token for token as its chat template does; its ``bridge_to_next_turn`` extends
the previous ids with a new turn's without touching them (None where it cannot
prove that), and its ``parse_response`` reads sampled ids by the family's own
rules. One renderer so writes and reads a family's tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ors_gym.actions import AssistantTurn, ToolCall
from ors_gym.errors import OrsDependencyError
from ors_gym.families import (
    Family,
    family,
    from_parsed_response,
    parse_text,
    warn_once,
)
from ors_gym.protocol import ReasoningBlock
from ors_gym.tokens.bridge import BackendEncoding, Messages, Tools
from ors_gym.tokens.stops import cut_at_stop

__all__ = ["RenderersBridge", "renderers_lib"]


def renderers_lib() -> Any:
    """The ``renderers`` module, or a dependency error saying how to install it."""
    try:
        import renderers
    except ImportError as exc:
        raise OrsDependencyError(
            "a renderers name or config needs the renderers library: pip install 'ors-gym[tokens]'"
        ) from exc
    return renderers


class RenderersBridge:
    """``renderer``: a renderers name (``"qwen3.5"``), config, or ``Renderer`` instance.

    ``chat_template_kwargs`` go to the renderer's config (renderers checks that the
    family's template takes them, e.g. ``enable_thinking``).
    """

    def __init__(
        self,
        tokenizer: Any,
        renderer: Any,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        processor: Any = None,
    ) -> None:
        self.tokenizer = tokenizer
        lib = renderers_lib()
        kwargs = dict(chat_template_kwargs or {})
        fast = BackendEncoding(tokenizer)  # renderers encode each piece of a turn
        if isinstance(renderer, str):
            renderer = lib.create_renderer(
                fast, lib.config_from_name(renderer), chat_template_kwargs=kwargs or None
            )
        elif isinstance(renderer, lib.BaseRendererConfig):
            renderer = lib.create_renderer(fast, renderer, chat_template_kwargs=kwargs or None)
        elif isinstance(renderer, lib.Renderer):
            if kwargs:
                raise ValueError(
                    "chat_template_kwargs cannot reach a renderers Renderer that is already "
                    "built: pass its name or config instead (renderer='qwen3.5'), or build it "
                    "with them (renderers.create_renderer(tok, config, chat_template_kwargs=...))"
                )
        else:
            raise TypeError(
                f"renderer must be None, 'template', a renderers name or config, a renderers "
                f"Renderer or an ors_gym.tokens Bridge; got {type(renderer).__name__}"
            )
        if processor is not None:  # renderers' factory takes none: the renderer, rebuilt
            renderer = _with_processor(renderer, tokenizer, processor)
        self.renderer = renderer
        config = getattr(renderer, "config", None)
        config_name = str(getattr(config, "name", type(renderer).__name__))
        self.name = f"renderers:{config_name}"
        self.family: Family = _family_or_own(config_name)
        self.multimodal = _renders_images(lib, renderer, config_name)
        self.stops = frozenset(renderer.get_stop_token_ids())
        self.multi_modal_data: Any = None

    def prompt(self, messages: Messages, tools: Tools) -> list[int]:
        rendered = self.renderer.render(
            [dict(m) for m in messages], tools=tools or None, add_generation_prompt=True
        )
        self.multi_modal_data = getattr(rendered, "multi_modal_data", None)
        return list(rendered.token_ids)

    def extend(self, previous: list[int], completion: list[int], new_messages: Messages,
               tools: Tools, turn: Mapping[str, Any] | None = None) -> list[int] | None:
        kwargs: dict[str, Any] = {"tools": tools or None}
        if self.multimodal:
            kwargs["previous_multi_modal_data"] = self.multi_modal_data
        bridged = self.renderer.bridge_to_next_turn(
            previous, completion, [dict(m) for m in new_messages], **kwargs
        )
        if bridged is None:
            return None
        ids = bridged.token_ids
        start = len(previous) + len(completion)
        if ids[: len(previous)] != previous or ids[len(previous) : start] != completion:
            return None  # the library's contract, checked: the old ids are kept verbatim
        self.multi_modal_data = getattr(bridged, "multi_modal_data", None)
        return list(ids[start:])

    def close(self, completion: list[int]) -> list[int]:
        if completion and completion[-1] in self.stops:
            return []
        return list(self.renderer.get_stop_token_ids())[:1]

    def parse(
        self, prompt: list[int], completion: list[int], tools: list[dict[str, Any]]
    ) -> AssistantTurn:
        """The completion read by the family's own parser (``parse_response``; the prompt
        tells it whether the generation prompt opened the reasoning)."""
        fam = self.family
        if fam.read_text and fam.format is not None:
            said = cut_at_stop(completion, self.stops, keep=False)
            text = self.tokenizer.decode(said, skip_special_tokens=False)
            return parse_text(fam.format, str(text), tools)
        parsed = self.renderer.parse_response(
            list(completion), tools=tools or None, prompt_ids=list(prompt)
        )
        return _read(parsed, fam, tools)


def _with_processor(renderer: Any, tokenizer: Any, processor: Any) -> Any:
    """``renderer`` rebuilt with a vision model's ``processor`` (renderers' factory takes
    none: its multimodal renderers take it as ``processor=``)."""
    try:
        return type(renderer)(tokenizer, renderer.config, processor=processor)
    except TypeError as exc:
        name = str(getattr(renderer.config, "name", renderer))
        raise ValueError(
            f"processor={type(processor).__name__} was given, but the {name!r} renderer "
            "renders text only (it takes no processor): drop processor= to show a text "
            "model a note in place of each image"
        ) from exc


def _renders_images(lib: Any, renderer: Any, name: str) -> bool:
    """Whether the renderer renders images here: it is multimodal and has a processor. A
    multimodal renderer without one renders the text note, said at WARNING (it would
    otherwise fetch a processor from the hub at the first image)."""
    from ors_gym._compat.renderers import renderer_processor

    if not lib.is_multimodal(renderer):
        return False
    if renderer_processor(renderer) is not None:
        return True
    warn_once(
        f"the {name!r} renderer renders images, but no processor was given: images reach "
        "the model as a text note; pass processor=<the model's processor> (e.g. "
        "AutoProcessor.from_pretrained(...)) to TokenEnv, AsyncTokenEnv or the batch to "
        "show them"
    )
    return False


def _family_or_own(name: str) -> Family:
    try:
        return family(name)
    except ValueError:  # a custom renderer: only it reads its format
        return Family(name, name, None)


def _read(parsed: Any, fam: Family, tools: list[dict[str, Any]]) -> AssistantTurn:
    """A renderers ``ParsedResponse`` as an :class:`AssistantTurn`: clean calls as calls,
    each malformed one as an agent error in the family's own words."""
    if fam.format is not None:
        return from_parsed_response(fam.format, parsed, tools)
    calls, errors = [], []
    for call in parsed.tool_calls:
        if str(call.status) == "ok" and call.name and isinstance(call.arguments, dict):
            calls.append(ToolCall(str(call.name), call.arguments, call.id))
        else:
            errors.append(f"could not parse tool call ({call.status}): {str(call.raw)[:200]!r}")
    reasoning = parsed.reasoning_content
    blocks = (ReasoningBlock(text=str(reasoning)),) if reasoning else ()
    return AssistantTurn(tuple(calls), str(parsed.content or ""), tuple(errors), blocks)
