"""JSON text as a2sql stores it: one encoder and one decoder, kept for every call.

The standard library's entry points build their machinery anew on every
call: ``JSONEncoder.encode`` its C encoder (~0.6 µs), ``json.loads`` a
decode through two whitespace regexes (~0.5 µs). Payloads are encoded on
every append and decoded on every event read, so both are kept here.
"""

from __future__ import annotations

import json
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# The kept C encoder does not track containers to find cycles: it only
# encodes values that passed validate.json_value's checks, whose depth limit
# stops a cycle, and lists of names.
_C_ENCODER = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None,  # markers: no cycle tracking
        _ENCODER.default,
        encode_basestring,  # ensure_ascii=False
        None,  # indent
        ":",
        ",",
        False,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )
)
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def encode_json(value: Any) -> str:
    """The stored text of a valid JSON value: compact, key order kept, non-ASCII as is."""
    if _C_ENCODER is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))


def decode_json(text: str) -> Any:
    """The value of JSON ``text``, as ``json.loads`` gives it (and its errors)."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:  # nothing at the start (whitespace, say): json.loads tells
        return json.loads(text)
    if end != len(text):  # text after the value: whitespace, or an error json.loads tells
        return json.loads(text)
    return value
