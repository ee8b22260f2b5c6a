"""Errors that name many ids name the first few and count the rest (SPEC §4).

A batch of thousands of long ids that fails must not produce a message of
megabytes: logs, tracebacks and error reporters carry the message whole.
"""

from __future__ import annotations

from a2sql import A2Error, ErrorCode, NewEvent, Store
from a2sql.core.errors import LISTED_AT_MOST

LONG_ID = "x" * 240
MANY = 5_000


def test_a_completion_whose_returned_ids_collide_lists_ten_of_them(
    store: Store, engine_kind: str
) -> None:
    """Bounded either way: PostgreSQL names the one id taken, SQLite (which does not say
    which) lists ten of the batch's and counts the rest."""
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
    if engine_kind == "postgres":
        assert message.endswith(f": {f'{LONG_ID}-{MANY - 1}'!r}")
    else:
        assert f"and {MANY - LISTED_AT_MOST} more" in message
