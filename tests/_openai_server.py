"""An OpenAI-compatible chat-completions server for the tests, answering from ``ScriptedLLM``.

Real HTTP on 127.0.0.1 (an ephemeral port, a thread per request), written for
the tests: ``POST /v1/chat/completions`` reads the conversation and the tools
as the ``openai`` client sends them and answers a chat completion whose
message ``ScriptedLLM`` writes (seeded by the conversation, so replies do not
depend on the order requests arrive in), with token usage counted as one
token per 4 characters. A request with ``"stream": true`` gets the same answer as
server-sent events (``chat.completion.chunk`` deltas, a usage chunk when
``stream_options.include_usage`` asks for it, then ``data: [DONE]``), as OpenAI
streams. ``latency`` seconds stand for the model's thinking
time on each request; ``fail`` maps a request number (1-based, in arrival
order) to the HTTP status that request gets instead of an answer. ``respond``
(``respond(messages, tools) -> assistant message dict``) writes the replies
instead of ``ScriptedLLM``, for a test that needs particular answers; a request
it raises on is answered 500, as a failing model provider would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ors_gym.eval.models import conversation_seed
from ors_gym.scripted import ScriptedLLM

__all__ = ["OpenAIServer", "stream_chunks"]


class OpenAIServer:
    """``with OpenAIServer() as srv: AsyncOpenAI(base_url=srv.base_url)``."""

    def __init__(self, *, latency: float = 0.0, fail: Mapping[int, int] | None = None,
                 seed: int = 0,
                 respond: Callable[[list[Any], list[Any]], dict[str, Any]] | None = None) -> None:
        self.latency = latency
        self.respond = respond
        self.fail = dict(fail or {})
        self.seed = seed
        self.requests = 0
        self.failed = 0
        self.models: set[str] = set()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def answer(self, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and JSON body for one request ``body``."""
        with self._lock:
            self.requests += 1
            number = self.requests
            self.models.add(str(body.get("model")))
        if self.latency:
            time.sleep(self.latency)  # the model's thinking time, not a synchronisation
        if number in self.fail:
            with self._lock:
                self.failed += 1
            return self.fail[number], {"error": {"message": f"request {number} fails on purpose",
                                                 "type": "server_error", "code": None}}
        messages, tools = list(body["messages"]), list(body.get("tools") or [])
        if self.respond is not None:
            try:
                message = self.respond(messages, tools)
            except Exception as exc:
                with self._lock:
                    self.failed += 1
                return 500, {"error": {"message": f"request {number} failed: {exc}",
                                       "type": "server_error", "code": None}}
        else:
            llm = ScriptedLLM("openai", seed=conversation_seed(messages, self.seed))
            message = llm.act(messages, tools)
        prompt_tokens = len(json.dumps(messages)) // 4
        completion_tokens = max(1, len(json.dumps(message)) // 4)
        return 200, {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{
                "index": 0, "message": message, "logprobs": None,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }


def _handler(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body leave at once, no 40 ms ACK wait

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(400, {"error": {"message": "the body is not JSON"}})
                return
            status, payload = server.answer(body)
            if status == 200 and body.get("stream"):
                usage = (body.get("stream_options") or {}).get("include_usage", False)
                self._send_stream(stream_chunks(payload, include_usage=bool(usage)))
            else:
                self._send(status, payload)

        def _send_stream(self, chunks: list[dict[str, Any]]) -> None:
            events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
            data = "".join([*events, "data: [DONE]\n\n"]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


def stream_chunks(completion: Mapping[str, Any], *,
                  include_usage: bool = False) -> list[dict[str, Any]]:
    """A chat completion as the ``chat.completion.chunk`` objects OpenAI streams for it."""
    choice = completion["choices"][0]
    message = choice["message"]
    head = {key: completion[key] for key in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                      "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{
            "index": index, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }]}))
        chunks.append(chunk({"tool_calls": [{
            "index": index, "function": {"arguments": call["function"]["arguments"]},
        }]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks
