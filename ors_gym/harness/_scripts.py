"""The Python SDK harnesses' scripts, written into an episode's working directory.

Each is a whole program run by the harness's own interpreter (a venv holding its
SDK, not ors_gym): the prompt is its first argument; the model endpoint and key
are ``OPENAI_BASE_URL``/``OPENAI_API_KEY``, the model's name ``ORS_MODEL``, the MCP
server ``ORS_MCP_URL`` (or, for pydantic-ai, the ``{"mcpServers": ...}`` file at
``ORS_MCP_CONFIG``). Each sends the model's id for a call in the call's ``_meta``
where its SDK lets it, and prints the final output. They are kept as text so
that this package imports none of those SDKs.
"""

from __future__ import annotations

__all__ = ["SCRIPTS"]

_INSTRUCTIONS = ("Solve the task with the tools. When the task is done, reply with your "
                 "final answer in plain text.")

OPENAI_AGENTS = f'''\
"""The OpenAI Agents SDK on an ORS episode (its default model: Responses; MCP over HTTP).
ORS_AGENTS_API=chat: its Chat Completions model instead."""
import asyncio
import os
import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI


def call_meta(context):
    return {{"ors/call_id": getattr(context.run_context, "tool_call_id", None)}}


async def main() -> None:
    set_tracing_disabled(True)
    model = os.environ["ORS_MODEL"]  # the SDK's default provider: the Responses API
    if os.environ.get("ORS_AGENTS_API") == "chat":
        model = OpenAIChatCompletionsModel(model=model, openai_client=AsyncOpenAI())
    async with MCPServerStreamableHttp({{"url": os.environ["ORS_MCP_URL"]}}, name="ors",
                                       cache_tools_list=False,
                                       tool_meta_resolver=call_meta) as server:
        agent = Agent(name="ors", instructions={_INSTRUCTIONS!r}, model=model,
                      mcp_servers=[server])
        result = await Runner.run(agent, sys.argv[1], max_turns=int(os.environ.get(
            "ORS_MAX_TURNS", "50")))
    # the last response's id, as the server named it (none for a Chat Completions model)
    print(f"response id: {{result.raw_responses[-1].response_id}}", file=sys.stderr)
    print(result.final_output)


asyncio.run(main())
'''

PYDANTIC_AI = f'''\
"""pydantic-ai on an ORS episode (MCP toolsets read from the mcpServers JSON file)."""
import asyncio
import os
import sys

from pydantic_ai import Agent
from pydantic_ai.mcp import load_mcp_toolsets
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider


async def call_meta(ctx, call_tool, name, args):
    return await call_tool(name, args, metadata={{"ors/call_id": ctx.tool_call_id}})


async def main() -> None:
    provider = OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"],
                              api_key=os.environ["OPENAI_API_KEY"])
    model = OpenAIChatModel(os.environ["ORS_MODEL"], provider=provider)
    toolsets = load_mcp_toolsets(os.environ["ORS_MCP_CONFIG"])  # tools named <server>_<tool>
    for toolset in toolsets:
        toolset.wrapped.process_tool_call = call_meta
    agent = Agent(model, instructions={_INSTRUCTIONS!r}, toolsets=toolsets)
    async with agent:
        result = await agent.run(sys.argv[1])
    print(result.output)


asyncio.run(main())
'''

SMOLAGENTS = '''\
"""smolagents on an ORS episode (a tool-calling agent, tools from ToolCollection.from_mcp)."""
import os
import sys

from smolagents import OpenAIServerModel, ToolCallingAgent, ToolCollection
from smolagents.models import REMOVE_PARAMETER

# The model samples its own turn: no forced tool choice, no stop strings (the capture gateway
# refuses both, as they would change what the model sampled).
model = OpenAIServerModel(model_id=os.environ["ORS_MODEL"],
                          api_base=os.environ["OPENAI_BASE_URL"],
                          api_key=os.environ["OPENAI_API_KEY"],
                          tool_choice="auto", stop=REMOVE_PARAMETER)
server = {"url": os.environ["ORS_MCP_URL"], "transport": "streamable-http"}
with ToolCollection.from_mcp(server, trust_remote_code=True, structured_output=False) as tools:
    agent = ToolCallingAgent(tools=[*tools.tools], model=model,
                             max_steps=int(os.environ.get("ORS_MAX_TURNS", "50")))
    print(agent.run(sys.argv[1]))
'''

#: Script text by preset name.
SCRIPTS = {"openai-agents": OPENAI_AGENTS, "pydantic-ai": PYDANTIC_AI,
           "smolagents": SMOLAGENTS}
