"""complete_attempts: several completions of one session in one transaction.

Not in SPEC §3: a2sql's batched completion. Each completion is judged as
``complete_attempt`` would judge it, in order, seeing the ones before it; an
error for any of them fails the whole call and writes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from a2sql import A2Error, Completion, ErrorCode, EventCause, NewEvent, Store
from a2sql.testing import FakeClock

START = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


def raises_code(code: ErrorCode) -> pytest.RaisesExc[A2Error]:
    return pytest.raises(A2Error, check=lambda error: error.code == code)


def claimed_jobs(store: Store, clock: FakeClock, count: int) -> list[int]:
    """Append ``count`` jobs to session "s" (indexes 1..count), claim them; their attempts."""
    clock.set(START)
    store.append("s", [NewEvent("job", {"n": n}, id=f"job{n}") for n in range(1, count + 1)])
    return [e.attempt_count for e in store.claim_available("s", holder="w", ttl_ms=1000).events]


def child(event_id: str, **fields: object) -> NewEvent:
    return NewEvent("child", {"id": event_id}, id=event_id, **fields)  # type: ignore[arg-type]


def test_completes_each_in_order_appending_children_after_each_other(
    store: Store, clock: FakeClock
) -> None:
    """Children get indexes in the order of the completions; each has its parent's cause."""
    claimed_jobs(store, clock, 3)
    results = store.complete_attempts(
        "s",
        [
            Completion(3, 1, [child("c3a"), child("c3b")]),
            Completion(1, 1),
            Completion(2, 1, [child("c2", settled=True)]),
        ],
    )
    assert [r.outcome for r in results] == ["completed"] * 3
    assert [[(e.index, e.id, e.cause) for e in r.events] for r in results] == [
        [(4, "c3a", EventCause(3, 1)), (5, "c3b", EventCause(3, 1))],
        [],
        [(6, "c2", EventCause(2, 1))],
    ]
    jobs = store.read("s", through_index=3)
    assert [(j.processed_by_attempt, j.returned_event_ids) for j in jobs] == [
        (1, []),
        (1, ["c2"]),
        (1, ["c3a", "c3b"]),
    ]
    assert all(j.claim_holder is None for j in jobs)
    claim = store.claim_available("s", holder="w", ttl_ms=1000)
    assert [e.id for e in claim.events] == ["c3a", "c3b"]


def test_outcomes_are_those_of_complete_attempt_one_after_another(
    store: Store, clock: FakeClock
) -> None:
    """superseded, completed and a replay of a completion earlier in the same call."""
    claimed_jobs(store, clock, 2)
    store.fail_attempt("s", index=2, attempt=1, error="boom", max_failures=5)
    results = store.complete_attempts(
        "s",
        [
            Completion(2, 1),  # its claim was released by the failure
            Completion(1, 1, [child("c1")]),
            Completion(1, 1, [child("c1")]),  # the retry replays
            Completion(1, 2),  # a later attempt that never ran
        ],
    )
    assert [r.outcome for r in results] == ["superseded", "completed", "completed", "superseded"]
    assert results[1].events == results[2].events == store.read("s", after_index=2)
    assert [r.replayed for r in results] == [False, False, True, False]


def test_an_error_for_any_completion_writes_nothing(store: Store, clock: FakeClock) -> None:
    """EVENT_NOT_FOUND, a duplicated id across completions, a replay with other ids: the
    completions before the failing one are rolled back too."""
    claimed_jobs(store, clock, 2)
    before = store.read("s")
    failing = {
        ErrorCode.EVENT_NOT_FOUND: [Completion(1, 1, [child("c1")]), Completion(9, 1)],
        ErrorCode.PARTIAL_DUPLICATE_BATCH: [
            Completion(1, 1, [child("x")]),
            Completion(2, 1, [child("x")]),
        ],
    }
    for code, completions in failing.items():
        with raises_code(code):
            store.complete_attempts("s", completions)
        assert store.read("s") == before, code
    store.complete_attempts("s", [Completion(1, 1, [child("c1")])])
    with raises_code(ErrorCode.PARTIAL_DUPLICATE_BATCH):
        store.complete_attempts("s", [Completion(2, 1), Completion(1, 1, [child("other")])])
    assert store.read("s", through_index=2)[1].processed_at is None


def test_empty_list_completes_nothing_and_needs_no_session(store: Store) -> None:
    """No completions: an empty list back, nothing written, even for an unknown session."""
    assert store.complete_attempts("nowhere", []) == []
    assert store.read("nowhere") == []


def test_results_match_single_completions_on_a_second_session(
    store: Store, clock: FakeClock
) -> None:
    """The same completions, one call versus one call each, leave the same events."""
    clock.set(START)
    for session in ("one", "many"):
        store.append(session, [NewEvent("job", n, id=f"{session}{n}") for n in range(4)])
        store.claim_available(session, holder="w", ttl_ms=1000)
    plan = [(2, 1, ["a"]), (4, 1, []), (1, 1, ["b", "c"]), (2, 1, ["a"]), (3, 2, ["d"])]

    def completions(session: str) -> list[Completion]:
        return [Completion(i, a, [child(f"{session}-{x}") for x in ids]) for i, a, ids in plan]

    batched = store.complete_attempts("many", completions("many"))
    single = [
        store.complete_attempt("one", index=c.index, attempt=c.attempt, events=c.events)
        for c in completions("one")
    ]
    assert [r.outcome for r in batched] == [r.outcome for r in single]

    def shape(session: str) -> list[tuple[object, ...]]:
        return [
            (e.index, e.type, e.cause, e.processed_by_attempt, e.processed_at, e.attempt_count)
            for e in store.read(session)
        ]

    assert shape("many") == shape("one")
