"""tinker-cookbook before 0.6.1: its Qwen3 renderer races on a shared tokenizer.

Its ``Qwen3Renderer.render_message`` encodes the message content with
``split_special_tokens=True`` and the header without, on the one tokenizer
``get_tokenizer`` caches, and a transformers fast tokenizer writes that flag on
its Rust backend at each change: two renders at once (``EnvFromMessageEnv``
renders in worker threads, a group's episodes at the same time) fail with
"RuntimeError: Already borrowed". 0.6.1 encodes content on a private copy. For
the versions before it, renders and parses are taken one at a time.
"""

from __future__ import annotations

import threading
from typing import Any

from ors_gym._compat._versions import within

__all__ = ["one_at_a_time"]

#: Held around every render and parse of the renderers it wraps (they may share a tokenizer).
_LOCK = threading.Lock()


def one_at_a_time(renderer: Any) -> Any:
    """``renderer``, rendering and parsing one call at a time where tinker-cookbook's own
    renderers race (before 0.6.1); as it is otherwise."""
    if within("tinker-cookbook", (0,), (0, 6, 1)):
        return _Serialized(renderer)
    return renderer


class _Serialized:
    """A renderer whose ``build_generation_prompt`` and ``parse_response`` hold a lock."""

    def __init__(self, renderer: Any) -> None:
        self._renderer = renderer

    def build_generation_prompt(self, *args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return self._renderer.build_generation_prompt(*args, **kwargs)

    def parse_response(self, *args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return self._renderer.parse_response(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._renderer, name)
