"""An oversized JSON value is refused before it is encoded (SPEC §4).

Measuring the encoded text needs the text: a 200-million-character string
once cost 190 MiB to refuse. A string longer than the limit cannot encode
shorter, so a lower bound on the encoded length, taken while the value is
checked, refuses it before any encoding.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2sql import A2Error, ErrorCode
from a2sql.core.arguments import Limits, json_value
from a2sql.core.jsontext import encode_json

FIFTY_MILLION = 50_000_000
# What refusing may allocate: far below one copy of the value (50 MB).
BUDGET = 1_000_000

SHAPES: dict[str, Callable[[str], Any]] = {
    "string": lambda big: big,
    "in-a-dict": lambda big: {"k": 1, "big": big},
    "in-a-list": lambda big: [1, None, big],
    "as-a-key": lambda big: {big: 1},
    "nested": lambda big: {"a": [{"b": [big]}]},
    "many-small": lambda big: ["x" * 1000] * (len(big) // 1000),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_value_far_over_the_limit_is_refused_without_encoding_it(shape: str) -> None:
    value = SHAPES[shape]("x" * FIFTY_MILLION)
    tracemalloc.start()
    try:
        with pytest.raises(A2Error) as raised:
            json_value(value, "payload", Limits())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert "payload" in raised.value.message and "limit" in raised.value.message
    assert peak < BUDGET, f"refusing allocated {peak} bytes"


@pytest.mark.parametrize(
    "value",
    [
        "x" * 98,
        ["x" * 48, "y" * 46],
        {"k" * 40: "v" * 53},
        [None, True, False, 1, 2.5, "é" * 40, {"a": []}],
        '"\\' * 20,  # escapes encode longer than the bound: the encoded length decides
    ],
)
def test_values_near_the_limit_are_measured_as_encoded(value: Any) -> None:
    """The bound only ever refuses what the encoded text would refuse."""
    limit = len(encode_json(value))
    assert json_value(value, "payload", Limits(max_json_chars=limit)) == encode_json(value)
    with pytest.raises(A2Error):
        json_value(value, "payload", Limits(max_json_chars=limit - 1))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(value=json_values)
def test_the_bound_never_exceeds_the_encoded_length(value: Any) -> None:
    """What the bound refuses, the encoded length would have refused too."""
    limit = len(encode_json(value))
    assert json_value(value, "payload", Limits(max_json_chars=limit)) == encode_json(value)
