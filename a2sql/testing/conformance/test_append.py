"""SPEC §3 append: duplicates, idempotent replay, the attempt fence, indexes, settled events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import pytest

import a2sql
from a2sql import JSON, A2Error, ErrorCode, EventCause, NewEvent, Store
from a2sql.testing import FakeClock

START = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
START_MS = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def raises_code(code: ErrorCode) -> pytest.RaisesExc[A2Error]:
    """``pytest.raises`` for an ``A2Error`` carrying ``code``."""
    return pytest.raises(A2Error, check=lambda error: error.code == code)


def claim_one(store: Store, session_id: str, holder: str = "w") -> int:
    """Claim the session's ready events and return the attempt of the first one."""
    result = store.claim_available(session_id, holder=holder, ttl_ms=1000)
    assert result.outcome == "claimed"
    return result.events[0].attempt_count


# --- empty batch ----------------------------------------------------------------


def test_empty_append_writes_nothing_and_reports_no_pending_on_empty_session(
    store: Store,
) -> None:
    """§3 append: an empty batch writes nothing; has_pending is False without events."""
    result = store.append("s", [])
    assert (result.events, result.has_pending) == ([], False)
    assert store.read("s") == []


def test_empty_append_has_pending_tracks_unprocessed_events(store: Store) -> None:
    """§3 append: has_pending of an empty batch is True iff some event has processed_at unset."""
    store.append("s", [NewEvent("t", id="a")])
    before = store.read("s")
    assert store.append("s", []) == a2sql.AppendResult(events=[], has_pending=True)
    assert store.read("s") == before

    attempt = claim_one(store, "s")
    store.complete_attempt("s", index=1, attempt=attempt, events=[])
    assert store.append("s", []).has_pending is False

    # A dead-lettered event is unprocessed: it still counts as pending.
    store.append("s", [NewEvent("t", id="b")])
    attempt = claim_one(store, "s")
    store.fail_attempt("s", index=2, attempt=attempt, error="x", max_failures=1)
    assert store.append("s", []).has_pending is True


# --- step 1 and 2: duplicates and replay ------------------------------------------------


def test_append_rejects_id_twice_in_batch_as_partial_duplicate_batch(store: Store) -> None:
    """§3 append step 1: an id supplied twice in the batch is PARTIAL_DUPLICATE_BATCH."""
    store.append("s", [NewEvent("t", id="old")])
    before = store.read("s")
    with raises_code(ErrorCode.PARTIAL_DUPLICATE_BATCH):
        store.append("s", [NewEvent("t", id="x"), NewEvent("u", id="y"), NewEvent("t", id="x")])
    assert store.read("s") == before


def test_append_without_ids_never_counts_as_duplicate(store: Store) -> None:
    """§3 append step 1: only supplied ids are compared; events without id get fresh ones."""
    result = store.append("s", [NewEvent("t"), NewEvent("t")])
    ids = [event.id for event in result.events]
    assert len(set(ids)) == 2
    assert [event.id for event in store.read("s")] == ids


@pytest.mark.parametrize(
    "batch_ids", [["e1"], ["e1", "fresh"]], ids=["only-foreign-id", "foreign-and-fresh"]
)
def test_append_rejects_id_stored_in_another_session(store: Store, batch_ids: list[str]) -> None:
    """§3 append step 2: an id stored in another session is PARTIAL_DUPLICATE_BATCH."""
    store.append("a", [NewEvent("t", id="e1")])
    store.append("b", [NewEvent("t", id="b1")])
    before_a, before_b = store.read("a"), store.read("b")
    with raises_code(ErrorCode.PARTIAL_DUPLICATE_BATCH):
        store.append("b", [NewEvent("t", id=event_id) for event_id in batch_ids])
    assert (store.read("a"), store.read("b")) == (before_a, before_b)


@pytest.mark.parametrize("fresh_id", ["fresh", None], ids=["fresh-id", "generated-id"])
def test_append_rejects_mix_of_stored_and_fresh_events_writing_nothing(
    store: Store, fresh_id: str | None
) -> None:
    """§3 append step 2: a mix of stored and fresh events is PARTIAL_DUPLICATE_BATCH."""
    store.append("s", [NewEvent("t", id="e1"), NewEvent("t", id="e2")])
    before = store.read("s")
    with raises_code(ErrorCode.PARTIAL_DUPLICATE_BATCH):
        store.append("s", [NewEvent("t", id="e1"), NewEvent("t", id=fresh_id)])
    assert store.read("s") == before
    # The fresh id was not written either: it is still free for a new append.
    if fresh_id is not None:
        assert store.append("s", [NewEvent("t", id=fresh_id)]).events[0].index == 3


