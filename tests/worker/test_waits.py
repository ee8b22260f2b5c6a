"""SPEC §7 through a worker: a handler returns a later event or a wait (``wait_for``), the
worker appends it as returned, and the handler of the woken event learns what woke it
(``received``). On both engines (the ``url`` fixture), with a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent, Store
from a2sql.testing import FakeClock
from a2sql.worker import AsyncAttempt, AsyncWorker, Attempt
from tests.worker.quick import quick

HOUR = timedelta(hours=1)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(url: str, clock: FakeClock) -> Iterator[Store]:
    with a2sql.create_store(url, clock=clock, migrate=True) as opened:
        yield opened


def test_a_returned_later_event_keeps_its_time(store: Store, clock: FakeClock) -> None:
    """The events a handler returns are appended as returned (an id of their own derived
    when they have none): ``available_at`` and ``wake_on`` included."""
    at = clock.now() + HOUR

    def handler(attempt: Attempt) -> list[NewEvent]:
        if attempt.event.type == "start":
            return [NewEvent("later", available_at=at), NewEvent("waits", wake_on="go")]
        return []

    store.append("s", [NewEvent("start")])
    worker = quick(store, handler)
    assert worker.run_session("s") == "idle"
    _, later, waits = store.read("s")
    assert (later.claim_expires_at, later.id is not None) == (at, True)
    assert (waits.wake_on, waits.waiting) == ("go", True)
    clock.set(at)
    assert store.signal("s", "go").woken == [3]
    assert worker.run_session("s") == "settled"
    assert worker.outcomes == {"completed": 3}


def test_received_tells_a_signal_from_a_timeout(store: Store, clock: FakeClock) -> None:
    """``wait_for`` returns the waiting event; ``received`` is the signal that woke it,
    with its payload, or ``None`` when its deadline did."""
    seen: dict[str, object] = {}

    def handler(attempt: Attempt) -> list[NewEvent] | None:
        if attempt.event.type == "ask":
            until = clock.now() + HOUR
            return [attempt.wait_for("answer", type="answered", until=until, payload={"q": 1})]
        signal = attempt.received("answer")
        seen[attempt.session_id] = None if signal is None else signal.payload
        assert attempt.event.payload == {"q": 1}
        return None

    worker = quick(store, handler)
    for session_id in ("yes", "late"):
        store.append(session_id, [NewEvent("ask")])
        assert worker.run_session(session_id) == "idle"
    store.signal("yes", "answer", {"ok": True})
    assert worker.run_session("yes") == "settled"
    clock.advance(ms=3_600_000)
    assert worker.run_session("late") == "settled"
    assert seen == {"yes": {"ok": True}, "late": None}


def test_an_async_handler_waits_and_receives(url: str) -> None:
    """``AsyncAttempt.wait_for`` and ``await attempt.received(...)`` as the sync ones."""
    clock = FakeClock()

    async def main() -> object:
        async with a2sql.create_async_store(url, clock=clock, migrate=True) as store:
            got: list[object] = []

            async def handler(attempt: AsyncAttempt) -> list[NewEvent] | None:
                if attempt.event.type == "ask":
                    return [attempt.wait_for("answer", type="answered")]
                signal = await attempt.received("answer")
                got.append(None if signal is None else signal.payload)
                return None

            await store.append("s", [NewEvent("ask")])
            worker = AsyncWorker(store, handler, poll_interval=0.05)
            assert await worker.run_session("s") == "idle"
            await store.signal("s", "answer", "yes")
            assert await worker.run_session("s") == "settled"
            return got

    assert asyncio.run(main()) == ["yes"]


@pytest.mark.parametrize(
    ("arguments", "names"),
    [
        ({"signal": "answer", "type": "t", "until": datetime(2030, 1, 1)}, "until"),
        ({"signal": "", "type": "t"}, "signal"),
        ({"signal": "answer", "type": 7}, "type"),
    ],
)
def test_wait_for_checks_its_arguments_where_the_handler_calls_it(
    store: Store, arguments: dict[str, object], names: str
) -> None:
    """A naive ``until`` (say) is INVALID_ARGUMENT naming ``until`` in the handler, not a
    refusal of ``events[0].available_at`` at the completion."""
    store.append("s", [NewEvent("ask")])
    [event] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    attempt = Attempt(event, event.attempt_count, store)
    with pytest.raises(A2Error) as raised:
        attempt.wait_for(**arguments)  # type: ignore[arg-type]
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert raised.value.message.startswith(f"{names}:"), raised.value.message
