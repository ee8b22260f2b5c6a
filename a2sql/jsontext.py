"""JSON text as a2sql stores it: one encoder for every value it writes, one decoder.

Stored text is compact, keeps key order and non-ASCII characters as they
are, and never holds NaN or infinities (validation refuses them first).
"""

from __future__ import annotations

import json
from typing import Any

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_DECODER = json.JSONDecoder()


def encode_json(value: Any) -> str:
    """The stored text of a valid JSON value: compact, key order kept, non-ASCII as is."""
    return _ENCODER.encode(value)


def decode_json(text: str) -> Any:
    """The value of JSON ``text``, as ``json.loads`` gives it (and its errors)."""
    # Stored text starts with its value and ends with it: raw_decode skips the
    # whitespace scans of decode(), which handles any other text.
    try:
        value, end = _DECODER.raw_decode(text)
    except ValueError:
        return _DECODER.decode(text)
    return value if end == len(text) else _DECODER.decode(text)