def test_idempotent_replay_returns_stored_events_in_request_batch_order(store: Store) -> None:
    """§3 idempotent replay: stored events come back in the order of the request batch."""
    first = store.append("s", [NewEvent("t", {"n": n}, id=f"e{n}") for n in (1, 2, 3)]).events
    before = store.read("s")

    replayed = store.append("s", [NewEvent("t", {"n": n}, id=f"e{n}") for n in (3, 1, 2)])
    assert replayed.events == [first[2], first[0], first[1]]
    assert replayed.has_pending is True

    subset = store.append("s", [NewEvent("t", {"n": 2}, id="e2")])
    assert subset.events == [first[1]]
    assert store.read("s") == before


def test_idempotent_replay_returns_current_state_after_claim_and_completion(
    store: Store, clock: FakeClock
) -> None:
    """§3 idempotent replay returns the events as stored now, after claims and completion."""
    batch = [NewEvent("t", id="a"), NewEvent("t", id="b")]
    store.append("s", batch)
    clock.advance(ms=5)
    claimed = store.claim_available("s", holder="w", ttl_ms=1000).events
    store.complete_attempt("s", index=1, attempt=claimed[0].attempt_count, events=[])

    replayed = store.append("s", batch)
    assert replayed.events == store.read("s")
    assert replayed.events[0].processed_at == clock.now()
    assert replayed.events[1].claim_holder == "w"
    assert replayed.has_pending is True

    store.complete_attempt("s", index=2, attempt=1, events=[])
    assert store.append("s", batch).has_pending is False


def test_replay_of_caused_event_returns_it_after_its_attempt_was_superseded(
    store: Store, clock: FakeClock
) -> None:
    """§3 append: replay (step 2) precedes the fence (step 3), so a retried append replays."""
    store.append("s", [NewEvent("job", id="p")])
    attempt = claim_one(store, "s")
    child = NewEvent("child", id="c", cause=EventCause(1, attempt))
    stored = store.append("s", [child]).events
    clock.advance(ms=1000)
    assert claim_one(store, "s", holder="other") == attempt + 1

    assert store.append("s", [child]).events == store.read("s", after_index=1)
    assert [e.id for e in stored] == ["c"]


ORIGINAL = NewEvent("t", {"k": 1}, id="e", lane="L", cause=EventCause(1, 1))


@pytest.mark.parametrize(
    "replayed",
    [
        replace(ORIGINAL, type="u"),
        replace(ORIGINAL, payload={"k": 2}),
        replace(ORIGINAL, payload=None),
        replace(ORIGINAL, lane="M"),
        replace(ORIGINAL, lane=None),
        replace(ORIGINAL, cause=None),
        replace(ORIGINAL, cause=EventCause(1, 1, batch_size=1)),
    ],
    ids=["type", "payload", "payload-none", "lane", "lane-none", "cause-none", "batch-size"],
)
def test_replay_with_different_type_payload_lane_or_cause_is_idempotency_conflict(
    store: Store, replayed: NewEvent
) -> None:
    """§3 idempotent replay: a differing type, payload, lane or cause is IDEMPOTENCY_CONFLICT."""
    store.append("s", [NewEvent("job", id="p")])
    claim_one(store, "s")
    store.append("s", [ORIGINAL])
    before = store.read("s")
    with raises_code(ErrorCode.IDEMPOTENCY_CONFLICT):
        store.append("s", [replayed])
    assert store.read("s") == before
    assert store.append("s", [ORIGINAL]).events == before[1:]


@pytest.mark.parametrize(
    ("stored", "replayed"),
    [
        (1, 1.0),
        (1, True),
        (1.0, True),
        (0, False),
        ({"n": 1}, {"n": 1.0}),
        ([1], [True]),
    ],
    ids=["int-float", "int-bool", "float-bool", "zero-false", "nested-float", "nested-bool"],
)
def test_replay_payload_numbers_and_booleans_of_equal_value_differ(
    store: Store, stored: JSON, replayed: JSON
) -> None:
    """§3 idempotent replay: 1, 1.0 and True are different payloads (IDEMPOTENCY_CONFLICT)."""
    first = store.append("s", [NewEvent("t", stored, id="e")]).events
    assert store.append("s", [NewEvent("t", stored, id="e")]).events == first
    with raises_code(ErrorCode.IDEMPOTENCY_CONFLICT):
        store.append("s", [NewEvent("t", replayed, id="e")])
    [event] = store.read("s")
    assert event.payload == stored
    assert type(event.payload) is type(stored)


