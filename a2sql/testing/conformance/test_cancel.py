"""SPEC §7 Cancellation: ``cancel_session`` stops every unprocessed event of a session."""

from __future__ import annotations

from datetime import timedelta

import pytest

from a2sql import A2Error, CancelResult, ClaimRef, ErrorCode, NewEvent, Store
from a2sql.testing import FakeClock


def busy_session(store: Store, clock: FakeClock) -> int:
    """A session with one event of each kind: claimed (1, returned), ready (2), waiting
    (3), scheduled (4), dead-lettered (5), behind the dead letter in its lane (6), and
    processed (7). Returns the claimed event's attempt."""
    store.append(
        "s",
        [
            NewEvent("claimed"),
            NewEvent("ready"),
            NewEvent("waiting", wake_on="approval"),
            NewEvent("scheduled", available_at=clock.now() + timedelta(days=1)),
            NewEvent("dead", lane="L"),
            NewEvent("blocked", lane="L"),
            NewEvent("done", settled=True),
        ],
    )
    claim = store.claim_available("s", holder="w", ttl_ms=60_000, exclude_indexes=[2])
    assert [event.index for event in claim.events] == [1, 5]
    store.fail_attempt("s", index=5, attempt=1, error="boom", max_failures=1)
    return claim.events[0].attempt_count


def test_cancel_marks_every_unprocessed_event_processed_with_the_reason(
    store: Store, clock: FakeClock
) -> None:
    """§7 cancel_session: ready, claimed, waiting, scheduled and dead-lettered events alike
    become processed without an attempt, ``reason`` in ``last_error``, claims released;
    ``cancelled`` counts them. The processed event is left as it was."""
    busy_session(store, clock)
    before = store.read("s")[6]
    clock.advance(ms=5)
    assert store.cancel_session("s", reason="the user hung up") == CancelResult(6)
    events = store.read("s")
    for event in events[:6]:
        assert event.processed_at == clock.now(), event.index
        assert (event.processed_by_attempt, event.last_error) == (None, "the user hung up")
        assert (event.claim_holder, event.claim_expires_at, event.failed_at) == (None, None, None)
        assert not event.waiting
    assert events[6] == before
    assert store.claim_available("s", holder="w", ttl_ms=1_000).outcome == "settled"
    assert store.append("s", []).has_pending is False
    summary = store.inspect.session("s")
    assert summary is not None and (summary.pending_count, summary.failed_count) == (0, 0)


def test_a_live_attempt_is_superseded_after_a_cancel(store: Store, clock: FakeClock) -> None:
    """§7 cancel_session: the attempt that held an event can neither complete, fail nor
    renew it."""
    attempt = busy_session(store, clock)
    store.cancel_session("s", reason="stop")
    done = store.complete_attempt("s", index=1, attempt=attempt, events=[NewEvent("r", id="r")])
    assert (done.outcome, done.events) == ("superseded", [])
    failed = store.fail_attempt("s", index=1, attempt=attempt, error="x", max_failures=3)
    assert failed.outcome == "superseded"
    renewed = store.renew_claims("s", holder="w", claims=[ClaimRef(1, attempt)], ttl_ms=60_000)
    assert renewed.renewed == []
    assert [event.id for event in store.read("s")].count("r") == 0


def test_events_appended_after_a_cancel_are_new_work(store: Store, clock: FakeClock) -> None:
    """§7 cancel_session: it stops what is there, not what comes."""
    busy_session(store, clock)
    store.cancel_session("s", reason="stop")
    [new] = store.append("s", [NewEvent("again")]).events
    [claimed] = store.claim_available("s", holder="w", ttl_ms=1_000).events
    assert claimed.index == new.index == 8


def test_a_cancelled_wait_is_no_signal(store: Store) -> None:
    """§7 cancel_session: a cancelled waiting event does not wake a later wait for the
    same name."""
    store.append("s", [NewEvent("approve?", wake_on="approval")])
    store.cancel_session("s", reason="stop")
    [later] = store.append("s", [NewEvent("again?", wake_on="approval")]).events
    assert later.waiting
    assert store.signal("s", "approval").woken == [later.index]


def test_cancelling_a_settled_or_unknown_session_changes_nothing(store: Store) -> None:
    """§7 cancel_session: ``cancelled`` is 0 where nothing is unprocessed."""
    assert store.cancel_session("nobody", reason="stop") == CancelResult(0)
    store.append("s", [NewEvent("done", settled=True)])
    before = store.read("s")
    assert store.cancel_session("s", reason="stop") == CancelResult(0)
    assert store.read("s") == before


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_a_cancel_must_say_why(store: Store, reason: object) -> None:
    """§7 cancel_session: ``reason`` is a non-empty string; nothing written without it."""
    store.append("s", [NewEvent("job")])
    with pytest.raises(A2Error) as raised:
        store.cancel_session("s", reason=reason)  # type: ignore[arg-type]
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert store.read("s")[0].processed_at is None
