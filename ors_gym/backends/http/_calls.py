"""One ORS tool call, sans-IO: an SSE answer reassembled, resent only when safe.

``ToolCalls.stream`` POSTs a ``/call``-style request and reassembles its SSE
answer. When a call may be sent again, so that a tool never runs twice:

- after the ``task_id`` event (the server's acknowledgement): a dropped
  stream is re-POSTed with that id, and the server awaits or replays the one
  run;
- before it, an answer with a status (429, 502, 503, 504 from the server or
  any front door, whatever its body) means the call's stream never began: the
  ORS server starts a tool only after it sent its own 200 (the reference
  server writes its headers, then starts the task that runs the tool, then
  sends ``task_id``), so the call is sent again, with ``task_id`` null (the
  reference server refuses a ``task_id`` it did not issue, so a client cannot
  name its call in advance);
- before it, a request never sent (a refused or timed-out connect), or one
  written on a kept-alive connection that the server closed while it sat idle
  (the transport reports it as ``stale``: the connection had served earlier
  requests and ended before a single byte of this answer), is sent again: the
  server never read it;
- a connection cut after the request went out and before ``task_id`` arrived
  is not: the tool may be running, and resending could run it twice; that call
  raises ``OrsConnectionError`` (the episode's state is uncertain).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ors_gym.backends.http._codec import encode_json, mask, status_error
from ors_gym.backends.http._exchange import Exchange, log_answer
from ors_gym.backends.http._retry import RetryHint, add_note, retry_delay, retry_hint
from ors_gym.backends.http._settings import Where
from ors_gym.backends.http._sse import HEARTBEAT_S, StreamAssembler
from ors_gym.backends.http._steps import (
    Answer,
    CallDeadline,
    Failure,
    Op,
    Sleep,
    Stream,
    Streamed,
    call_timeout_error,
)
from ors_gym.errors import OrsConnectionError, OrsError, OrsToolError

__all__ = ["ToolCalls"]

logger = logging.getLogger("ors_gym.http")


class ToolCalls:
    """SSE tool calls (``/call``, ``/score_group``) over an ``Exchange``: its headers,
    retry budgets, redirects and the values its errors hide."""

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange

    def stream(self, path: str, body: dict[str, Any], *, what: str, where: Where) -> Op[Any]:
        """POST a ``/call``-style request and reassemble its SSE answer, resuming drops
        (see the module docstring for when a call is sent again)."""
        x = self.exchange
        s = x.settings
        headers = x.headers(where.session_id)
        budget = x.budget()
        deadline = (None if s.call_timeout is None else
                    CallDeadline(s, x.clock, x.clock() + s.call_timeout, what, where))
        task_id: str | None = None
        target, hops = path, 0
        returned = False
        try:
            while True:
                hint: RetryHint | None = None
                safe = False  # the failure proves the call did not run
                read_timeout = HEARTBEAT_S
                if deadline is not None:
                    read_timeout = min(read_timeout, max(deadline.left(), 0.001))
                sent_task_id = task_id
                sink = StreamAssembler(max_bytes=s.max_response_bytes, what=what, where=where,
                                       deadline=deadline)
                content = encode_json({**body, "task_id": sent_task_id}, what=what)
                pool_timeout = None if deadline is None else max(deadline.left(), 0.001)
                reply = yield Stream(target, headers, content, read_timeout, sink, what, where,
                                     pool_timeout)
                task_id = sink.task_id or task_id
                if isinstance(reply, Streamed):
                    log_answer("POST", target, 200, reply.elapsed)
                    budget.through(x.clock())
                    if sink.done:
                        result = _finish(sink, sent_task_id, what, where, x.hidden)
                        returned = True
                        return result
                    failure: OrsError = OrsConnectionError(
                        f"{what}: the stream ended before its result", **where.kw()
                    )
                elif isinstance(reply, Answer):
                    moved = x.answered(reply, "POST", target, headers, hops, budget, what,
                                       where)
                    if moved is not None:  # a redirect answer: the call did not run
                        (target, headers), hops = moved
                        continue
                    failure = status_error(reply.status, x.detail(reply.body), what=what,
                                           where=where, session=True)
                    hint = retry_hint(reply.status, reply.headers)
                    if hint is None:
                        raise failure
                    # An answer with a status came before the call's stream: the server had
                    # not started the tool (see the module docstring for why).
                    safe = True
                    if task_id is None:
                        add_note(failure, "the tool had not started")
                else:
                    assert isinstance(reply, Failure), reply
                    if deadline is not None:
                        deadline()
                    if reply.kind == "stale" and task_id is None:
                        logger.debug("%s: %s; the server never read it, sending it again",
                                     what, reply.detail)
                        continue
                    failure = self._lost(reply, task_id, read_timeout, what, where)
                    if reply.final and task_id is None:
                        raise failure
                    safe = reply.not_sent
                if task_id is None and not safe:
                    raise OrsConnectionError(
                        f"{failure.message}; the server had not acknowledged the call, so "
                        "ors_gym cannot know whether the tool ran and does not resend it "
                        "(it could run twice); the episode's state is uncertain, call reset()",
                        **where.kw(),
                    )
                delay = retry_delay(budget, hint, failure, what, x.clock())
                if deadline is not None:
                    if hint is not None and hint.limited and delay >= deadline.left():
                        raise call_timeout_error(s, what, where)  # never sooner than asked
                    delay = min(delay, deadline.left())
                logger.debug("POST %s: %s; %s in %.2f s", path, failure.message,
                             "resuming" if task_id else "retrying", delay)
                yield Sleep(delay)
        finally:
            budget.finish(x.clock(), gave_up=not returned)

    def _lost(self, reply: Failure, task_id: str | None, read_timeout: float, what: str,
              where: Where) -> OrsError:
        """The error for a stream that got no (or no whole) answer."""
        if reply.kind == "read_timeout":
            return OrsConnectionError(
                f"{what}: the stream went silent for {read_timeout:.0f} s although "
                "the server pings every 10 s",
                **where.kw(),
            )
        if task_id is not None and not reply.final:
            return OrsConnectionError(
                f"{what}: the stream was cut after the server acknowledged the call "
                f"as task {task_id} ({reply.error_type}: {reply.detail or 'no detail'}); "
                "it is resumed by that task_id, so the tool runs once",
                **where.kw(),
            )
        return self.exchange.transport_error(what, where, reply)


def _finish(sink: StreamAssembler, sent_task_id: str | None, what: str, where: Where,
            hidden: Iterable[str]) -> Any:
    """A finished stream's result, or the error it carried (``hidden`` values masked)."""
    if sink.error is None:
        return sink.result()
    if sent_task_id is not None and sink.error.strip() == "unknown task_id":
        raise OrsConnectionError(
            f"{what}: the stream dropped and the server no longer knows call "
            f"{sent_task_id} (it restarted, or the result expired 60 s after the tool "
            "finished); the tool may have run, call reset()",
            **where.kw(),
        )
    raise OrsToolError(
        f"{what} raised on the server: {mask(sink.error, hidden)}. The tool raised on the "
        "server; this is a bug in the environment, not the agent",
        **where.kw(),
    )
