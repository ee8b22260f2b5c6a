"""Errors that name many ids name the first few and count the rest (SPEC §4).

A batch of thousands of long ids that fails must not produce a message of
megabytes: logs, tracebacks and error reporters carry the message whole.
"""

from __future__ import annotations

from a2sql import A2Error, ErrorCode, NewEvent, Store

LONG_ID = "x" * 240
MANY = 5_000
# How many ids a message names before it only counts the rest.
LISTED_AT_MOST = 10


def test_a_completion_whose_returned_ids_collide_lists_ten_of_them(store: Store) -> None:
    """Bounded either way: where the database names the id it found taken (PostgreSQL),
    the message names that one; where it does not say which (SQLite), the message lists
    ten of the batch's and counts the rest."""
    store.append("s", [NewEvent("job", id="job")])
    [event] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    store.append("other", [NewEvent("t", id=f"{LONG_ID}-{MANY - 1}")])
    returned = [NewEvent("child", id=f"{LONG_ID}-{n}") for n in range(MANY)]
    try:
        store.complete_attempt("s", index=1, attempt=event.attempt_count, events=returned)
    except A2Error as error:
        code, message = error.code, error.message
    else:
        raise AssertionError("a returned id that exists was accepted")
    assert code is ErrorCode.PARTIAL_DUPLICATE_BATCH
    assert len(message) < 4_000, len(message)
    named_the_taken_id = message.endswith(f": {f'{LONG_ID}-{MANY - 1}'!r}")
    listed_ten = f"and {MANY - LISTED_AT_MOST} more" in message
    assert named_the_taken_id or listed_ten, message
