"""Each model family's tokenizer facts, as the real model's tokenizer files have them.

Read by ``tests/_families.py``: the added tokens (special or not), bos/eos/pad, where
its real chat template comes from, and the ``renderers`` renderer that serves it.
"""

from __future__ import annotations

from dataclasses import dataclass

_QWEN_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_QWEN_ADDED = (
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<tool_response>",
    "</tool_response>",
)
_QWEN_VISION = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
_GLM_SPECIAL = (
    "<|endoftext|>",
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
)
_GLM_ADDED = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)
_DS = ("begin▁of▁sentence", "end▁of▁sentence")
_DS_ADDED = (
    "User",
    "Assistant",
    "tool▁calls▁begin",
    "tool▁calls▁end",
    "tool▁call▁begin",
    "tool▁call▁end",
    "tool▁sep",
    "tool▁outputs▁begin",
    "tool▁outputs▁end",
    "tool▁output▁begin",
    "tool▁output▁end",
)


def deepseek_marker(name: str) -> str:
    """A DeepSeek marker: the name between fullwidth bars (U+FF5C)."""
    return f"<\uff5c{name}\uff5c>"


@dataclass(frozen=True)
class Family:
    """One model family's tokenizer facts (all from the real model's tokenizer files)."""

    name: str
    template: str  # "trl:<file>" (TRL's package folder) or "data:<file>" (tests/data)
    special: tuple[str, ...]  # added tokens with special=True
    added: tuple[str, ...]  # added tokens with special=False
    eos: str
    bos: str | None = None
    pad: str | None = None
    renderer: str | None = None  # the renderers config name serving this family
    hub: str | None = None  # a hub name renderers' MODEL_RENDERER_MAP maps to ``renderer``
    string_arguments: bool = False  # the template concatenates arguments as a JSON string


_FAMILY_LIST = (
    Family(
        "qwen3",
        "trl:qwen3.jinja",
        _QWEN_SPECIAL,
        _QWEN_ADDED,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        renderer="qwen3",
        hub="Qwen/Qwen3-8B",
    ),
    Family(
        "qwen3.5",
        "trl:qwen3_5_think.jinja",
        _QWEN_SPECIAL + _QWEN_VISION,
        _QWEN_ADDED,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        renderer="qwen3.5",
        hub="Qwen/Qwen3.5-9B",
    ),
    Family(
        "qwen3.6",
        "trl:qwen3_6.jinja",
        _QWEN_SPECIAL + _QWEN_VISION,
        _QWEN_ADDED,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        renderer="qwen3.6",
        hub="Qwen/Qwen3.6-35B-A3B",
    ),
    Family(
        "glm-4.5",
        "trl:glm4moe.jinja",
        _GLM_SPECIAL,
        _GLM_ADDED,
        eos="<|endoftext|>",
        pad="<|endoftext|>",
        renderer="glm-4.5",
        hub="zai-org/GLM-4.5-Air",
    ),
    Family(
        "glm-5",
        "data:glm-5.jinja",
        _GLM_SPECIAL,
        _GLM_ADDED,
        eos="<|endoftext|>",
        pad="<|endoftext|>",
        renderer="glm-5",
        hub="zai-org/GLM-4.7-Flash",
    ),
    Family(
        "gpt-oss",
        "trl:gptoss.jinja",
        (
            "<|startoftext|>",
            "<|endoftext|>",
            "<|start|>",
            "<|channel|>",
            "<|message|>",
            "<|end|>",
            "<|call|>",
            "<|return|>",
            "<|constrain|>",
        ),
        (),
        eos="<|return|>",
        pad="<|endoftext|>",
        renderer="gpt-oss",
        hub="openai/gpt-oss-20b",
    ),
    Family(
        "kimi-k2",
        "data:kimi-k2.jinja",
        (
            "[BOS]",
            "[EOS]",
            "<|im_end|>",
            "<|im_user|>",
            "<|im_assistant|>",
            "<|im_system|>",
            "<|im_middle|>",
            "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>",
            "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
            "<|media_start|>",
            "<|media_content|>",
            "<|media_end|>",
            "<|media_pad|>",
            "[PAD]",
        ),
        ("<think>", "</think>"),
        eos="<|im_end|>",
        bos="[BOS]",
        pad="[PAD]",
        renderer="kimi-k2",
        hub="moonshotai/Kimi-K2-Instruct",
    ),
    Family(
        "minimax-m2",
        "data:minimax-m2.jinja",
        ("]~!b[", "]~b]", "[e~["),
        ("<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>"),
        eos="[e~[",
        bos="]~!b[",
        pad="[e~[",
        renderer="minimax-m2",
        hub="MiniMaxAI/MiniMax-M2",
    ),
    Family(
        "gemma4",
        "trl:gemma4_v5.jinja",
        (
            "<pad>",
            "<eos>",
            "<bos>",
            "<|turn>",
            "<turn|>",
            "<|channel>",
            "<channel|>",
            "<|think|>",
            "<|tool>",
            "<tool|>",
            "<|tool_call>",
            "<tool_call|>",
            "<|tool_response>",
            "<tool_response|>",
            '<|"|>',
            "<|image>",
            "<|image|>",
            "<image|>",
        ),
        (),
        eos="<turn|>",
        bos="<bos>",
        pad="<pad>",
        renderer="gemma4",
        hub="google/gemma-4-E2B-it",
    ),
    Family(
        "deepseek-v3",
        "trl:deepseekv3.jinja",
        tuple(deepseek_marker(n) for n in _DS),
        tuple(deepseek_marker(n) for n in _DS_ADDED),
        eos=deepseek_marker("end▁of▁sentence"),
        bos=deepseek_marker("begin▁of▁sentence"),
        pad=deepseek_marker("end▁of▁sentence"),
        renderer="deepseek-v3",
        hub="deepseek-ai/DeepSeek-V3",
        string_arguments=True,
    ),
    Family(
        "deepseek-v3.1",
        "data:deepseek-v3.1.jinja",
        tuple(deepseek_marker(n) for n in _DS),
        (*(deepseek_marker(n) for n in _DS_ADDED), "<think>", "</think>"),
        eos=deepseek_marker("end▁of▁sentence"),
        bos=deepseek_marker("begin▁of▁sentence"),
        pad=deepseek_marker("end▁of▁sentence"),
        string_arguments=True,
    ),
    Family(
        "llama-3",
        "trl:llama3_2.jinja",
        (
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
            "<|finetune_right_pad_id|>",
        ),
        (),
        eos="<|eot_id|>",
        bos="<|begin_of_text|>",
        pad="<|finetune_right_pad_id|>",
        renderer="llama-3",
        hub="meta-llama/Llama-3.2-1B-Instruct",
    ),
)
FAMILIES: tuple[str, ...] = tuple(f.name for f in _FAMILY_LIST)
_BY_NAME = {f.name: f for f in _FAMILY_LIST}


def family(name: str) -> Family:
    """The facts of family ``name`` (one of ``FAMILIES``)."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown family {name!r}; choose one of {', '.join(FAMILIES)}")
    return _BY_NAME[name]


def hub_name(name: str) -> str | None:
    """A hub name renderers maps to this family's renderer (None where it maps none)."""
    return family(name).hub
