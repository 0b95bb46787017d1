"""``ScriptedLLM``: a stand-in for a language model, for examples and tests.

It lets an LLM harness be shown end to end, and tested, with no model to
download and no endpoint to call.
``ScriptedLLM(format=...)`` answers like a model client would, in that
client's output shape:

- ``"openai"``: a chat-completions assistant message dict (``content``,
  ``tool_calls`` with JSON-string ``arguments``);
- ``"anthropic"``: a list of Messages-API content blocks (``text``, ``tool_use``);
- ``"responses"``: a list of OpenAI Responses output items (``message``,
  ``function_call``);
- ``"hermes"``: text with ``<tool_call>`` tags (Hermes/Qwen chat templates);
- ``"json_fence"``: text with the call as JSON in a fenced code block.

It plays the bundled environments it recognises from the prompt with simple
rules (Math: compute and submit; GridWorld: shortest path; Counter: count to
the target then answer; Toolbox: chain the task tools; Judged: write a text
with some of the keywords); ``skill`` is the chance of following a rule
rather than acting at random. Elsewhere it calls a random tool with
schema-valid arguments (:func:`ors_gym.schema.sample_from_schema`), or
sometimes gives a plain final answer.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ors_gym.protocol import ListToolsOutput, Message, ToolSpec
from ors_gym.schema import SchemaError, sample_from_schema

__all__ = ["FORMATS", "ScriptedLLM"]

FORMATS = ("openai", "anthropic", "responses", "hermes", "json_fence")

Call = tuple[str, dict[str, Any]]

_CELL = r"\[(\d+), (\d+)\]"
_PHRASES = (
    "made with care", "simple to enjoy", "a small daily pleasure", "worth a second look",
    "easy to love", "clear and honest", "for every day", "with a warm touch",
    "quiet but memorable", "better than expected", "full of small surprises",
)


class ScriptedLLM:
    """A deterministic (given ``seed``) model stand-in answering in ``format``.

    ``act(observation, tools)`` takes an ``OrsEnv`` observation (``{"text",
    "images"}``), a conversation (a list of OpenAI, Anthropic or ORS
    messages), or text; and the tools as a ``ListToolsOutput``, an env, or
    tool definitions in any :func:`~ors_gym.formats.tools_as` format.
    Given observations (not conversations), it remembers the episode's texts
    until :meth:`reset`.
    """

    def __init__(
        self,
        format: str = "openai",
        seed: int = 0,
        *,
        skill: float = 1.0,
        final_answer_prob: float = 0.1,
    ) -> None:
        if format not in FORMATS:
            raise ValueError(f"format={format!r}; choose one of {list(FORMATS)}")
        if not 0.0 <= skill <= 1.0 or not 0.0 <= final_answer_prob <= 1.0:
            raise ValueError("skill and final_answer_prob are probabilities, in [0, 1]")
        self.format = format
        self.skill = skill
        self.final_answer_prob = final_answer_prob
        self.rng = np.random.default_rng(seed)
        self._memory: list[str] = []

    def reset(self) -> None:
        """Forget the texts remembered from observations (call at each episode start)."""
        self._memory = []

    def act(self, observation: Any, tools: Any = None) -> Any:
        """The model's next output, in this model's ``format``."""
        history = self._history(observation)
        specs = _tool_list(tools)
        plan = _plan(history, specs, self.rng) if self.rng.random() < self.skill else None
        if plan is None:
            plan = self._random(specs)
        if isinstance(plan, str):
            return self._render(plan, [])
        return self._render(_lead_in(plan), plan)

    # -- inputs --------------------------------------------------------------------------
    def _history(self, observation: Any) -> list[str]:
        """The environment's texts so far: the prompt first, the latest last."""
        if isinstance(observation, list | tuple):
            return _conversation_texts(observation)
        if isinstance(observation, Mapping) and "text" in observation:
            self._memory.append(str(observation["text"]))
        elif isinstance(observation, str):
            self._memory.append(observation)
        else:
            raise TypeError(
                "observation must be an OrsEnv observation {'text', 'images'}, a conversation "
                f"(a list of messages) or text, got {type(observation).__name__}"
            )
        return list(self._memory)

    def _random(self, specs: list[ToolSpec]) -> list[Call] | str:
        if not specs or self.rng.random() < self.final_answer_prob:
            return "I am done."
        spec = specs[int(self.rng.integers(len(specs)))]
        schema = spec.input_schema or {"type": "object", "properties": {}}
        try:
            arguments = sample_from_schema(schema, self.rng)
        except SchemaError:
            arguments = {}
        return [(spec.name, arguments if isinstance(arguments, dict) else {})]

    # -- outputs -------------------------------------------------------------------------
    def _id(self, prefix: str) -> str:
        return prefix + "".join(f"{int(b):02x}" for b in self.rng.integers(0, 256, 8))

    def _render(self, text: str, calls: list[Call]) -> Any:
        if self.format == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": None if calls else text}
            if calls:
                message["tool_calls"] = [
                    {
                        "id": self._id("call_"),
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                    for name, args in calls
                ]
            return message
        if self.format == "anthropic":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            blocks += [
                {"type": "tool_use", "id": self._id("toolu_"), "name": name, "input": args}
                for name, args in calls
            ]
            return blocks
        if self.format == "responses":
            items: list[dict[str, Any]] = []
            if text and not calls:
                items.append(
                    {
                        "type": "message",
                        "id": self._id("msg_"),
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                    }
                )
            items += [
                {
                    "type": "function_call",
                    "id": self._id("fc_"),
                    "call_id": self._id("call_"),
                    "name": name,
                    "arguments": json.dumps(args),
                    "status": "completed",
                }
                for name, args in calls
            ]
            return items
        if self.format == "hermes":
            tags = "".join(
                "\n<tool_call>\n" + json.dumps({"name": n, "arguments": a}) + "\n</tool_call>"
                for n, a in calls
            )
            return text + tags
        if not calls:
            return text
        body = [{"name": n, "arguments": a} for n, a in calls]
        payload = json.dumps(body[0] if len(body) == 1 else body, indent=2)
        return f"{text}\n```json\n{payload}\n```"


def _lead_in(calls: list[Call]) -> str:
    name, args = calls[0]
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return f"I'll call {name}({shown})."


# ----------------------------------------------------------------------- reading


def _tool_list(tools: Any) -> list[ToolSpec]:
    """The callable tools from a ListToolsOutput, an env, or tool definitions."""
    if tools is None:
        return []
    unwrapped = getattr(tools, "unwrapped", None)
    if unwrapped is not None and isinstance(getattr(unwrapped, "tools", None), ListToolsOutput):
        tools = unwrapped.tools
    if isinstance(tools, ListToolsOutput):
        return list(tools.tools)
    specs: list[ToolSpec] = []
    for item in tools:
        if isinstance(item, ToolSpec):
            specs.append(item)
            continue
        if not isinstance(item, Mapping):
            raise TypeError(f"a tool must be a ToolSpec or a dict, got {type(item).__name__}")
        inner = item.get("function")
        fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else item
        schema = next(
            (fn[k] for k in ("parameters", "input_schema", "schema") if k in fn), None
        )
        specs.append(
            ToolSpec(name=str(fn["name"]), description=str(fn.get("description") or ""),
                     input_schema=schema)
        )
    return specs


def _conversation_texts(messages: Iterable[Any]) -> list[str]:
    """The environment's replies in order: the texts of the user and tool messages
    between two assistant turns, joined (OpenAI splits one reply over several)."""
    texts: list[str] = []
    reply: list[str] = []
    for message in messages:
        if isinstance(message, Message):
            message = message.model_dump(mode="json")
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "assistant":
            if reply:
                texts.append("\n".join(reply))
            reply = []
        elif message.get("role") in ("user", "tool"):
            reply.extend(_content_texts(message.get("content", message.get("blocks"))))
    if reply:
        texts.append("\n".join(reply))
    return texts


def _content_texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    for part in content or ():
        if not isinstance(part, Mapping):
            continue
        if part.get("type") in ("text", "input_text") and isinstance(part.get("text"), str):
            out.append(part["text"])
        elif part.get("type") == "tool_result":
            out.extend(_content_texts(part.get("content", part.get("blocks"))))
    return out


# -------------------------------------------------------------------------- rules


def _plan(
    history: list[str],
    specs: list[ToolSpec],
    rng: np.random.Generator,
) -> list[Call] | str | None:
    """The rule-based next move for a bundled environment, or None if no rule applies."""
    if not history:
        return None
    names = {s.name for s in specs}
    prompt, last = history[0], history[-1]
    if "submit" in names and (answer := _arithmetic(prompt)) is not None:
        if "Compute" in prompt and names & {"add", "multiply", "negate"}:
            return _toolbox(prompt, history[1:], names)
        return [("submit", {"answer": answer})]
    if "move" in names and "grid" in prompt:
        return _grid_move(prompt, last)
    if names >= {"increment", "decrement"} and (state := _counter(prompt, last)) is not None:
        value, target = state
        if value < target:
            return [("increment", {"amount": min(5, target - value)})]
        if value > target:
            return [("decrement", {})]
        return "The counter is at the target. Done."
    if "Mention:" in prompt and "Write a short" in prompt:
        return _write(prompt, rng)
    return None


def _arithmetic(prompt: str) -> float | None:
    """The answer to the bundled Math and Toolbox questions, or None."""
    if m := re.search(r"(?:What is|Compute) (-?\d+) ([-+*/]) (-?\d+)", prompt):
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else 0.0}[op]
    if m := re.search(r"Compute -\((-?\d+) \+ (-?\d+)\)", prompt):
        return -(int(m.group(1)) + int(m.group(2)))
    if m := re.search(r"has (\d+) \w+ and gets (\d+) more", prompt):
        return int(m.group(1)) + int(m.group(2))
    if m := re.search(r"has (\d+) \w+ and gives away (\d+)", prompt):
        return int(m.group(1)) - int(m.group(2))
    if m := re.search(r"has (\d+) bags with (\d+) ", prompt):
        return int(m.group(1)) * int(m.group(2))
    return None


