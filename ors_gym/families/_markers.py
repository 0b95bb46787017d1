"""A tokenizer of raw text over a wire format's special tokens.

renderers parses a completion from token ids. Its renderers accept any object
with the :class:`renderers.Tokenizer` surface (a "bring your own" adapter is
documented there), so :class:`MarkerTokenizer` turns raw completion text into
ids in which each of the format's special tokens is one id and every other
character is one id: renderers' own parsers then read text exactly as they
read a real tokenizer's ids, and the two paths cannot drift apart.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from ors_gym.families._formats import FORMATS

_CHAR_BASE = 1_000  # ids below it are markers (0 is the unknown token)


class MarkerTokenizer:
    """Text <-> ids: the given markers are single ids, other characters one id each."""

    unk_token_id: int = 0
    chat_template: str = ""

    def __init__(self, name: str, markers: Sequence[str], eos: str) -> None:
        self.name_or_path = f"ors-gym/{name}-text"
        self._markers = tuple(dict.fromkeys(markers))
        assert len(self._markers) < _CHAR_BASE
        self._ids = {marker: i + 1 for i, marker in enumerate(self._markers)}
        self.eos_token_id = self._ids[eos]
        by_length = sorted(self._markers, key=len, reverse=True)
        self._split = re.compile("|".join(map(re.escape, by_length)))

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        ids: list[int] = []
        pos = 0
        for match in self._split.finditer(text):
            ids.extend(_CHAR_BASE + ord(c) for c in text[pos : match.start()])
            ids.append(self._ids[match.group()])
            pos = match.end()
        ids.extend(_CHAR_BASE + ord(c) for c in text[pos:])
        return ids

    def decode(self, token_ids: Any, *args: Any, **kwargs: Any) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        markers = self._markers
        return "".join(
            chr(i - _CHAR_BASE) if i >= _CHAR_BASE else markers[i - 1] if i else ""
            for i in token_ids
        )

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str):
            return self._ids.get(tokens, self.unk_token_id)
        return [self._ids.get(token, self.unk_token_id) for token in tokens]


def cut_at_stop(fmt: str, text: str, *, keep: bool = False) -> str:
    """``text`` up to the first token a turn of format ``fmt`` ends on (that token kept
    when ``keep``: harmony's parser reads it as the end of the turn's last message)."""
    cut = len(text)
    for stop in FORMATS[fmt].stops:
        at = text.find(stop, 0, cut)
        if at != -1:
            cut = at + len(stop) if keep else at
    return text[:cut]


@functools.cache
def marker_tokenizer(fmt: str) -> MarkerTokenizer:
    """The :class:`MarkerTokenizer` of format ``fmt``'s special tokens."""
    row = FORMATS[fmt]
    return MarkerTokenizer(fmt, row.markers, row.eos)


@functools.cache
def renderer_for(fmt: str) -> tuple[MarkerTokenizer, Any]:
    """(marker tokenizer, renderers renderer) that parse format ``fmt``'s text."""
    try:
        import renderers
    except ImportError as exc:
        raise ImportError(
            f"reading the {fmt!r} tool-call format needs the renderers library: "
            "pip install 'ors-gym[tokens]'"
        ) from exc
    tokenizer = marker_tokenizer(fmt)
    return tokenizer, renderers.create_renderer(tokenizer, renderers.config_from_name(fmt))