# --- step 4: ids, indexes, times, settled -----------------------------------------------


def test_append_generates_missing_ids_with_injected_ids_callable(
    open_store: Callable[..., Store],
) -> None:
    """§2 ids / §3 append step 4: an event without id gets the id of the ``ids`` callable."""
    generated = iter(["gen-1", "gen-2", "gen-3"])
    s = open_store(ids=lambda: next(generated))
    result = s.append("s", [NewEvent("t"), NewEvent("t", id="given"), NewEvent("t")])
    assert [e.id for e in result.events] == ["gen-1", "given", "gen-2"]
    assert [e.id for e in s.read("s")] == ["gen-1", "given", "gen-2"]


def test_append_assigns_next_indexes_in_batch_order_with_created_at_now_in_ms(
    store: Store, clock: FakeClock
) -> None:
    """§3 append step 4: indexes max+1… in batch order; created_at = now, truncated to ms."""
    clock.set(START)
    first = store.append("s", [NewEvent("a", id="a"), NewEvent("b", id="b")])
    store.append("other", [NewEvent("x", id="x")])
    clock.set(datetime(2026, 3, 4, 5, 6, 8, 999999, tzinfo=UTC))
    second = store.append("s", [NewEvent("c", id="c"), NewEvent("d", id="d"), NewEvent("e")])

    assert [(e.index, e.type) for e in first.events] == [(1, "a"), (2, "b")]
    assert [(e.index, e.type) for e in second.events] == [(3, "c"), (4, "d"), (5, "e")]
    assert {e.created_at for e in first.events} == {START_MS}
    later = datetime(2026, 3, 4, 5, 6, 8, 999000, tzinfo=UTC)
    assert {e.created_at for e in second.events} == {later}
    assert store.read("s") == first.events + second.events
    assert [e.index for e in store.read("other")] == [1]
    for event in store.read("s"):
        assert event.session_id == "s"
        assert (event.attempt_count, event.failure_count, event.processed_at) == (0, 0, None)
        assert event.created_at.utcoffset() is not None


def test_settled_events_are_stored_processed_and_never_claimed(
    store: Store, clock: FakeClock
) -> None:
    """§3 append step 4: settled events get processed_at = now, no processed_by_attempt."""
    clock.set(START)
    result = store.append("s", [NewEvent("done", id="s1", settled=True), NewEvent("todo", id="t1")])
    settled, todo = store.read("s")
    assert result.events == [settled, todo]
    assert (settled.processed_at, settled.processed_by_attempt) == (START_MS, None)
    assert settled.returned_event_ids is None
    assert todo.processed_at is None

    claimed = store.claim_available("s", holder="w", ttl_ms=1000)
    assert [e.id for e in claimed.events] == ["t1"]
    store.complete_attempt("s", index=2, attempt=1, events=[])
    clock.advance(seconds=3600)
    assert store.claim_available("s", holder="w", ttl_ms=1000).outcome == "settled"
    assert store.read("s")[0].attempt_count == 0


# --- step 5: has_pending ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("earlier", "batch", "expected"),
    [
        ([], [True], False),
        ([], [True, False], True),
        ([False], [True], True),
        ([True], [True, True], False),
    ],
    ids=["all-settled", "one-unsettled", "pending-before", "settled-before"],
)
def test_append_has_pending_is_pending_before_or_unsettled_in_batch(
    store: Store, earlier: list[bool], batch: list[bool], expected: bool
) -> None:
    """§3 append step 5: has_pending = unprocessed event before, or an unsettled one in batch."""
    if earlier:
        store.append("s", [NewEvent("t", settled=flag) for flag in earlier])
    result = store.append("s", [NewEvent("t", settled=flag) for flag in batch])
    assert result.has_pending is expected


# --- step 3: the attempt fence ---------------------------------------------------------


