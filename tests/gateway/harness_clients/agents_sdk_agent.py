"""An OpenAI Agents SDK agent in its default mode (the Responses API), run by the tests in
the harness venv (scripts/harness-venv.sh) against a capture session:
``python agents_sdk_agent.py BASE_URL API_KEY TARGET [stream]``. Its tool keeps a counter here;
the final output is printed as the last line."""

import asyncio
import sys

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

base_url, api_key, target = sys.argv[1], sys.argv[2], int(sys.argv[3])
counter = {"value": 0}


@function_tool
def increment(amount: int) -> str:
    """Add amount (1 to 5) to the counter."""
    counter["value"] += amount
    return f"The counter is now {counter['value']}."


async def main() -> None:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    agent = Agent(name="counter", instructions="You count with the tools you have.",
                  tools=[increment], model=OpenAIResponsesModel("tiny", client))
    task = f"The counter is at 0. Make it equal {target} using increment."
    if sys.argv[4:] == ["stream"]:
        run = Runner.run_streamed(agent, task)
        async for _ in run.stream_events():
            pass
        print(run.final_output)
    else:
        print((await Runner.run(agent, task)).final_output)


asyncio.run(main())
