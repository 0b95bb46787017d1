"""The family table and the wire formats: a new family is one row, every family renderers
maps is a row, the bridge choice is made once per tokenizer, and a template that shows the
model no tools is said."""

from __future__ import annotations

import gc
import json
import logging
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("renderers")

import ors_gym.families as families
from ors_gym._compat.renderers import mapped_renderer_names
from ors_gym.families import (
    FAMILIES,
    FORMATS,
    Family,
    WireFormat,
    call_example,
    check_tool_format,
    detect,
    parse_text,
    tools_prompt,
)
from ors_gym.tokens import TemplateBridge
from ors_gym.tokens._choose import make_bridge
from tests._families import family_tokenizer

MOVE = {"type": "function", "function": {
    "name": "move", "description": "Move one cell.", "parameters": {
        "type": "object", "properties": {"direction": {"type": "string"}},
        "required": ["direction"]}}}


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test hears warn_once's messages afresh."""
    monkeypatch.setattr(families, "_said", set())


@pytest.fixture
def acme_first() -> Iterator[Family]:
    """A new model family, one row put first in the table (tried before the others)."""
    row = Family("acme-1", None, "qwen3.5", fingerprint=("acme_tools",))
    saved = dict(FAMILIES)
    FAMILIES.clear()
    FAMILIES.update({row.name: row, **saved})
    try:
        yield row
    finally:
        FAMILIES.clear()
        FAMILIES.update(saved)


def test_a_new_family_is_one_row(acme_first: Family) -> None:
    tok = family_tokenizer("qwen3.5")
    tok.chat_template = "{#- acme_tools -#}" + tok.chat_template
    assert detect(tok).family == "acme-1"
    assert check_tool_format("acme-1") == "qwen3.5"
    call = call_example("acme-1", "move", {"direction": "up"})
    assert call == call_example("qwen3.5", "move", {"direction": "up"})
    read = parse_text("acme-1", call, [MOVE])
    assert [(c.name, c.arguments) for c in read.tool_calls] == [("move", {"direction": "up"})]
    bridge = make_bridge(tok, None, None)
    assert isinstance(bridge, TemplateBridge) and bridge.family.name == "acme-1"
    assert bridge.format is FORMATS["qwen3.5"]


def test_a_new_wire_format_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """A format read by an existing reader: its stops cut the turn, its writer shows a call."""
    def write(name: str, args: dict[str, Any]) -> str:
        return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"

    row = WireFormat("acme", ("<tool_call>", "</tool_call>", "<|acme_end|>"), "<|acme_end|>",
                     ("<|acme_end|>",), ("<think>", "</think>"), "<tool_call>", "</tool_call>",
                     'give it a "name"', "not a call", write, reader="hermes")
    monkeypatch.setitem(FORMATS, "acme", row)
    call = call_example("acme", "move", {"direction": "up"})
    assert call == write("move", {"direction": "up"})
    read = parse_text("acme", f"<think>Up.</think>{call}<|acme_end|>{call}", [MOVE])
    assert len(read.tool_calls) == 1 and read.reasoning[0].text == "Up."


def test_every_family_renderers_maps_is_a_row_and_renderer_only_ones_say_so() -> None:
    mapped = mapped_renderer_names()
    assert mapped, "renderers' hub map was not read"
    assert mapped <= set(FAMILIES), sorted(mapped - set(FAMILIES))
    for name in ("deepseek-v4", "hy3", "inkling", "laguna-xs.2"):
        assert FAMILIES[name].format is None
        with pytest.raises(ValueError, match="read only by its renderers renderer"):
            check_tool_format(name)
    assert check_tool_format("nemotron-3") == "qwen3.5"  # renderers reads it as Qwen3.5


def test_the_bridge_choice_is_made_once_per_tokenizer_and_arguments() -> None:
    gone = _choose_twice()
    gc.collect()
    assert gone() is None, "the choice kept its tokenizer alive"


def _choose_twice() -> weakref.ref[Any]:
    """The choices of one tokenizer, checked; a weak reference to the tokenizer."""
    tok = family_tokenizer("qwen3.5")
    renders: list[int] = []
    real = tok.apply_chat_template

    def counted(*args: Any, **kwargs: Any) -> Any:
        renders.append(1)
        return real(*args, **kwargs)

    tok.apply_chat_template = counted
    first = make_bridge(tok, None, None)
    template = make_bridge(tok, "template", None)
    assert renders, "the first choice probes the template"
    renders.clear()
    again, again_template = make_bridge(tok, None, {}), make_bridge(tok, "template", None)
    assert not renders, "a second choice probed the template again"
    assert (type(again), again.name) == (type(first), first.name)
    assert again is not first  # each its own bridge: a multimodal renderer's images are its own
    assert isinstance(again_template, TemplateBridge) and isinstance(template, TemplateBridge)
    assert (again_template.end_of_turn, again_template.stops) == (
        template.end_of_turn, template.stops)
    make_bridge(tok, None, {"enable_thinking": False})
    assert renders, "other template arguments: chosen again"
    renders.clear()
    tok.chat_template = tok.chat_template + " "
    make_bridge(tok, "template", None)
    assert renders, "another template: chosen again"
    return weakref.ref(tok)


def test_a_template_that_renders_no_tools_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ors_gym")
    tok = family_tokenizer("deepseek-v3.1")
    TemplateBridge(tok, family="deepseek-v3.1")
    TemplateBridge(tok, family="deepseek-v3.1")
    said = [r for r in caplog.records if "renders no tools" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "tools_prompt" in said[0].getMessage()
    caplog.clear()
    TemplateBridge(family_tokenizer("qwen3.5"), family="qwen3.5")
    assert not [r for r in caplog.records if "renders no tools" in r.getMessage()]
    # What the warning names: the tools, and a call written in the family's own format.
    prompt = tools_prompt([MOVE], "deepseek-v3.1")
    assert '"name": "move"' in prompt
    assert call_example("deepseek-v3.1", "move", {"direction": "value"}) in prompt
