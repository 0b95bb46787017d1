"""Bridges: the ids the environment's next messages add after a sampled turn.

A bridge never sees the history as text. ``extend`` gets the previous ids and
the completion as the sampler gave them and returns only the ids to append (the
end-of-turn token when the completion was cut, the new messages, the next
generation prompt), or ``None`` when it cannot prove that the chat template's
rendering of the longer conversation extends the shorter one; the caller then
starts a new row from ``prompt(messages)``.

:class:`TemplateBridge` works with any tokenizer that has a chat template: it
renders a small fixed conversation with and without the new messages and keeps
what follows the fixed part's last end-of-turn token, after checking that the
fixed part rendered the same both times (the check a history-rewriting
template fails). The ``renderers`` library's bridges are in ``_renderers``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ors_gym.actions import AssistantTurn
from ors_gym.families import DEFAULT, FORMATS, Family, WireFormat, family, parse_text, warn_once
from ors_gym.tokens.stops import cut_at_stop

__all__ = ["Bridge", "Messages", "TemplateBridge", "Tools"]

#: A conversation as a chat template reads it, and tools in OpenAI's function format.
Messages = Sequence[Mapping[str, Any]]
Tools = list[dict[str, Any]]

# The fixed conversation: a user turn, then an assistant turn with reasoning (so that a
# template dropping earlier reasoning at a new user message shows it here too).
_DUMMY_USER = {"role": "user", "content": "ping"}
_DUMMY_ASSISTANT = {"role": "assistant", "content": "<think>\nping\n</think>\n\npong"}
_PROBE_TOOL = {"role": "tool", "tool_call_id": "call_0", "content": "pong"}


@runtime_checkable
class Bridge(Protocol):
    """What ``TokenEnv`` needs from a renderer."""

    name: str
    multimodal: bool
    family: Family
    #: The ids a sampled turn ends on (what a sampler stops at; the end-of-sequence id too).
    stops: frozenset[int]

    def prompt(self, messages: Messages, tools: Tools) -> list[int]:
        """The conversation's ids ending with the generation prompt (a row's start)."""
        ...

    def extend(self, previous: list[int], completion: list[int], new_messages: Messages,
               tools: Tools, turn: Mapping[str, Any] | None = None) -> list[int] | None:
        """The ids to append after ``previous + completion``: closing tokens, the new
        messages, the next generation prompt; None when not provably append-only.
        ``turn`` is the sampled turn as a chat message, as the family's parser read it."""
        ...

    def close(self, completion: list[int]) -> list[int]:
        """The ids that close a completion cut before its end-of-turn token ([] if not cut)."""
        ...

    def parse(
        self, prompt: list[int], completion: list[int], tools: list[dict[str, Any]]
    ) -> AssistantTurn:
        """The sampled ids (after ``prompt``, the ids they were sampled from) read as an
        assistant turn, by the family's own rules."""
        ...


