"""The HTTP backends: the ORS protocol over HTTP and server-sent events.

``AsyncHttpBackend`` performs the sans-IO operations on asyncio; ``HttpBackend``
is its blocking face (``backends._face``). Both take one ``HttpOptions``. The
modules, in reading order:

- ``options``: every option, declared once; ``_settings``: the options in
  force, the server and the credentials; ``_codec``: headers, JSON, answer
  bodies (gzip undone within the size cap), statuses as errors;
- ``_retry``: what is retried and after how long, and the process's rate
  limit per server and key (429s); ``_sse``: an SSE answer parsed by
  httpx-sse and reassembled; ``_steps``: what an operation asks the driver to do
  (and the httpx timeouts of each), and the errors of requests that got no answer;
- ``_exchange``: one JSON request, redirected and retried; ``_calls``: one tool
  call, resent or resumed only when safe; ``_ops``: every ORS endpoint as an
  operation, made with one ``Exchange`` and its ``ToolCalls``;
- ``async_``: the driver; ``sync``: its blocking face;
- ``transport/``: how the bytes move, a folder a reader can skip
  (``_pool.PooledTransport``, the httpx transport ``async_`` sends through by
  default, over ``_http11``'s lean HTTP/1.1 pool and ``_aio``'s network
  backend on asyncio; httpx's client instead when a proxy variable is set;
  ``_pool.failure_of``: what an httpx exception means to the operations).
"""

from ors_gym.backends.http._settings import API_KEY_VAR, hosted_location, platform_api_location
from ors_gym.backends.http.async_ import AsyncHttpBackend
from ors_gym.backends.http.options import HttpOptions
from ors_gym.backends.http.sync import HttpBackend
from ors_gym.backends.http.transport._pool import (
    EnvProxyTransport,
    PooledTransport,
    pooled_transport,
)

__all__ = [
    "API_KEY_VAR",
    "AsyncHttpBackend",
    "EnvProxyTransport",
    "HttpBackend",
    "HttpOptions",
    "PooledTransport",
    "hosted_location",
    "platform_api_location",
    "pooled_transport",
]
