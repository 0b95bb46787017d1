"""A pydantic-ai agent on its ``openai:`` model (the Responses API), run by the tests in
the harness venv (scripts/harness-venv.sh) against a capture session:
``python pydantic_ai_agent.py BASE_URL API_KEY TARGET``. Its tool keeps a counter here; the final
output is printed as the last line."""

import sys

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

base_url, api_key, target = sys.argv[1], sys.argv[2], int(sys.argv[3])
counter = {"value": 0}
model = OpenAIResponsesModel("tiny", provider=OpenAIProvider(base_url=base_url,
                                                             api_key=api_key))
agent = Agent(model, instructions="You count with the tools you have.")


@agent.tool_plain
def increment(amount: int) -> str:
    """Add amount (1 to 5) to the counter."""
    counter["value"] += amount
    return f"The counter is now {counter['value']}."


task = f"The counter is at 0. Make it equal {target} using increment."
print(agent.run_sync(task).output)
