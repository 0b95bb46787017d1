"""A tiny tokenizer per model family, built around the family's real chat template.

Each family's tokenizer is a byte-level BPE trained here (once per process) on
renders of the bundled environments' conversations in that family's own chat
template, with the family's real turn, tool-call and reasoning markers as single
added tokens (special or not, as the real tokenizer has them) and its real
bos/eos/pad. Templates come from TRL's package folder where TRL ships the
model's own template, else from ``tests/data/templates/<family>.jinja`` (each
names its source on its first line).

``completion(family, calls, content=..., think=...)`` is the text the family's
model writes for one assistant turn, in its own format, ending with the token
sampling ends on. ``tests/tokens/test_families_fixtures.py`` proves each fixture
against the template and against ``renderers``.
Needs the ``trl`` extra (transformers, tokenizers, trl); callers skip without it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from _family_facts import FAMILIES, Family, deepseek_marker, family, hub_name

Call = tuple[str, dict[str, Any]]
__all__ = ["FAMILIES", "Family", "family", "hub_name"]

_TEMPLATES = Path(__file__).parent / "data" / "templates"


def end_token(name: str, *, calls: bool = False) -> str:
    """The token sampling ends the turn on (after tool calls where ``calls``)."""
    if name in ("glm-4.5", "glm-5"):
        return "<|observation|>" if calls else "<|user|>"
    if name == "gpt-oss":
        return "<|call|>" if calls else "<|return|>"
    if name == "gemma4":
        return "<|tool_response>" if calls else "<turn|>"
    return family(name).eos


@functools.cache
def chat_template(name: str) -> str:
    """The family's real chat template, read from TRL's package folder or tests/data."""
    source, _, file = family(name).template.partition(":")
    if source == "data":
        return (_TEMPLATES / file).read_text(encoding="utf-8")
    import importlib.util

    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("needs trl (the trl extra) for its bundled chat templates")
    folder = Path(next(iter(spec.submodule_search_locations)))
    return (folder / "chat_templates" / file).read_text(encoding="utf-8")


def _json(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def _verbatim(value: Any) -> str:
    """An argument value as XML-style formats write it: strings verbatim, else JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def call_text(name: str, calls: tuple[Call, ...], content: str = "") -> str:
    """The calls as the family's model writes them (after its content)."""
    f = name
    if not calls:
        return ""
    if f == "qwen3":
        body = "\n".join(
            f'<tool_call>\n{{"name": "{n}", "arguments": {_json(a)}}}\n</tool_call>'
            for n, a in calls
        )
        return ("\n" if content else "") + body
    if f in ("qwen3.5", "qwen3.6"):
        parts = []
        for n, a in calls:
            params = "".join(
                f"<parameter={k}>\n{_verbatim(v)}\n</parameter>\n" for k, v in a.items()
            )
            parts.append(f"<tool_call>\n<function={n}>\n{params}</function>\n</tool_call>")
        return ("\n\n" if content else "") + "\n".join(parts)
    if f == "glm-4.5":
        return "".join(
            f"\n<tool_call>{n}\n"
            + "".join(
                f"<arg_key>{k}</arg_key>\n<arg_value>{_verbatim(v)}</arg_value>\n"
                for k, v in a.items()
            )
            + "</tool_call>"
            for n, a in calls
        )
    if f == "glm-5":
        return "".join(
            f"<tool_call>{n}"
            + "".join(
                f"<arg_key>{k}</arg_key><arg_value>{_verbatim(v)}</arg_value>" for k, v in a.items()
            )
            + "</tool_call>"
            for n, a in calls
        )
    if f == "gpt-oss":
        if len(calls) > 1:
            raise ValueError("gpt-oss writes one call a turn: sampling stops at its <|call|>")
        ((n, a),) = calls
        return f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>{_json(a)}"
    if f == "kimi-k2":
        inner = "".join(
            f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{_json(a)}<|tool_call_end|>"
            for i, (n, a) in enumerate(calls)
        )
        return f"<|tool_calls_section_begin|>{inner}<|tool_calls_section_end|>"
    if f == "minimax-m2":
        invokes = "".join(
            f'<invoke name="{n}">\n'
            + "".join(f'<parameter name="{k}">{_verbatim(v)}</parameter>\n' for k, v in a.items())
            + "</invoke>\n"
            for n, a in calls
        )
        return f"\n<minimax:tool_call>\n{invokes}</minimax:tool_call>"
    if f == "gemma4":
        return "".join(f"<|tool_call>call:{n}{_gemma_args(a)}<tool_call|>" for n, a in calls)
    if f == "deepseek-v3":
        inner = "\n".join(
            f"{deepseek_marker('tool▁call▁begin')}function{deepseek_marker('tool▁sep')}{n}\n```json\n{_json(a)}\n```"
            + deepseek_marker("tool▁call▁end")
            for n, a in calls
        )
        return deepseek_marker("tool▁calls▁begin") + inner + deepseek_marker("tool▁calls▁end")
    if f == "deepseek-v3.1":
        inner = "".join(
            f"{deepseek_marker('tool▁call▁begin')}{n}{deepseek_marker('tool▁sep')}{_json(a)}{deepseek_marker('tool▁call▁end')}"
            for n, a in calls
        )
        return deepseek_marker("tool▁calls▁begin") + inner + deepseek_marker("tool▁calls▁end")
    if f == "llama-3":
        if len(calls) > 1 or content:
            raise ValueError("Llama 3's template writes one call per turn, without content")
        ((n, a),) = calls
        return f'{{"name": "{n}", "parameters": {_json(a)}}}'
    raise ValueError(f"unknown family {name!r}")


