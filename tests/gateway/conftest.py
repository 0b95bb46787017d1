"""The gateway's tests share, per package, the fixtures of ``tests._gateway_fixtures``: a
tiny Qwen3 tokenizer, a stand-in token backend whose script each test sets, and a gateway
over it served by uvicorn."""

from __future__ import annotations

import importlib.util

import pytest

_NEEDS = ("transformers", "trl", "openai", "anthropic", "starlette", "uvicorn")
if any(importlib.util.find_spec(m) is None for m in _NEEDS):
    pytest.skip(f"needs {', '.join(_NEEDS)} (the dev extras)", allow_module_level=True)

from tests._gateway_fixtures import backend, gateway, script, tok  # noqa: E402,F401
