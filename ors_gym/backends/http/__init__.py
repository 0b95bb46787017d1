"""The HTTP backends: the ORS protocol over HTTP and server-sent events.

``AsyncHttpBackend`` performs the sans-IO operations on asyncio; ``HttpBackend``
is its blocking face (``backends._face``). Both take one ``HttpOptions``. The
modules, in reading order:

- ``_options``: every option, declared once; ``_settings``: the options in
  force, the server and the credentials; ``_codec``: headers, JSON, answer
  bodies (gzip undone within the size cap), statuses as errors;
- ``_retry``: what is retried and after how long; ``_sse``: an SSE answer
  parsed by httpx-sse and reassembled; ``_steps``: what an operation asks the driver to do;
- ``_exchange``: one request or tool call, redirected, retried or resumed;
  ``_ops``: every ORS endpoint as an operation;
- ``_httpx``: httpx timeouts and failures for a step; ``_aio``: httpcore's
  network backend on asyncio; ``_http11``: a lean HTTP/1.1 pool over it;
  ``_pool``: that pool as an httpx transport (``PooledTransport``), the
  default one ``async_`` sends through; ``async_``: the driver; ``sync``: its
  blocking face.
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
