"""Harnesses written as Python callables, importable by Ray workers: an OpenAI-SDK loop over
the MCP tools, and the environment factories the distributed tests send."""

from __future__ import annotations

import json
from typing import Any

import openai
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from ors_gym import AsyncOrsEnv
from ors_gym.harness import HarnessContext


async def chat_agent(ctx: HarnessContext) -> str | None:
    """A harness written as a Python callable: an OpenAI-SDK loop over the MCP tools."""
    client = openai.AsyncOpenAI(base_url=ctx.openai_base_url, api_key=ctx.api_key)
    async with streamable_http_client(ctx.mcp_url) as (read, write, _), \
            ClientSession(read, write) as mcp:
        await mcp.initialize()
        tools = [{"type": "function", "function": {
            "name": t.name, "description": t.description or "", "parameters": t.inputSchema}}
            for t in (await mcp.list_tools()).tools]
        messages: list[Any] = [{"role": "user", "content": ctx.prompt}]
        for _ in range(20):
            reply = await client.chat.completions.create(model=ctx.model, messages=messages,
                                                         tools=tools)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return message.content
            for call in message.tool_calls:
                got = await mcp.call_tool(call.function.name,
                                          json.loads(call.function.arguments),
                                          meta={"ors/call_id": call.id})
                text = "\n".join(c.text for c in got.content if c.type == "text")
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return None


def counter_env(i: int) -> Any:
    """Episode ``i``'s environment: the Counter, hosted in the worker's process."""
    return AsyncOrsEnv(env_class="ors_gym.envs.counter:Counter")