class TemplateBridge:
    """A bridge from the tokenizer's own chat template, proven append-only per step.

    ``chat_template_kwargs`` go to every ``apply_chat_template`` call (e.g.
    ``{"enable_thinking": False}``). ``family`` (a :mod:`ors_gym.families` name)
    says how completions are read: its wire format's reader, and, where the format
    says so (harmony, DeepSeek, MiniMax), the tokens that end a sampled turn.
    Otherwise the end-of-turn token is read from the template (the first special
    token after an assistant turn's text); the template's rendering of a finished
    assistant turn must be its generation prompt, the turn's text, then that token,
    or no step can be bridged. A template that renders no tools is said once at
    WARNING: the model would never be shown them.
    """

    name = "template"
    multimodal = False

    def __init__(
        self,
        tokenizer: Any,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        family: str = DEFAULT,
    ) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "the tokenizer has no chat_template: set tokenizer.chat_template, or pass "
                "renderer=<a renderers name or config> (pip install 'ors-gym[tokens]')"
            )
        self._setup(tokenizer, chat_template_kwargs, family)
        self.end_of_turn, self.stops = self._read_end_of_turn()
        self._check_tools_shown()

    @classmethod
    def _known(
        cls, tokenizer: Any, chat_template_kwargs: Mapping[str, Any] | None, family: str,
        ends: tuple[int, frozenset[int]],
    ) -> TemplateBridge:
        """A bridge whose template was probed already (``ends``: its end-of-turn token and
        stop ids, as an earlier bridge over the same template read them)."""
        bridge = cls.__new__(cls)
        bridge._setup(tokenizer, chat_template_kwargs, family)
        bridge.end_of_turn, bridge.stops = ends
        return bridge

    def _setup(
        self, tokenizer: Any, chat_template_kwargs: Mapping[str, Any] | None, family: str
    ) -> None:
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        self.family = _text_family(family)
        assert self.family.format is not None
        self.format: WireFormat = FORMATS[self.family.format]
        self._fixed: dict[str, _Fixed | None] = {}
        self._last_fixed: tuple[list[dict[str, Any]], _Fixed | None] | None = None

    # -- the Bridge protocol -----------------------------------------------------------------
    def prompt(self, messages: Messages, tools: Tools) -> list[int]:
        return self._ids(list(messages), tools, generation=True)

    def extend(self, previous: list[int], completion: list[int], new_messages: Messages,
               tools: Tools, turn: Mapping[str, Any] | None = None) -> list[int] | None:
        ends = self.format.ends
        if turn is not None and ends is not None:
            return self._extend_after(turn, completion, new_messages, tools, ends)
        fixed = self._fixed_part(tools)
        if fixed is None:
            return None
        text = self._text([_DUMMY_USER, _DUMMY_ASSISTANT, *new_messages], tools, generation=True)
        if not text.startswith(fixed.text):  # the new messages changed earlier turns
            return None
        if fixed.split_ok:  # only the new part is tokenized
            added = self._encode(text[len(fixed.text) :])
        else:
            ids = self._encode(text)
            if ids[: len(fixed.ids)] != fixed.ids:
                return None
            added = ids[len(fixed.ids) :]
        return [*self.close(completion), *added]

    def close(self, completion: list[int]) -> list[int]:
        if completion and completion[-1] in self.stops:
            return []
        return [self.end_of_turn]

    def _extend_after(
        self,
        turn: Mapping[str, Any],
        completion: list[int],
        new_messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]],
        ends: tuple[str, ...],
    ) -> list[int] | None:
        """For a family whose turns end in tokens of their own (harmony's ``<|call|>``):
        the template renders the sampled turn itself as history, with and without the new
        messages; what follows the turn's last end token is appended."""
        history = [_DUMMY_USER, dict(turn)]
        try:
            head = self._text(history, tools, generation=False)
            whole = self._text([*history, *new_messages], tools, generation=True)
        except Exception:  # a template that refuses this history: a new row instead
            return None
        cut = max((head.rfind(end) + len(end) for end in ends if end in head), default=-1)
        if cut < 0 or not whole.startswith(head[:cut]):
            return None
        return [*self.close(completion), *self._encode(whole[cut:])]

    def parse(
        self, prompt: list[int], completion: list[int], tools: list[dict[str, Any]]
    ) -> AssistantTurn:
        said = cut_at_stop(completion, self.stops, keep=False)
        text = str(self.tokenizer.decode(said, skip_special_tokens=False))
        tail = str(self.tokenizer.decode(prompt[-4:], skip_special_tokens=False)).rstrip()
        return parse_text(self.format.name, text, tools,
                          reasoning_prefilled=tail.endswith("<think>"))

    # -- internals ---------------------------------------------------------------------------
    def _text(self, messages: list[Any], tools: list[dict[str, Any]], *, generation: bool) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                messages,
                tools=tools or None,
                tokenize=False,
                add_generation_prompt=generation,
                **self.kwargs,
            )
        )

    def _encode(self, text: str) -> list[int]:
        backend = _plain_backend(self.tokenizer)
        if backend is not None:  # the same ids, without transformers' wrapping per call
            return list(backend.encode(text, add_special_tokens=False).ids)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _ids(
        self, messages: list[Any], tools: list[dict[str, Any]], *, generation: bool
    ) -> list[int]:
        return self._encode(self._text(messages, tools, generation=generation))

    def _read_end_of_turn(self) -> tuple[int, frozenset[int]]:
        """The end-of-turn id: the first special token after the fixed assistant turn's text."""
        eos = getattr(self.tokenizer, "eos_token_id", None)
        fmt = self.format
        if fmt.ends is not None:  # the format says how its turns end
            ids = self.tokenizer.convert_tokens_to_ids
            stops = {ids(t) for t in fmt.stops} | ({eos} if isinstance(eos, int) else set())
            return ids(_closer(fmt)), frozenset(stops)
        special = _special_ids(self.tokenizer)
        head = self._probe([_DUMMY_USER], generation=True)
        whole = self._probe([_DUMMY_USER, _DUMMY_ASSISTANT, _PROBE_TOOL], generation=False)
        for tid in whole[len(head) :]:
            if tid in special:
                return tid, frozenset({tid} | ({eos} if isinstance(eos, int) else set()))
        raise ValueError(
            "cannot find the chat template's end-of-turn token (no special token follows an "
            "assistant turn): pass renderer=<a renderers name or config> instead"
        )

    def _check_tools_shown(self) -> None:
        """Say once at WARNING when the template renders no tools (DeepSeek V3.1's, whose
        model card puts them in the system prompt): the model would call tools it was
        never shown."""
        try:
            bare = self._text([_DUMMY_USER], [], generation=True)
            shown = self._text([_DUMMY_USER], [dict(t) for t in _PROBE_TOOLS],
                               generation=True)
        except Exception:  # a template that refuses the probe says so at its first prompt
            return
        if bare == shown:
            name = getattr(self.tokenizer, "name_or_path", "") or type(self.tokenizer).__name__
            warn_once(
                f"the chat template of tokenizer {name!r} ({self.family.name}) renders no "
                "tools: the model is never shown the environment's tools. Give them in the "
                "system prompt, e.g. TokenEnv(env, tokenizer, system=ors_gym.families."
                f"tools_prompt(env.unwrapped.tools_as('openai'), {self.family.name!r}))"
            )

    def _probe(self, messages: list[Any], *, generation: bool) -> list[int]:
        """The probe conversation's ids; a template that refuses it (some raise on a tool
        message they did not expect) is retried without the tool message, then named."""
        try:
            return self._ids(messages, [], generation=generation)
        except Exception as exc:  # jinja raises its own errors and raise_exception()'s
            if messages[-1] is _PROBE_TOOL:
                shorter = [*messages[:-1], {"role": "user", "content": "ping"}]
                try:
                    return self._ids(shorter, [], generation=generation)
                except Exception:
                    pass
            raise ValueError(
                f"the tokenizer's chat template cannot render a plain conversation "
                f"({type(exc).__name__}: {exc}); pass renderer=<a renderers name or config> "
                "or a Bridge of your own"
            ) from exc

    def _fixed_part(self, tools: list[dict[str, Any]]) -> _Fixed | None:
        """The fixed conversation up to its assistant turn's end, as history; None unless
        that history is the generation prompt plus the turn's text (what sampling gives)."""
        last = self._last_fixed
        if last is not None and last[0] is tools:  # an episode's own list, turn after turn
            return last[1]
        key = repr(tools)
        if key not in self._fixed:
            if len(self._fixed) >= _FIXED_KEPT:  # a bridge shared by many tool lists
                self._fixed.pop(next(iter(self._fixed)))
            self._fixed[key] = self._read_fixed(tools)
        self._last_fixed = (tools, self._fixed[key])
        return self._fixed[key]

    def _read_fixed(self, tools: list[dict[str, Any]]) -> _Fixed | None:
        try:
            head = self._ids([_DUMMY_USER], tools, generation=True)
            text = self._text(
                [_DUMMY_USER, _DUMMY_ASSISTANT, _PROBE_TOOL], tools, generation=False
            )
        except Exception:  # a template that refuses the probe: no step is bridged
            return None
        whole = self._encode(text)
        end = next(
            (i for i in range(len(head), len(whole)) if whole[i] == self.end_of_turn), None
        )
        if end is None:
            return None
        fixed = whole[: end + 1]
        sampled = self._encode(str(_DUMMY_ASSISTANT["content"]))
        if fixed != [*head, *sampled, self.end_of_turn]:
            return None
        # The fixed part's text, and whether the ids after it can be tokenized on their own
        # (they can when the end-of-turn token splits the text, as added tokens do).
        eot = str(self.tokenizer.convert_ids_to_tokens(self.end_of_turn))
        cut = text.find(eot, len(self.tokenizer.decode(head, skip_special_tokens=False)))
        fixed_text = text[: cut + len(eot)] if cut >= 0 else ""
        split_ok = (
            bool(fixed_text)
            and self._encode(fixed_text) == fixed
            and ([*fixed, *self._encode(text[len(fixed_text) :])] == whole)
        )
        return _Fixed(fixed_text if split_ok else "", fixed, split_ok)


