"""The per-family test fixtures (``tests/_families.py``) are faithful to each family.

Per family: its tokenizer holds each marker as one id; ``renderers``' renderer for it
renders what the family's chat template renders (renderers' own parity claim) and reads
``completion(...)`` back as the same calls, content and reasoning; and the template,
given an assistant turn with those calls, writes ``completion(...)``'s call text.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("trl") is None:
    pytest.skip("needs transformers and trl (the trl extra)", allow_module_level=True)

from _families import (
    FAMILIES,
    Call,
    assistant_message,
    call_text,
    chat_template,
    completion,
    encode,
    end_token,
    environment_prompts,
    family,
    family_tokenizer,
    hub_name,
    tool_message,
)

HAS_RENDERERS = importlib.util.find_spec("renderers") is not None
MOVE: tuple[Call, ...] = (("move", {"direction": "down"}),)
TWO: tuple[Call, ...] = (("move", {"direction": "left"}), ("move", {"direction": "up"}))
#: Families whose vendored template is another revision than the one renderers mirrors.
REVISION_DRIFT = {
    "kimi-k2": "the vendored Kimi K2 template (0905 revision) writes a '# Tools' header with "
    "spaced JSON and a newline after a system role; renderers' kimi-k2 mirrors the revision "
    "with compact sorted tool JSON",
    "minimax-m2": "the vendored MiniMax-M2 template carries Unsloth's fix, which leaves a "
    "newline between </minimax:tool_call> and [e~[; renderers mirrors MiniMax's own",
}
#: Families whose tokenizer folder renderers cannot serve offline, and why.
OFFLINE_GAP = {
    "gpt-oss": "renderers' gpt-oss renderer loads harmony's vocabulary file from the network",
    "deepseek-v3.1": "renderers has no DeepSeek V3.1 renderer (its calls carry no type nor "
    "json fence, so deepseek-v3's parser does not read them)",
}


@pytest.fixture(scope="module")
def grid() -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    prompt, tools = environment_prompts()[2]  # GridWorld, first task: the move tool
    return list(prompt), list(tools)


def _json_args(arguments: dict[str, Any]) -> str:
    import json

    return json.dumps(arguments)


def _ids(result: Any) -> list[int]:
    return list(result["input_ids"] if hasattr(result, "keys") else result)


def _template_kwargs(name: str) -> dict[str, Any]:
    # Llama 3.2's template writes today's date; renderers pins the template's fallback date.
    return {"date_string": "26 Jul 2024"} if name == "llama-3" else {}


def _renderer(name: str, tok: Any) -> Any:
    import renderers

    renderer_name = family(name).renderer
    if name in OFFLINE_GAP:
        # The gap is checked, not assumed: building the renderer must fail as stated.
        with pytest.raises(Exception) as failed:
            renderers.create_renderer(tok, renderers.config_from_name(renderer_name or name))
        pytest.skip(f"{OFFLINE_GAP[name]} ({type(failed.value).__name__})")
    assert renderer_name is not None
    return renderers.create_renderer(tok, renderers.config_from_name(renderer_name))


def _conversation(name: str, prompt: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a careful agent."},
        *prompt,
        assistant_message(name, MOVE),
        tool_message(name, "You moved down."),
    ]


# -- the tokenizer ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", FAMILIES)
def test_markers_are_single_ids_and_the_folder_is_a_local_checkpoint(name: str) -> None:
    import os

    tok = family_tokenizer(name)
    facts = family(name)
    assert os.path.isdir(tok.name_or_path)
    decoder = tok.added_tokens_decoder
    for marker, special in [(t, True) for t in facts.special] + [(t, False) for t in facts.added]:
        [token_id] = encode(tok, marker)  # one id
        assert decoder[token_id].special is special, marker  # as in the real tokenizer
    assert tok.eos_token == facts.eos and tok.bos_token == facts.bos
    hub = family_tokenizer(name, local=False)
    assert hub.name_or_path == (hub_name(name) or name)
    assert hub.get_vocab() == tok.get_vocab()


@pytest.mark.skipif(not HAS_RENDERERS, reason="needs renderers (the tokens extra)")
@pytest.mark.parametrize("name", FAMILIES)
def test_hub_name_maps_to_the_familys_renderer(name: str) -> None:
    from renderers.base import MODEL_RENDERER_MAP

    hub = hub_name(name)
    if hub is None:
        assert family(name).renderer is None
    else:
        assert MODEL_RENDERER_MAP[hub] == family(name).renderer


# -- (1) renderers renders what the template renders -----------------------------------------


@pytest.mark.skipif(not HAS_RENDERERS, reason="needs renderers (the tokens extra)")
@pytest.mark.parametrize("name", FAMILIES)
def test_renderer_renders_the_templates_ids(name: str, grid: Any) -> None:
    prompt, tools = grid
    tok = family_tokenizer(name)
    renderer = _renderer(name, tok)
    messages = _conversation(name, prompt)
    want = _ids(
        tok.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, **_template_kwargs(name)
        )
    )
    got = list(renderer.render(messages, tools=tools, add_generation_prompt=True).token_ids)
    if name in REVISION_DRIFT:
        assert got != want, f"{name}: the revisions agree now; drop it from REVISION_DRIFT"
        pytest.xfail(REVISION_DRIFT[name])
    assert got == want


# -- (2) renderers reads completion() back ---------------------------------------------------


CASES = {
    "call": (MOVE, "", None),
    "answer": ((), "Paris", None),
    "two calls": (TWO, "", None),
    "reasoning": (MOVE, "", "The goal is below me."),
}


@pytest.mark.skipif(not HAS_RENDERERS, reason="needs renderers (the tokens extra)")
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", FAMILIES)
def test_renderer_parses_the_completion(name: str, case: str, grid: Any) -> None:
    prompt, tools = grid
    calls, content, think = CASES[case]
    try:
        text = completion(name, calls, content=content, think=think)
    except ValueError as unwritable:  # e.g. Llama 3 writes one call a turn; V3 no reasoning
        pytest.skip(str(unwritable))
    tok = family_tokenizer(name)
    renderer = _renderer(name, tok)
    messages = [{"role": "system", "content": "You are a careful agent."}, *prompt]
    prompt_ids = list(renderer.render(messages, tools=tools, add_generation_prompt=True).token_ids)
    parsed = renderer.parse_response(encode(tok, text), tools=tools, prompt_ids=prompt_ids)
    assert [(c.name, c.arguments, c.status.value) for c in parsed.tool_calls] == [
        (n, a, "ok") for n, a in calls
    ]
    assert parsed.content.strip() == content
    # GLM-4.5's parser keeps the newline its format writes before <think> in the reasoning.
    assert ((parsed.reasoning_content or "").strip() or None) == think


# -- (3) the template writes what completion() writes ----------------------------------------


@pytest.mark.parametrize("calls", [MOVE, TWO], ids=["one call", "two calls"])
@pytest.mark.parametrize("name", FAMILIES)
def test_template_writes_the_completions_calls(name: str, calls: Any, grid: Any) -> None:
    prompt, tools = grid
    if name in ("llama-3", "gpt-oss") and len(calls) > 1:
        with pytest.raises(ValueError, match="one call"):
            completion(name, calls)
        return
    tok = family_tokenizer(name)
    messages = [*prompt, assistant_message(name, calls), tool_message(name, "ok")]
    history = tok.apply_chat_template(
        messages, tools=tools, tokenize=False, **_template_kwargs(name)
    )
    written = completion(name, calls)
    assert written.endswith(end_token(name, calls=True))
    if name == "gpt-oss":
        # Harmony lets the recipient stand before or after the channel: the model writes
        # "<|channel|>commentary to=functions.NAME", the template re-renders history with
        # "to=functions.NAME<|channel|>commentary"; the call's JSON and <|call|> are the same.
        ((n, a),) = calls
        assert f" to=functions.{n}<|channel|>commentary json<|message|>" in history
        assert f"{_json_args(a)}<|call|>" in history
        return
    assert call_text(name, calls) in history


@pytest.mark.skipif(not HAS_RENDERERS, reason="needs renderers (the tokens extra)")
def test_deepseek_v3_parser_does_not_read_v3_1_calls(grid: Any) -> None:
    """V3.1 writes NAME<tool_sep>{json}; V3 wrote function<tool_sep>NAME and a json fence,
    so V3's parser must not stand in for V3.1's."""
    import renderers

    _, tools = grid
    tok = family_tokenizer("deepseek-v3.1")
    v3 = renderers.create_renderer(tok, renderers.config_from_name("deepseek-v3"))
    parsed = v3.parse_response(encode(tok, completion("deepseek-v3.1")), tools=tools)
    # Read silently wrong: an OK call named by the arguments' JSON, with no arguments.
    [call] = parsed.tool_calls
    assert (call.status.value, call.name, call.arguments) == ("ok", '{"direction": "down"}', {})


@pytest.mark.parametrize("name", [n for n in FAMILIES if family(n).template.startswith("data:")])
def test_vendored_templates_source_line_renders_nothing(name: str, grid: Any) -> None:
    from transformers.utils.chat_template_utils import render_jinja_template

    prompt, tools = grid
    template = chat_template(name)
    header, _, body = template.partition("\n")
    assert header.startswith("{#- ") and header.endswith(" -#}") and "source: " in header
    messages = _conversation(name, prompt)
    kwargs = {"tools": tools, "add_generation_prompt": True, "bos_token": "", "eos_token": ""}
    with_header = render_jinja_template([messages], chat_template=template, **kwargs)
    without = render_jinja_template([messages], chat_template=body, **kwargs)
    assert with_header == without