def _toolbox(prompt: str, replies: list[str], names: set[str]) -> list[Call]:
    """Chain the task's tools: add/multiply the operands, negate if asked, then submit."""
    results = [int(r.strip()) for r in replies if re.fullmatch(r"\s*-?\d+\s*", r)]
    if m := re.search(r"Compute -\((-?\d+) \+ (-?\d+)\)", prompt):
        a, b = int(m.group(1)), int(m.group(2))
        if not results:
            return [("add", {"a": a, "b": b})]
        if len(results) == 1 and "negate" in names:
            return [("negate", {"x": results[0]})]
        return [("submit", {"value": results[-1]})]
    m = re.search(r"Compute (-?\d+) ([+*]) (-?\d+)", prompt)
    assert m is not None
    tool = "add" if m.group(2) == "+" else "multiply"
    if not results and tool in names:
        return [(tool, {"a": int(m.group(1)), "b": int(m.group(3))})]
    answer = results[-1] if results else int(_arithmetic(prompt) or 0)
    return [("submit", {"value": answer})]


def _grid_move(prompt: str, last: str) -> list[Call] | None:
    """One step along a shortest path to the goal, walls from the prompt."""
    size_m = re.search(r"on a (\d+)x\1 grid", prompt)
    goal_m = re.search(r"goal (?:is )?at " + _CELL, prompt)
    here_m = re.search(r"(?:to|at) " + _CELL, last)
    if size_m is None or goal_m is None or here_m is None:
        return None
    size = int(size_m.group(1))
    goal = (int(goal_m.group(1)), int(goal_m.group(2)))
    here = (int(here_m.group(1)), int(here_m.group(2)))
    walls_part = prompt.split("Walls:", 1)[1].split(".", 1)[0] if "Walls:" in prompt else ""
    walls = {(int(r), int(c)) for r, c in re.findall(_CELL, walls_part)}
    step = _first_step(size, here, goal, walls)
    return [("move", {"direction": step})] if step is not None else None