@dataclass(frozen=True)
class _Fixed:
    """The fixed conversation's history: its text, its ids, and whether what follows the
    text tokenizes on its own (then only the new part is tokenized each step)."""

    text: str
    ids: list[int]
    split_ok: bool


#: Tool lists whose fixed conversation a template bridge keeps (the oldest goes first).
_FIXED_KEPT = 64


def _closer(fmt: WireFormat) -> str:
    """The token that closes a completion cut before its end: where a turn's history ends
    in a token the turn does not sample (harmony's ``<|end|>``), that one."""
    assert fmt.ends is not None
    own = [end for end in fmt.ends if end not in fmt.stops]
    return own[0] if own else fmt.stops[0]


#: A tool the probe of a template's tool rendering offers.
_PROBE_TOOLS = ({"type": "function", "function": {
    "name": "probe", "description": "a probe", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}},)


def _text_family(name: str) -> Family:
    """The family ``name``, checked to have a text parser (the template path parses text)."""
    fam = family(name)
    if fam.format is None:
        raise ValueError(
            f"the {name!r} family is read only by its renderers renderer: pass "
            f"renderer={name!r} rather than the chat template"
        )
    return fam


def _plain_backend(tokenizer: Any) -> Any:
    """A fast tokenizer's ``tokenizers.Tokenizer`` when calling it gives what calling the
    tokenizer (no truncation, no padding, special tokens kept whole) gives; else None."""
    if not getattr(tokenizer, "is_fast", False) or getattr(tokenizer, "split_special_tokens",
                                                           False):
        return None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if (backend is None or backend.truncation is not None or backend.padding is not None
            or backend.encode_special_tokens):
        return None
    return backend


