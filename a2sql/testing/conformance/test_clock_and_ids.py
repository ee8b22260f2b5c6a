"""The store's ``clock`` and ``ids`` are held to the rules of what they replace (SPEC §4).

An event id the ``ids`` callable makes obeys the rules of an id the caller
gives (a str of 1 to 255 characters, no NUL, no lone surrogate); a clock's
``now()`` gives an aware datetime. Objects that cannot serve are refused by
``create_store`` / ``create_async_store`` (through every facade); a callable
that goes bad later gives ``INVALID_ARGUMENT`` naming it, and nothing is
written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

import pytest

from a2sql import A2Error, ErrorCode, NewEvent, Store
from a2sql.testing import FakeClock

AT = datetime(2026, 1, 1, tzinfo=UTC)


class _NoOffset(tzinfo):
    """A tzinfo that does not know its offset: the datetime is naive in effect."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None


BAD_IDS: list[Any] = ["", "x" * 1000, "a\x00b", "\ud800", b"id", 17, None]
BAD_TIMES: list[Any] = [
    datetime(2026, 1, 1),
    datetime(2026, 1, 1, tzinfo=_NoOffset()),
    "2026-01-01T00:00:00Z",
    1_767_225_600_000,
    None,
]


class _SwitchableIds:
    """Good ids until told to return ``bad``."""

    def __init__(self) -> None:
        self.bad: object = None
        self.going_bad = False
        self.count = 0

    def __call__(self) -> object:
        self.count += 1
        return self.bad if self.going_bad else f"made-{self.count}"


class _SwitchableClock:
    """A clock that returns ``bad`` once told to."""

    def __init__(self) -> None:
        self.bad: object = None
        self.going_bad = False

    def now(self) -> object:
        return self.bad if self.going_bad else AT


def _refused(call: Callable[[], object], argument: str) -> A2Error:
    with pytest.raises(A2Error) as raised:
        call()
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT, raised.value
    assert raised.value.message.startswith(argument), raised.value.message
    return raised.value


def test_an_unusable_event_id_from_the_ids_callable_is_invalid_argument_naming_it(
    open_store: Callable[..., Store],
) -> None:
    ids = _SwitchableIds()
    store = open_store(ids=ids)
    store.append("s", [NewEvent("t")])
    ids.going_bad = True
    for bad in BAD_IDS:
        ids.bad = bad
        error = _refused(lambda: store.append("s", [NewEvent("t"), NewEvent("t")]), "ids")
        assert "ids callable" in error.message, error.message
        error = _refused(
            lambda: store.append("s2", [NewEvent("t", id="given"), NewEvent("t")]), "ids"
        )
    assert [e.id for e in store.read("s")] == ["made-1"]
    assert store.read("s2") == []


def test_a_clock_that_goes_bad_is_invalid_argument_and_writes_nothing(
    open_store: Callable[..., Store],
) -> None:
    clock = _SwitchableClock()
    store = open_store(clock=clock)
    store.append("s", [NewEvent("t", id="first")])
    clock.going_bad = True
    for bad in BAD_TIMES:
        clock.bad = bad
        _refused(lambda: store.append("s", [NewEvent("t")]), "clock")
        _refused(lambda: store.claim_available("s", holder="w", ttl_ms=1000), "clock")
    clock.going_bad = False
    assert [e.id for e in store.read("s")] == ["first"]
    assert store.read("s")[0].claim_holder is None


class _NoNow:
    def time(self) -> datetime:
        return AT


class _NowNotCallable:
    now = AT


class _NaiveClock:
    def now(self) -> datetime:
        return datetime(2026, 1, 1)


class _TextClock:
    def now(self) -> str:
        return "2026-01-01T00:00:00Z"


UNUSABLE: dict[str, dict[str, Any]] = {
    "ids-str": {"ids": "abc"},
    "ids-int": {"ids": 5},
    "ids-list": {"ids": ["a", "b"]},
    "clock-int": {"clock": 5},
    "clock-function": {"clock": lambda: AT},  # a function, not a clock with now()
    "clock-without-now": {"clock": _NoNow()},
    "clock-now-not-callable": {"clock": _NowNotCallable()},
    "clock-naive": {"clock": _NaiveClock()},
    "clock-text": {"clock": _TextClock()},
    "clock-datetime-class": {"clock": datetime},  # datetime.now() is naive
}


@pytest.mark.parametrize("case", list(UNUSABLE))
def test_create_store_refuses_a_clock_or_ids_that_cannot_serve(
    open_store: Callable[..., Store], case: str
) -> None:
    [(argument, value)] = UNUSABLE[case].items()
    _refused(lambda: open_store(**{argument: value}), argument)


def test_create_store_accepts_usable_clocks_and_ids(open_store: Callable[..., Store]) -> None:
    open_store(clock=FakeClock(), ids=lambda: "x")
    open_store(clock=FakeClock(AT.astimezone(timezone(timedelta(hours=5)))))