def _first_step(
    size: int, start: tuple[int, int], goal: tuple[int, int], walls: set[tuple[int, int]]
) -> str | None:
    moves = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
    first: dict[tuple[int, int], str | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            return first[cell]
        for name, (dr, dc) in moves.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in walls and nxt not in first:
                first[nxt] = first[cell] or name
                queue.append(nxt)
    return None


def _counter(prompt: str, last: str) -> tuple[int, int] | None:
    target_m = re.search(r"Make it equal (-?\d+)", prompt)
    value_m = re.search(r"counter is (?:now |at )?(-?\d+)", last)
    if target_m is None or value_m is None:
        return None
    return int(value_m.group(1)), int(target_m.group(1))


def _write(prompt: str, rng: np.random.Generator) -> str:
    """A text for a writing task: some of the keywords, roughly the asked length."""
    keywords_m = re.search(r"Mention: (.*?)\. ", prompt + " ")
    target_m = re.search(r"about (\d+) words", prompt)
    topic_m = re.search(r"Write a short .*? about (.*?), about \d+ words", prompt)
    keywords = [k.strip() for k in keywords_m.group(1).split(",")] if keywords_m else []
    target = int(target_m.group(1)) if target_m else 20
    topic = topic_m.group(1) if topic_m else "this"
    length = max(3, round(target * float(rng.uniform(0.5, 1.5))))
    phrases = [f"{k}, {rng.choice(_PHRASES)}" for k in keywords if rng.random() < 0.7]
    phrases += [str(p) for p in rng.choice(_PHRASES, size=len(_PHRASES), replace=False)]
    words = [*topic.split(), "is"]
    for phrase in phrases:
        if len(words) >= length:
            break
        words += [*phrase.split(), "and"]
    text = " ".join(words[:length]).rstrip(",")
    for tail in (" and", " is"):
        text = text.removesuffix(tail)
    return text[:1].upper() + text[1:] + "."