class BackendEncoding:
    """``tokenizer`` for a renderer: its ``encode(text, add_special_tokens=False)`` and
    its call on one text without special tokens (ids, and offsets if asked: what
    renderers do for every piece of a turn) go straight to a fast tokenizer's own
    ``tokenizers.Tokenizer`` when that gives the same ids (see ``_plain_backend``); the
    call then answers a plain dict of ``input_ids``, ``attention_mask`` and
    ``offset_mapping``. Everything else is the tokenizer's own."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # renderers' call: (text, add_special_tokens=False, return_offsets_mapping=True)
        backend = None
        if (len(args) == 1 and isinstance(args[0], str) and kwargs.get("add_special_tokens")
                is False and set(kwargs) <= {"add_special_tokens", "return_offsets_mapping"}):
            backend = _plain_backend(self.tokenizer)
        if backend is None:
            return self.tokenizer(*args, **kwargs)
        encoding = backend.encode(args[0], add_special_tokens=False)
        out = {"input_ids": encoding.ids, "attention_mask": encoding.attention_mask}
        if kwargs.get("return_offsets_mapping"):
            out["offset_mapping"] = encoding.offsets
        return out

    def __len__(self) -> int:
        return len(self.tokenizer)

    def encode(self, text: Any, add_special_tokens: bool = True, **kwargs: Any) -> Any:
        backend = None if add_special_tokens or kwargs or not isinstance(text, str) \
            else _plain_backend(self.tokenizer)
        if backend is not None:
            return list(backend.encode(text, add_special_tokens=False).ids)
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens, **kwargs)


def _special_ids(tokenizer: Any) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i, tok in added.items() if getattr(tok, "special", True))
    return ids