def _gemma_value(value: Any) -> str:
    if isinstance(value, str):
        return f'<|"|>{value}<|"|>'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return _gemma_args(value)
    if isinstance(value, list):
        return "[" + ",".join(_gemma_value(v) for v in value) + "]"
    return json.dumps(value)


def _gemma_args(arguments: dict[str, Any]) -> str:
    return "{" + ",".join(f"{k}:{_gemma_value(v)}" for k, v in sorted(arguments.items())) + "}"


def _reasoning_text(name: str, think: str | None) -> str:
    """The reasoning block as the family writes it after its default generation prompt."""
    if name in ("kimi-k2", "deepseek-v3", "llama-3"):
        if think is not None:
            raise ValueError(f"{name}'s chat template has no reasoning block")
        return ""
    if name == "qwen3":
        return "" if think is None else f"<think>\n{think}\n</think>\n\n"
    if name in ("qwen3.5", "qwen3.6"):  # the generation prompt opened "<think>\n"
        return f"{think or ''}\n</think>\n\n"
    if name == "glm-4.5":  # its template writes an empty block where there is no reasoning
        return f"\n<think>{think or ''}</think>"
    if name == "glm-5":  # the generation prompt opened "<think>"
        return f"{think or ''}</think>"
    if name == "gpt-oss":
        return (
            ""
            if think is None
            else f"<|channel|>analysis<|message|>{think}<|end|><|start|>assistant"
        )
    if name == "minimax-m2":  # the generation prompt opened "<think>\n"
        return f"{think or ''}\n</think>\n\n"
    if name == "gemma4":
        return "" if think is None else f"<|channel>thought\n{think}<channel|>"
    if name == "deepseek-v3.1":  # thinking mode: the generation prompt opened "<think>"
        return "" if think is None else f"{think}</think>"
    raise ValueError(f"unknown family {name!r}")


def completion(
    name: str,
    calls: tuple[Call, ...] = (("move", {"direction": "down"}),),
    *,
    content: str = "",
    think: str | None = None,
) -> str:
    """The exact text family ``name``'s model writes for one assistant turn after the
    template's default generation prompt: reasoning (``think``; None for none) in the
    family's own form, then ``content``, then ``calls``, then the end-of-turn token."""
    family(name)
    reasoning = _reasoning_text(name, think)
    if name == "gpt-oss":
        if calls:
            pre = (
                f"<|channel|>commentary<|message|>{content}<|end|><|start|>assistant"
                if content
                else ""
            )
            return f"{reasoning}{pre}{call_text(name, calls, content)}<|call|>"
        return f"{reasoning}<|channel|>final<|message|>{content}<|return|>"
    if name == "gemma4" and not calls:
        return f"{reasoning}{content}<turn|>"
    if name == "glm-4.5" and content:
        content = f"\n{content}"
    return (
        f"{reasoning}{content}{call_text(name, calls, content)}{end_token(name, calls=bool(calls))}"
    )