def test_append_with_cause_at_missing_index_is_event_not_found(store: Store) -> None:
    """§3 append step 3: cause.index must exist in this session, else EVENT_NOT_FOUND."""
    store.append("s", [NewEvent("job", id="p")])
    claim_one(store, "s")
    store.append("other", [NewEvent("job", id="q1"), NewEvent("job", id="q2")])
    before = store.read("s")
    with raises_code(ErrorCode.EVENT_NOT_FOUND):
        store.append("s", [NewEvent("child", id="c", cause=EventCause(2, 1))])
    assert store.read("s") == before


@pytest.mark.parametrize(
    ("claims", "cause_attempt"),
    [(0, 1), (1, 2), (2, 1)],
    ids=["never-claimed", "future-attempt", "stale-attempt"],
)
def test_append_with_cause_of_other_attempt_is_superseded_attempt(
    store: Store, clock: FakeClock, claims: int, cause_attempt: int
) -> None:
    """§3 append step 3: the parent's attempt_count must equal cause.attempt."""
    store.append("s", [NewEvent("job", id="p")])
    for _ in range(claims):
        claim_one(store, "s")
        clock.advance(ms=1000)
    before = store.read("s")
    assert before[0].attempt_count == claims
    with raises_code(ErrorCode.SUPERSEDED_ATTEMPT):
        store.append("s", [NewEvent("child", id="c", cause=EventCause(1, cause_attempt))])
    assert store.read("s") == before


def test_append_caused_by_dead_lettered_parent_is_superseded_attempt(store: Store) -> None:
    """§3 append step 3: a dead-lettered parent fences its attempt: SUPERSEDED_ATTEMPT."""
    store.append("s", [NewEvent("job", id="p")])
    attempt = claim_one(store, "s")
    store.fail_attempt("s", index=1, attempt=attempt, error="boom", max_failures=1)
    before = store.read("s")
    assert before[0].attempt_count == attempt
    with raises_code(ErrorCode.SUPERSEDED_ATTEMPT):
        store.append("s", [NewEvent("child", id="c", cause=EventCause(1, attempt))])
    assert store.read("s") == before


def test_append_caused_by_current_attempt_stores_the_cause(store: Store) -> None:
    """§3 append step 3: the current attempt appends; its cause (and batch_size) round-trips."""
    store.append("s", [NewEvent("job", id="p")])
    attempt = claim_one(store, "s")
    causes = [EventCause(1, attempt, batch_size=2), EventCause(1, attempt)]
    result = store.append(
        "s", [NewEvent("child", id=f"c{n}", cause=cause) for n, cause in enumerate(causes)]
    )
    assert [e.cause for e in result.events] == causes
    assert [e.cause for e in store.read("s", after_index=1)] == causes
    assert store.read("s", after_index=1) == result.events
    assert store.read("s")[0].processed_at is None


def test_append_fence_checks_every_event_and_a_raising_call_writes_nothing(
    store: Store,
) -> None:
    """§3 append step 3 and §4: one fenced event rejects the batch; nothing is written."""
    store.append("s", [NewEvent("job", id="p1"), NewEvent("job", id="p2")])
    claim_one(store, "s")
    before = store.read("s")
    with raises_code(ErrorCode.SUPERSEDED_ATTEMPT):
        store.append(
            "s",
            [
                NewEvent("child", id="ok", cause=EventCause(1, 1)),
                NewEvent("child", id="plain"),
                NewEvent("child", id="stale", cause=EventCause(2, 2)),
            ],
        )
    assert store.read("s") == before
    assert store.append("s", [NewEvent("child", id="ok")]).events[0].index == 3


def test_append_result_says_whether_the_batch_was_replayed(store: Store) -> None:
    """§3 append: ``replayed`` is False for a batch appended now (one event, several, a
    lane's, an empty batch) and True for the same ids again, which commit nothing."""
    one = [NewEvent("t", id="one")]
    many = [NewEvent("t", id="m1"), NewEvent("t", id="m2")]
    laned = [NewEvent("t", id="l1", lane="L")]
    for batch in (one, many, laned):
        assert store.append("s", batch).replayed is False
    before = store.read("s")
    for batch in (one, many, laned, many[::-1], many[:1]):
        result = store.append("s", batch)
        assert result.replayed is True
        assert [e.id for e in result.events] == [e.id for e in batch]
    assert store.read("s") == before
    assert store.append("s", []).replayed is False
    assert store.append("s", [NewEvent("t")]).replayed is False
