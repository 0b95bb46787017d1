"""ORS blocks and messages as verifiers' chat messages and MCP tool-result content.

Images stay images: a prompt's image block becomes an ``image_url`` part (a data URL),
a tool result's an MCP ``ImageContent``, which the harness hands the model as an
image part too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mcp.types import ImageContent, TextContent
from verifiers.v1.types import (
    AssistantMessage,
    ImageUrlContentPart,
    ImageUrlSource,
    Message,
    SystemMessage,
    TextContentPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from ors_gym.protocol import (
    Block,
    ImageBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ors_gym.protocol import (
    Message as OrsMessage,
)

__all__ = ["blocks_as_content", "blocks_as_mcp", "messages_as_chat"]


def blocks_as_content(blocks: Sequence[Any]) -> str | list[Any]:
    """Text and image blocks as message content: a string when there is only text."""
    parts: list[Any] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(TextContentPart(text=block.text))
        elif isinstance(block, ImageBlock):
            url = f"data:{block.mimeType};base64,{block.data}"
            parts.append(ImageUrlContentPart(image_url=ImageUrlSource(url=url)))
    if all(isinstance(part, TextContentPart) for part in parts):
        return "\n".join(part.text for part in parts)
    return parts


def blocks_as_mcp(blocks: Sequence[Block]) -> list[TextContent | ImageContent]:
    """A tool output's blocks as MCP content, in order."""
    content: list[TextContent | ImageContent] = []
    for block in blocks:
        if isinstance(block, ImageBlock):
            content.append(ImageContent(data=block.data, mime_type=block.mimeType))
        elif isinstance(block, TextBlock):
            content.append(TextContent(text=block.text))
    return content


def messages_as_chat(messages: Sequence[OrsMessage]) -> list[Message]:
    """A role-tagged ORS conversation (``/messages``) as verifiers messages.

    Reasoning blocks are dropped (no chat API takes them back as input); tool calls
    and tool results keep their ids, so a multi-turn prompt replays as it was.
    """
    chat: list[Message] = []
    for message in messages:
        plain = [b for b in message.blocks if isinstance(b, TextBlock | ImageBlock)]
        if message.role == "system":
            text = "\n".join(b.text for b in plain if isinstance(b, TextBlock))
            chat.append(SystemMessage(content=text))
        elif message.role == "assistant":
            calls = [
                ToolCall(id=b.id, name=b.name, arguments=json.dumps(b.input))
                for b in message.blocks if isinstance(b, ToolCallBlock)
            ]
            text = "\n".join(b.text for b in plain if isinstance(b, TextBlock))
            chat.append(AssistantMessage(content=text or None, tool_calls=calls or None))
        else:
            for b in message.blocks:
                if isinstance(b, ToolResultBlock):
                    chat.append(ToolMessage(tool_call_id=b.tool_call_id,
                                            content=blocks_as_content(b.blocks)))
            if plain or not any(isinstance(b, ToolResultBlock) for b in message.blocks):
                chat.append(UserMessage(content=blocks_as_content(plain)))
    return chat
