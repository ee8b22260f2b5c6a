"""An event id that is taken is named where the database says which, and the message
does not blame a concurrent writer that may not exist."""

from __future__ import annotations

import uuid

import pytest

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent


def test_a_generated_id_that_repeats_one_says_so(url: str) -> None:
    """An ids function that repeats itself: the second append fails as a duplicate batch
    naming a generated id (and, on PostgreSQL, the id itself); the first stays."""
    fixed = f"fixed-{uuid.uuid4()}"
    with a2sql.create_store(url, migrate=True, ids=lambda: fixed) as store:
        store.append("a", [NewEvent("t", 1)])
        with pytest.raises(A2Error) as raised:
            store.append("b", [NewEvent("t", 2)])
        assert raised.value.code is ErrorCode.PARTIAL_DUPLICATE_BATCH
        message = raised.value.message
        assert "a generated id" in message and "concurrent writer" not in message
        if store.engine.dialect.name == "postgresql":
            assert message.startswith(f"event id {fixed!r} already exists")
        assert [e.id for e in store.read("a")] == [fixed] and store.read("b") == []


@pytest.mark.parametrize("lane", [None, "L"])
def test_a_returned_id_taken_in_another_session_is_named(url: str, lane: str | None) -> None:
    """complete_attempt returning an id another session holds: on PostgreSQL the message
    names that id alone (both the one-statement path, no lane, and the full path); on
    SQLite, which does not say, the batch's ids. The event stays unprocessed."""
    with a2sql.create_store(url, migrate=True) as store:
        store.append("other", [NewEvent("t", 0, id="taken")])
        store.append("s", [NewEvent("t", 1, id="e1")])
        store.claim_available("s", holder="w", ttl_ms=60_000)
        returned = [NewEvent("r", 1, id="fresh", lane=lane), NewEvent("r", 2, id="taken")]
        with pytest.raises(A2Error) as raised:
            store.complete_attempt("s", index=1, attempt=1, events=returned)
        assert raised.value.code is ErrorCode.PARTIAL_DUPLICATE_BATCH
        which = (
            "'taken'" if store.engine.dialect.name == "postgresql" else "one of 'fresh', 'taken'"
        )
        assert raised.value.message == (
            f"a returned event id already exists, in this session or another: {which}"
        )
        [event] = store.read("s")
        assert event.processed_at is None
