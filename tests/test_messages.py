"""How messages name lists: bounded, whatever the list's length."""

from __future__ import annotations

from a2sql.core.errors import listed


def test_listed_names_at_most_ten_and_counts_the_rest() -> None:
    assert listed([]) == "none"
    assert listed(["a"]) == "'a'"
    assert listed(["a", "b"]) == "'a', 'b'"
    assert listed([str(n) for n in range(10)]) == ", ".join(repr(str(n)) for n in range(10))
    many = listed([str(n) for n in range(12)])
    assert many == ", ".join(repr(str(n)) for n in range(10)) + " and 2 more"
    assert listed(range(100), at_most=3) == "0, 1, 2 and 97 more"
