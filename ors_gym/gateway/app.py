"""The gateway as an ASGI app (starlette): the model wires and the session API.

Model endpoints, per capture session (by URL, or by the API key on the plain
paths): ``POST /s/{sid}/v1/chat/completions`` and ``/v1/chat/completions``
(OpenAI), ``POST /s/{sid}/v1/messages`` and ``/v1/messages`` (Anthropic),
``POST /s/{sid}/v1/responses`` and ``/v1/responses`` (OpenAI Responses),
``GET .../v1/models``. The key is read from ``Authorization: Bearer`` or
``x-api-key``. Session API, for the trainer: ``POST /sessions`` (opens one:
``{"id", "api_key", "openai_base_url", "anthropic_base_url"}``), ``GET
/sessions/{sid}`` (its trajectory as JSON), ``GET /sessions/{sid}/status`` (closed or
not, turns, refused turns: :class:`~ors_gym.gateway.SessionStatus`),
``POST /sessions/{sid}/close`` with
``{"rewards": [...]}`` (ends it; its trajectory), ``DELETE /sessions/{sid}``.
With ``admin_key`` set, the session API asks for it as a bearer token. ``GET /health``
answers 200 once the app serves: a readiness probe that needs no key and opens nothing.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ors_gym.gateway.errors import GatewayError, Wire, error_body
from ors_gym.gateway.gateway import Gateway
from ors_gym.gateway.replies import (
    anthropic_events,
    anthropic_message,
    openai_chunks,
    openai_completion,
)
from ors_gym.gateway.requests import read_request
from ors_gym.gateway.responses import responses_turn

logger = logging.getLogger("ors_gym")

__all__ = ["build_app"]


def build_app(gateway: Gateway, *, admin_key: str | None = None) -> ASGIApp:
    """The ASGI app serving ``gateway``."""

    async def chat(request: Request) -> Response:
        return await _model_turn(gateway, request, "openai")

    async def messages(request: Request) -> Response:
        return await _model_turn(gateway, request, "anthropic")

    async def responses(request: Request) -> Response:
        return await responses_turn(gateway, request, _key(request))

    async def models(request: Request) -> Response:
        wire: Wire = "anthropic" if "anthropic-version" in request.headers else "openai"
        try:
            gateway.find(request.path_params.get("sid"), _key(request))
        except GatewayError as exc:
            return _error(exc, wire)
        card = {"id": gateway.model, "object": "model", "created": 0, "owned_by": "ors-gym"}
        if wire == "anthropic":
            return JSONResponse({"data": [{"id": gateway.model, "type": "model",
                                           "display_name": gateway.model,
                                           "created_at": "1970-01-01T00:00:00Z"}],
                                 "has_more": False, "first_id": gateway.model,
                                 "last_id": gateway.model})
        return JSONResponse({"object": "list", "data": [card]})

    def admin(handler: Callable[[Request], Awaitable[Response]]
              ) -> Callable[[Request], Awaitable[Response]]:
        """A session API route: the admin key checked first (when the gateway has one), a
        ``GatewayError`` answered as ``{"error"}`` with its status."""

        async def route(request: Request) -> Response:
            if admin_key is not None:
                given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
                if not hmac.compare_digest(given.encode(), admin_key.encode()):
                    return JSONResponse({"error": "the session API needs the gateway's admin "
                                                  "key as 'Authorization: Bearer <key>'"},
                                        status_code=401)
            try:
                return await handler(request)
            except GatewayError as exc:
                return JSONResponse({"error": exc.message}, status_code=exc.status)

        return route

    @admin
    async def open_session(request: Request) -> Response:
        info = gateway.info(gateway.open_session().id, gateway.url or _root(request))
        return JSONResponse({"id": info.id, "api_key": info.api_key,
                             "openai_base_url": info.openai_base_url,
                             "anthropic_base_url": info.anthropic_base_url}, status_code=201)

    @admin
    async def session(request: Request) -> Response:
        sid = request.path_params["sid"]
        if request.method == "DELETE":
            gateway.drop_session(sid)
            return Response(status_code=204)
        return JSONResponse(gateway.trajectory(sid).to_dict())

    @admin
    async def status(request: Request) -> Response:
        return JSONResponse(gateway.status(request.path_params["sid"]).to_dict())

    @admin
    async def close(request: Request) -> Response:
        try:
            body = await request.json() if await request.body() else {}
        except ValueError:
            return JSONResponse({"error": "the body must be JSON: {\"rewards\": [...]}"},
                                status_code=400)
        rewards = body.get("rewards", []) if isinstance(body, dict) else None
        if not isinstance(rewards, list) or not all(
                isinstance(r, int | float) and not isinstance(r, bool) for r in rewards):
            return JSONResponse({"error": "'rewards' must be a list of numbers (the "
                                          "episode's step rewards)"}, status_code=400)
        stop = body.get("stop_reason", "completed")
        try:
            traj = gateway.close_session(request.path_params["sid"], rewards, stop_reason=str(stop))
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(traj.to_dict())

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": gateway.model})

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/sessions", open_session, methods=["POST"]),
        Route("/sessions/{sid}", session, methods=["GET", "DELETE"]),
        Route("/sessions/{sid}/close", close, methods=["POST"]),
        Route("/sessions/{sid}/status", status, methods=["GET"]),
    ]
    for prefix in ("", "/s/{sid}"):
        routes += [
            Route(f"{prefix}/v1/chat/completions", chat, methods=["POST"]),
            Route(f"{prefix}/v1/messages", messages, methods=["POST"]),
            Route(f"{prefix}/v1/responses", responses, methods=["POST"]),
            Route(f"{prefix}/v1/models", models, methods=["GET"]),
        ]
    return _TurnsFirst(gateway, Starlette(routes=routes))


class _TurnsFirst:
    """The app, with a model turn (``POST .../v1/chat/completions`` or ``.../v1/messages``,
    the route every agent request takes) sent straight to its handler: the same handler
    and response as through the routes, without the router's and middleware's passes.
    Everything else goes to the Starlette app."""

    def __init__(self, gateway: Gateway, app: Starlette) -> None:
        self.gateway = gateway
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            turn = _turn_path(scope["path"])
            if turn is not None:
                sid, wire = turn
                scope["path_params"] = {} if sid is None else {"sid": sid}
                response = await _model_turn(self.gateway, Request(scope, receive), wire)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _turn_path(path: str) -> tuple[str | None, Wire] | None:
    """``(sid or None, wire)`` when ``path`` is a model turn's route, else None."""
    if path.endswith("/v1/chat/completions"):
        wire: Wire = "openai"
        head = path[: -len("/v1/chat/completions")]
    elif path.endswith("/v1/messages"):
        wire = "anthropic"
        head = path[: -len("/v1/messages")]
    else:
        return None
    if not head:
        return None, wire
    sid = head.removeprefix("/s/")
    if sid == head or not sid or "/" in sid:
        return None  # not a route: the Starlette app answers it (404)
    return sid, wire


async def _model_turn(gateway: Gateway, request: Request, wire: Wire) -> Response:
    try:
        session = gateway.find(request.path_params.get("sid"), _key(request))
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            raise GatewayError(400, f"the request body is not JSON: {exc}") from None
        turn = read_request(body, wire, gateway.reader(session))
        reply = await gateway.turn(session, turn)
    except GatewayError as exc:
        return _error(exc, wire)
    except Exception as exc:  # a bug or a bridge's refusal: the wire's shape, logged
        logger.warning("gateway failed a turn: %s: %s", type(exc).__name__, exc)
        return _error(GatewayError(500, f"the gateway failed: {type(exc).__name__}: {exc}"),
                      wire)
    if not turn.stream:
        body = (openai_completion(reply) if wire == "openai"
                else anthropic_message(reply, turn.show_thinking))
        return JSONResponse(body)
    events = (openai_chunks(reply) if wire == "openai"
              else anthropic_events(reply, turn.show_thinking))
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


def _error(exc: GatewayError, wire: Wire) -> Response:
    return JSONResponse(error_body(exc, wire), status_code=exc.status)


def _key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return request.headers.get("x-api-key") or None


def _root(request: Request) -> str:
    return str(request.base_url).rstrip("/")
