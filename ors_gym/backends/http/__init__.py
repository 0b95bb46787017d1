"""The HTTP backends: the ORS protocol over HTTP and server-sent events.

``AsyncHttpBackend`` drives the sans-IO operations on asyncio; ``HttpBackend``
is its blocking face (run through ``ors_gym._runtime``). The modules, in
reading order:

- ``_settings``: the options, validated once; ``_codec``: headers, JSON,
  answer bodies (gzip undone within the size cap), statuses as errors;
- ``_retry``: what is retried and after how long; ``_sse``: an SSE answer
  parsed (by httpx-sse's decoders) and reassembled; ``_steps``: what an
  operation asks a driver to do;
- ``_exchange``: one request or tool call, redirected, retried or resumed;
  ``_ops``: every ORS endpoint as an operation;
- ``_httpx``: what the backend shares with httpx; ``_aio``: httpcore's
  network backend on asyncio; ``_http11``: a lean HTTP/1.1 pool over it;
  ``_pool``: that pool as an httpx transport (``PooledTransport``), which
  ``async_`` sends through; ``async_``: the driver; ``sync``: its blocking face.
"""

from ors_gym.backends.http._options import HttpOptions
from ors_gym.backends.http._pool import PooledTransport, pooled_client
from ors_gym.backends.http.async_ import AsyncHttpBackend
from ors_gym.backends.http.sync import HttpBackend

__all__ = [
    "AsyncHttpBackend",
    "HttpBackend",
    "HttpOptions",
    "PooledTransport",
    "pooled_client",
]
