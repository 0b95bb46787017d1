"""A model endpoint that captures the exact tokens of agents running their own loop.

A capture gateway is a ``TokenEnv`` turned inside out: the agent (an OpenAI or
Anthropic SDK client, a coding harness, a hosted environment's own agent) sends
chat requests; the model family's bridge turns them into ids (append-only while
the conversation only grows, a new row when the agent rewrites history); a
token-in/token-out backend (:mod:`ors_gym.sampling`) samples; the family's parser
answers in the wire's own shape; and the turn is recorded only once the reply is
built. Each capture session's record is a :class:`~ors_gym.tokens.Trajectory`,
given its ORS return when the session is closed with the episode's rewards.

:class:`Gateway` (in-process), :class:`GatewayThread` / :func:`serve` (served by
uvicorn), :func:`capture` (an ``OrsEnv`` whose hosted agent talks to the gateway),
:func:`as_batch` (N sessions as a trainer batch), and, for small runs,
:class:`~ors_gym.sampling.TransformersSampler` (a local model). Needs the ``gateway`` extra.
"""

from __future__ import annotations

from ors_gym.gateway.attach import AsyncCaptureEpisodes, CaptureEpisodes, capture
from ors_gym.gateway.errors import GatewayError
from ors_gym.gateway.gateway import Gateway, SessionInfo, SessionStatus
from ors_gym.gateway.serve import GatewayThread, serve
from ors_gym.gateway.trajectories import as_batch
from ors_gym.sampling import TransformersSampler

__all__ = [
    "AsyncCaptureEpisodes",
    "CaptureEpisodes",
    "Gateway",
    "GatewayError",
    "GatewayThread",
    "SessionInfo",
    "SessionStatus",
    "TransformersSampler",
    "as_batch",
    "capture",
    "serve",
]
