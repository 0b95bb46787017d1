"""``HttpBackend``: the blocking face of ``AsyncHttpBackend`` (see ``backends._face``)."""

from __future__ import annotations

from typing import Any

from ors_gym.backends._face import BlockingFace, blocking
from ors_gym.backends.http._settings import Settings
from ors_gym.backends.http.async_ import AsyncHttpBackend
from ors_gym.backends.http.options import HttpOptions

__all__ = ["HttpBackend"]


class HttpBackend(BlockingFace[AsyncHttpBackend]):
    """Talks to an ORS server (``ors-gym serve``, an SDK ``Server``, a hosted gateway).

    Takes what ``AsyncHttpBackend`` takes: ``base_url`` (or a hosted
    ``deployment``), ``api_key``, and the ``HttpOptions`` as ``options=`` or
    by name (``HttpBackend(url, call_timeout=60)``). Every method is the async
    backend's, run to its result; the retries, resumes, errors and results are
    its own.
    """

    _runtime_name = "ors-http"

    def __init__(
        self,
        base_url: str | None = None,
        *,
        deployment: str | None = None,
        variant: str | None = None,
        api_key: str | None = None,
        options: HttpOptions | None = None,
        **option_values: Any,
    ) -> None:
        super().__init__(AsyncHttpBackend(
            base_url, deployment=deployment, variant=variant, api_key=api_key, options=options,
            _set_as="HttpBackend", **option_values,
        ))

    @property
    def settings(self) -> Settings:
        """The validated settings: the options, the server, the credentials."""
        return self.core.settings

    @property
    def options(self) -> HttpOptions:
        """The HTTP options in force."""
        return self.core.options

    @property
    def base_url(self) -> str:
        return self.core.base_url

    health = blocking(AsyncHttpBackend.health)
    version = blocking(AsyncHttpBackend.version)
    probe = blocking(AsyncHttpBackend.probe)