def assistant_message(
    name: str, calls: tuple[Call, ...], *, content: str = "", think: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style assistant message with ``calls`` as the family's template reads it
    (arguments as a JSON string where the template concatenates them; Kimi's call ids)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if think is not None:  # gpt-oss's template reads its analysis channel from "thinking"
        message["thinking" if name == "gpt-oss" else "reasoning_content"] = think
    if calls:
        message["tool_calls"] = [
            {
                "id": f"functions.{n}:{i}" if name == "kimi-k2" else f"call_{i}",
                "type": "function",
                "function": {
                    "name": n,
                    "arguments": _json(a) if family(name).string_arguments else a,
                },
            }
            for i, (n, a) in enumerate(calls)
        ]
    return message


def tool_message(
    name: str, content: str, *, call_id: str = "call_0", tool: str = "move"
) -> dict[str, Any]:
    """A tool result message for the call ``call_id`` (Kimi's ids are ``functions.NAME:i``)."""
    if name == "kimi-k2" and call_id.startswith("call_"):
        call_id = f"functions.{tool}:{call_id.removeprefix('call_')}"
    return {"role": "tool", "tool_call_id": call_id, "name": tool, "content": content}


_ENVS = ("ors/Counter-v0", "ors/GridWorld-v0", "ors/QA-v0")
_Prompt = tuple[tuple[dict[str, str], ...], tuple[dict[str, Any], ...]]
_REPLIES: tuple[tuple[tuple[Call, ...], str, str | None], ...] = (
    ((("increment", {"amount": 3}),), "", "I add three."),
    ((("move", {"direction": "down"}),), "", None),
    ((("move", {"direction": "left"}), ("move", {"direction": "up"})), "Two moves.", "Go."),
    ((("done", {}),), "", "It is 6."),
    ((), "Paris", "The capital of France is Paris."),
    ((), "I do not know.", None),
)


@functools.lru_cache(maxsize=1)
def environment_prompts() -> tuple[_Prompt, ...]:
    """(prompt messages, OpenAI tool specs) of the bundled environments' first tasks."""
    import gymnasium as gym

    import ors_gym  # noqa: F401  (registers the ors/ ids)
    from ors_gym.formats import render_messages

    out = []
    for env_id in _ENVS:
        env = gym.make(env_id)
        try:
            for index in range(2):
                env.reset(seed=0, options={"index": index})
                ors = env.unwrapped
                tools = ors.tools_as("openai")  # type: ignore[attr-defined]
                prompt = tuple(
                    {
                        "role": m["role"],
                        "content": m["content"]
                        if isinstance(m["content"], str)
                        else " ".join(p.get("text", "") for p in m["content"]),
                    }
                    for m in render_messages(ors.messages(), "openai")  # type: ignore[attr-defined]
                )
                out.append((prompt, tuple(tools)))
        finally:
            env.close()
    return tuple(out)


def _corpus(name: str) -> list[str]:
    """Renders, in the family's template, of conversations over the bundled environments,
    and the family's completions."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    raw = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    raw.chat_template = chat_template(name)
    texts = []
    replies = [r for r in _REPLIES if _writable(name, *r)]
    for prompt, tools in environment_prompts():
        system = [{"role": "system", "content": "You are a careful agent."}]
        for calls, content, think in replies:
            if name == "gpt-oss" and calls and content:
                think = None  # its template takes the analysis in content or thinking, not both
            chat: list[dict[str, Any]] = [*system, *prompt]
            chat.append(assistant_message(name, calls, content=content, think=think))
            if calls:
                chat.append(tool_message(name, "The counter is now 1.", tool=calls[0][0]))
            chat.append(assistant_message(name, (), content="Done."))
            texts.append(
                raw.apply_chat_template(chat, tools=list(tools), tokenize=False, bos_token="")
            )
            texts.append(completion(name, calls, content=content, think=think))
    return texts


def _writable(name: str, calls: tuple[Call, ...], content: str, think: str | None) -> bool:
    """Whether the family's template can write this turn (Llama 3: one call, no content;
    families without a reasoning block: no reasoning)."""
    try:
        completion(name, calls, content=content, think=think)
    except ValueError:
        return False
    return True


@functools.cache
def _trained(name: str) -> str:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    f = family(name)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        _corpus(name) * 2,
        trainers.BpeTrainer(
            vocab_size=1200,
            special_tokens=list(f.special),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in f.added])
    return str(bpe.to_str())


def _build(name: str) -> Any:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    f = family(name)
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained(name)),
        eos_token=f.eos,
        bos_token=f.bos,
        pad_token=f.pad,
        chat_template=chat_template(name),
        model_max_length=131072,
    )


def family_tokenizer(name: str, *, local: bool = True) -> Any:
    """A fresh ``PreTrainedTokenizerFast`` for family ``name`` (the BPE trains once per process).

    ``local=True``: saved with ``save_pretrained`` and loaded back with
    ``AutoTokenizer.from_pretrained(folder)``, so ``name_or_path`` is a local folder, as for
    a local or fine-tuned checkpoint. ``local=False``: ``name_or_path`` is ``hub_name(name)``
    (the family's own folder name where renderers maps no hub name)."""
    tok = _build(name)
    if not local:
        tok.name_or_path = hub_name(name) or name
        return tok
    return _load_local(name)


def _load_local(name: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_checkpoint(name))


@functools.cache
def _checkpoint(name: str) -> str:
    """A folder holding the family's saved tokenizer, kept for the process (removed at exit)."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix=f"tiny-{name}-")
    atexit.register(shutil.rmtree, folder, True)
    _build(name).save_pretrained(folder)
    return folder


def encode(tokenizer: Any, text: str) -> list[int]:
    """``text``'s canonical ids (no special tokens added)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
