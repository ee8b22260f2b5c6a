"""JSON text as a2sql stores it: one encoder for every value it writes, one decoder.

Stored text is compact, keeps key order and non-ASCII characters as they
are, and never holds NaN or infinities (validation refuses them first).

Neither depends on ``sys.get_int_max_str_digits()``: a process that lowers
Python's limit on int/str conversion (``PYTHONINTMAXSTRDIGITS``, down to 640
digits) still reads and writes every int a2sql accepts (up to 13,000 bits).
The fast paths are json's own; the limit only sends a value down a slower one.
"""

from __future__ import annotations

import json
from typing import Any

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_SORTING_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
)
# Fewer digits than the smallest limit Python can be set to: always convertible.
_CHUNK_DIGITS = 600
_CHUNK = 10**_CHUNK_DIGITS


def int_from_text(text: str) -> int:
    """``int(text)`` of a JSON integer of any length, whatever Python's digit limit."""
    if len(text) <= _CHUNK_DIGITS:
        return int(text)
    digits = text.removeprefix("-")
    value = 0
    for start in range(0, len(digits), _CHUNK_DIGITS):
        chunk = digits[start : start + _CHUNK_DIGITS]
        value = value * 10 ** len(chunk) + int(chunk)
    return -value if text.startswith("-") else value


def int_text(value: int) -> str:
    """``str(value)`` of an int of any size, whatever Python's digit limit."""
    rest = abs(int(value))
    if rest < _CHUNK:
        return str(int(value))
    chunks = []
    while rest:
        rest, chunk = divmod(rest, _CHUNK)
        chunks.append(f"{chunk:0{_CHUNK_DIGITS}d}")
    digits = "".join(reversed(chunks)).lstrip("0")
    return f"-{digits}" if value < 0 else digits


_DECODER = json.JSONDecoder()
# For ints past the digit limit only: parse_int is a Python call per int.
_BIG_INT_DECODER = json.JSONDecoder(parse_int=int_from_text)


def encode_json(value: Any, *, sort_keys: bool = False) -> str:
    """The stored text of a valid JSON value: compact, key order kept, non-ASCII as is.

    ``sort_keys`` gives a canonical text instead (equal for equal values).
    """
    try:
        return (_SORTING_ENCODER if sort_keys else _ENCODER).encode(value)
    except ValueError:
        # An int past Python's digit limit: json cannot print it.
        return "".join(_pieces(value, sort_keys))


def _pieces(value: Any, sort_keys: bool) -> list[str]:
    """``encode_json(value)`` in pieces, printing ints with ``int_text``.

    ``value`` is valid JSON (checked by a2sql.core.arguments), subclasses included.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return [int_text(value)]
    if isinstance(value, dict):
        items = sorted(value.items()) if sort_keys else value.items()
        pieces = ["{"]
        for position, (key, item) in enumerate(items):
            pieces += [",", _ENCODER.encode(key), ":"] if position else [_ENCODER.encode(key), ":"]
            pieces += _pieces(item, sort_keys)
        return [*pieces, "}"]
    if isinstance(value, list | tuple):
        pieces = ["["]
        for position, item in enumerate(value):
            if position:
                pieces.append(",")
            pieces += _pieces(item, sort_keys)
        return [*pieces, "]"]
    return [_ENCODER.encode(value)]  # str, float, bool, None


def decode_json(text: str) -> Any:
    """The value of JSON ``text``, as ``json.loads`` gives it (and its errors)."""
    try:
        return _decode(_DECODER, text)
    except ValueError:
        # Invalid text fails again here; an int past Python's digit limit does not.
        return _decode(_BIG_INT_DECODER, text)


def _decode(decoder: json.JSONDecoder, text: str) -> Any:
    # Stored text starts with its value and ends with it: raw_decode skips the
    # whitespace scans of decode(), which handles any other text.
    try:
        value, end = decoder.raw_decode(text)
    except ValueError:
        return decoder.decode(text)
    return value if end == len(text) else decoder.decode(text)
