"""Inputs are checked before anything is written, identically on every engine (SPEC §4).

Each (method, argument, bad value) gives ``A2Error(INVALID_ARGUMENT)`` whose
message names the argument, and the store is left exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from a2sql import A2Error, ClaimRef, Completion, ErrorCode, EventCause, NewEvent, Store

AT = datetime(2026, 1, 1, tzinfo=UTC)
NAIVE = datetime(2026, 1, 1)


def _deep(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


BAD_NAMES: list[Any] = [123, None, b"s", "", "x" * 256, "a\x00b", "a\ud800", "\udfff"]
BAD_OPTIONAL_NAMES: list[Any] = [name for name in BAD_NAMES if name is not None]
BAD_JSON: list[Any] = [
    (1, 2),
    {"nested": (1,)},
    {1, 2},
    b"bytes",
    {1: "int key"},
    {"ok": {None: "None key"}},
    {(1, 2): "tuple key"},
    float("nan"),
    [float("inf")],
    {"x": float("-inf")},
    "lone \ud800 surrogate",
    {"key \udc00": 1},
    _deep(257),
    AT,
    object(),
]
# Past the 4300 digits Python refuses to print: the message must still be made.
HUGE_INTS: list[Any] = [10**5000, -(10**5000), 10**100_000]
BAD_POSITIVE: list[Any] = [0, -1, True, False, 1.0, "1", None, *HUGE_INTS]  # index, attempt, ...
BAD_NON_NEGATIVE: list[Any] = [-1, True, 1.5, "0", *HUGE_INTS]  # after_index, start_after, ...
BAD_LIMIT: list[Any] = [0, -1, 1001, True, 10.0, "10", None, *HUGE_INTS]
BAD_SECONDS: list[Any] = [0, -1, -0.0, True, "1", 10**400, 1e300, float("inf"), float("nan")]
BAD_DATETIME: list[Any] = [NAIVE, "2026-01-01T00:00:00Z", 1_767_225_600_000]


@dataclass(frozen=True)
class Case:
    """One argument of one method: how to call it with a value, a good value, and bad ones."""

    method: str
    argument: str
    call: Callable[[Store, Any], object]
    good: Any
    bad: list[Any]


def _renew(store: Store, **changes: Any) -> object:
    args: dict[str, Any] = {
        "session_id": "s",
        "holder": "w",
        "claims": [ClaimRef(1, 1)],
        "ttl_ms": 1000,
        "expires_at": None,
    }
    args.update(changes)
    return store.renew_claims(args.pop("session_id"), **args)


def _complete(
    store: Store, *, session_id: str = "s", index: Any = 1, attempt: Any = 1, **event: Any
) -> object:
    returned = NewEvent(**{"type": "r", "id": "r1", **event})
    return store.complete_attempt(session_id, index=index, attempt=attempt, events=[returned])


def _complete_many(
    store: Store, *, session_id: str = "s", index: Any = 1, attempt: Any = 1, **event: Any
) -> object:
    returned = NewEvent(**{"type": "r", "id": "r1", **event})
    # The first completion is good: a bad second one must still write nothing.
    completions = [Completion(2, 1), Completion(index, attempt, [returned])]
    return store.complete_attempts(session_id, completions)


def _fail(store: Store, **changes: Any) -> object:
    args: dict[str, Any] = {
        "session_id": "s",
        "index": 1,
        "attempt": 1,
        "error": "e",
        "max_failures": 3,
    }
    args.update(changes)
    return store.fail_attempt(args.pop("session_id"), **args)


def _presence(store: Store, **changes: Any) -> object:
    args: dict[str, Any] = {
        "ns": "ns",
        "participant": "q",
        "values": {"f": 2},
        "at": AT,
        "seen": 1,
        "ttl_ms": 1000,
    }
    args.update(changes)
    store.presence.set(args.pop("ns"), args.pop("participant"), args.pop("values"), **args)
    return None


def _stream(
    store: Store, session_id: Any = "s", start_after: Any = 0, poll_interval: Any = None
) -> object:
    store.stream(session_id, start_after=start_after, poll_interval=poll_interval).close()
    return None


CASES = [
    # append
    Case("append", "session_id", lambda s, v: s.append(v, [NewEvent("t")]), "s2", BAD_NAMES),
    Case("append", "events[0].type", lambda s, v: s.append("s", [NewEvent(v)]), "t", BAD_NAMES),
    Case(
        "append",
        "events[0].id",
        lambda s, v: s.append("s", [NewEvent("t", id=v)]),
        "new",
        BAD_OPTIONAL_NAMES,
    ),
    Case(
        "append",
        "events[0].lane",
        lambda s, v: s.append("s", [NewEvent("t", lane=v)]),
        "l",
        BAD_OPTIONAL_NAMES,
    ),
    Case(
        "append", "events[0].payload", lambda s, v: s.append("s", [NewEvent("t", v)]), [1], BAD_JSON
    ),
    Case(
        "append",
        "events[0].cause.index",
        lambda s, v: s.append("s", [NewEvent("t", cause=EventCause(v, 1))]),
        1,
        BAD_POSITIVE,
    ),
    Case(
        "append",
        "events[0].cause.attempt",
        lambda s, v: s.append("s", [NewEvent("t", cause=EventCause(1, v))]),
        1,
        BAD_POSITIVE,
    ),
    # SPEC §7: later runs, waits, signals and cancels
    Case(
        "append",
        "events[0].available_at",
        lambda s, v: s.append("s", [NewEvent("t", available_at=v)]),
        AT,
        [*BAD_DATETIME, datetime(9999, 6, 1, tzinfo=UTC)],
    ),
    Case(
        "append",
        "events[0].wake_on",
        lambda s, v: s.append("s", [NewEvent("t", wake_on=v)]),
        "go",
        BAD_OPTIONAL_NAMES,
    ),
    Case("signal", "session_id", lambda s, v: s.signal(v, "go"), "s", BAD_NAMES),
    Case("signal", "name", lambda s, v: s.signal("s", v), "go", BAD_NAMES),
    Case("signal", "payload", lambda s, v: s.signal("s", "go", v), {"ok": True}, BAD_JSON),
    Case("signal", "id", lambda s, v: s.signal("s", "go", id=v), "sig", BAD_OPTIONAL_NAMES),
    Case(
        "cancel_session",
        "session_id",
        lambda s, v: s.cancel_session(v, reason="stop"),
        "s",
        BAD_NAMES,
    ),
    Case(
        "cancel_session",
        "reason",
        lambda s, v: s.cancel_session("s", reason=v),
        "stop",
        ["", " ", None, 1, b"stop", "a\x00b"],
    ),
    # read
    Case("read", "session_id", lambda s, v: s.read(v), "s", BAD_NAMES),
    Case("read", "after_index", lambda s, v: s.read("s", after_index=v), 0, BAD_NON_NEGATIVE),
    Case("read", "through_index", lambda s, v: s.read("s", through_index=v), 1, BAD_NON_NEGATIVE),
    # claim_available
    Case(
        "claim_available",
        "session_id",
        lambda s, v: s.claim_available(v, holder="w", ttl_ms=1000),
        "s",
        BAD_NAMES,
    ),
    Case(
        "claim_available",
        "holder",
        lambda s, v: s.claim_available("s", holder=v, ttl_ms=1000),
        "w",
        BAD_NAMES,
    ),
    Case(
        "claim_available",
        "ttl_ms",
        lambda s, v: s.claim_available("s", holder="w", ttl_ms=v),
        1,
        BAD_POSITIVE,
    ),
    Case(
        "claim_available",
        "expires_at",
        lambda s, v: s.claim_available("s", holder="w", ttl_ms=1, expires_at=v),
        AT,
        BAD_DATETIME,
    ),
    Case(
        "claim_available",
        "exclude_indexes[0]",
        lambda s, v: s.claim_available("s", holder="w", ttl_ms=1, exclude_indexes=[v]),
        1,
        [0, -1, True, "1", None],
    ),
    # renew_claims
    Case("renew_claims", "session_id", lambda s, v: _renew(s, session_id=v), "s", BAD_NAMES),
    Case("renew_claims", "holder", lambda s, v: _renew(s, holder=v), "w", BAD_NAMES),
    Case("renew_claims", "ttl_ms", lambda s, v: _renew(s, ttl_ms=v), 1, BAD_POSITIVE),
    Case("renew_claims", "expires_at", lambda s, v: _renew(s, expires_at=v), AT, BAD_DATETIME),
    Case(
        "renew_claims",
        "claims[0].index",
        lambda s, v: _renew(s, claims=[ClaimRef(v, 1)]),
        1,
        BAD_POSITIVE,
    ),
    Case(
        "renew_claims",
        "claims[0].attempt",
        lambda s, v: _renew(s, claims=[ClaimRef(1, v)]),
        1,
        BAD_POSITIVE,
    ),
    # complete_attempt
    Case("complete_attempt", "session_id", lambda s, v: _complete(s, session_id=v), "s", BAD_NAMES),
    Case("complete_attempt", "index", lambda s, v: _complete(s, index=v), 1, BAD_POSITIVE),
    Case("complete_attempt", "attempt", lambda s, v: _complete(s, attempt=v), 1, BAD_POSITIVE),
    Case("complete_attempt", "events[0].type", lambda s, v: _complete(s, type=v), "r", BAD_NAMES),
    Case("complete_attempt", "events[0].id", lambda s, v: _complete(s, id=v), "r1", BAD_NAMES),
    Case(
        "complete_attempt",
        "events[0].lane",
        lambda s, v: _complete(s, lane=v),
        "l",
        BAD_OPTIONAL_NAMES,
    ),
    Case(
        "complete_attempt", "events[0].payload", lambda s, v: _complete(s, payload=v), {}, BAD_JSON
    ),
    Case(
        "complete_attempt",
        "events[0].cause",
        lambda s, v: _complete(s, cause=v),
        None,
        [EventCause(1, 1)],
    ),
    # complete_attempts
    Case(
        "complete_attempts",
        "session_id",
        lambda s, v: _complete_many(s, session_id=v),
        "s",
        BAD_NAMES,
    ),
    Case(
        "complete_attempts",
        "completions[1].index",
        lambda s, v: _complete_many(s, index=v),
        1,
        BAD_POSITIVE,
    ),
    Case(
        "complete_attempts",
        "completions[1].attempt",
        lambda s, v: _complete_many(s, attempt=v),
        1,
        BAD_POSITIVE,
    ),
    Case(
        "complete_attempts",
        "completions[1].events[0].id",
        lambda s, v: _complete_many(s, id=v),
        "r1",
        BAD_NAMES,
    ),
    Case(
        "complete_attempts",
        "completions[1].events[0].payload",
        lambda s, v: _complete_many(s, payload=v),
        {},
        BAD_JSON,
    ),
    Case(
        "complete_attempts",
        "completions[1].events[0].cause",
        lambda s, v: _complete_many(s, cause=v),
        None,
        [EventCause(1, 1)],
    ),
    Case(
        "complete_attempts",
        "completions",
        lambda s, v: s.complete_attempts("s", v),
        [Completion(1, 1)],
        [None, Completion(1, 1), "c", [ClaimRef(1, 1)], [(1, 1)]],
    ),
    # fail_attempt
    Case("fail_attempt", "session_id", lambda s, v: _fail(s, session_id=v), "s", BAD_NAMES),
    Case("fail_attempt", "index", lambda s, v: _fail(s, index=v), 1, BAD_POSITIVE),
    Case("fail_attempt", "attempt", lambda s, v: _fail(s, attempt=v), 1, BAD_POSITIVE),
    Case("fail_attempt", "max_failures", lambda s, v: _fail(s, max_failures=v), 1, BAD_POSITIVE),
    Case("fail_attempt", "error", lambda s, v: _fail(s, error=v), "boom", [123, None, b"e"]),
    # read_state / put_snapshot
    Case("read_state", "session_id", lambda s, v: s.read_state(v, "r"), "s", BAD_NAMES),
    Case("read_state", "reducer_name", lambda s, v: s.read_state("s", v), "r", BAD_NAMES),
    Case("put_snapshot", "session_id", lambda s, v: s.put_snapshot(v, "r", 1, 0), "s", BAD_NAMES),
    Case(
        "put_snapshot", "reducer_name", lambda s, v: s.put_snapshot("s", v, 1, 0), "r2", BAD_NAMES
    ),
    Case(
        "put_snapshot", "index", lambda s, v: s.put_snapshot("s", "r", v, 0), 2, [*BAD_POSITIVE, 3]
    ),
    Case("put_snapshot", "state", lambda s, v: s.put_snapshot("s", "r", 2, v), {"v": 2}, BAD_JSON),
    # stream
    Case("stream", "session_id", lambda s, v: _stream(s, session_id=v), "s", BAD_NAMES),
    Case("stream", "start_after", lambda s, v: _stream(s, start_after=v), 0, BAD_NON_NEGATIVE),
    Case(
        "stream",
        "poll_interval",
        lambda s, v: _stream(s, poll_interval=v),
        0.5,
        [*BAD_SECONDS, *HUGE_INTS],
    ),
    # presence
    Case("presence.set", "ns", lambda s, v: _presence(s, ns=v), "ns2", BAD_NAMES),
    Case("presence.set", "participant", lambda s, v: _presence(s, participant=v), "q", BAD_NAMES),
    Case(
        "presence.set",
        "values",
        lambda s, v: _presence(s, values={v: 1}),
        "g",
        [1, b"k", "", "x" * 256, "a\x00", "\ud800", (1,)],
    ),
    Case("presence.set", "values", lambda s, v: _presence(s, values={"f": v}), 3, BAD_JSON),
    Case(
        "presence.set",
        "values",
        lambda s, v: _presence(s, values=v),
        {"g": 1},
        [[("f", 1)], "f", None],
    ),
    # None is no bad `at` or `seen`: it asks for the default (see test_presence).
    Case("presence.set", "at", lambda s, v: _presence(s, at=v), AT, BAD_DATETIME),
    Case(
        "presence.set",
        "seen",
        lambda s, v: _presence(s, seen=v),
        2,
        [True, 1.5, "1", *HUGE_INTS],
    ),
    Case("presence.set", "ttl_ms", lambda s, v: _presence(s, ttl_ms=v), 1, BAD_POSITIVE),
    Case("presence.read", "ns", lambda s, v: s.presence.read(v), "ns", BAD_NAMES),
    # inspect
    Case(
        "inspect.list_sessions",
        "prefix",
        lambda s, v: s.inspect.list_sessions(prefix=v),
        "s",
        [123, None, b"s", "x" * 256, "a\x00", "\ud800"],
    ),
    Case(
        "inspect.list_sessions",
        "cursor",
        lambda s, v: s.inspect.list_sessions(cursor=v),
        "a",
        BAD_OPTIONAL_NAMES,
    ),
    Case(
        "inspect.list_sessions",
        "limit",
        lambda s, v: s.inspect.list_sessions(limit=v),
        1000,
        BAD_LIMIT,
    ),
    Case(
        "inspect.read_events", "session_id", lambda s, v: s.inspect.read_events(v), "s", BAD_NAMES
    ),
    Case(
        "inspect.read_events",
        "after_index",
        lambda s, v: s.inspect.read_events("s", after_index=v),
        1,
        BAD_NON_NEGATIVE,
    ),
    Case(
        "inspect.read_events",
        "through_index",
        lambda s, v: s.inspect.read_events("s", through_index=v),
        1,
        BAD_NON_NEGATIVE,
    ),
    Case(
        "inspect.read_events",
        "limit",
        lambda s, v: s.inspect.read_events("s", limit=v),
        1,
        BAD_LIMIT,
    ),
    Case(
        "inspect.list_snapshots",
        "session_id",
        lambda s, v: s.inspect.list_snapshots(v),
        "s",
        BAD_NAMES,
    ),
]


def _case_id(case: Case) -> str:
    return f"{case.method}-{case.argument}"


# The cases whose rejection the database decides: an index past the session's last
# event is found by reading the session. Every other case is refused before the store
# sends anything (a2sql_before_the_database).
DECIDED_BY_THE_DATABASE = frozenset({"put_snapshot-index"})


def _marks(case: Case) -> list[pytest.MarkDecorator]:
    marks = []
    if case.method == "stream":  # store.using(connection) has no stream: it is the store's
        marks.append(pytest.mark.a2sql_not_through_using("a stream is the store's"))
    if _case_id(case) not in DECIDED_BY_THE_DATABASE:
        marks.append(pytest.mark.a2sql_before_the_database)
    return marks


CASE_PARAMS = [pytest.param(case, id=_case_id(case), marks=_marks(case)) for case in CASES]


def _seed(store: Store) -> None:
    """A session with two claimed events, a snapshot and a presence field."""
    store.append("s", [NewEvent("t", {"n": 1}, id="s1"), NewEvent("t", {"n": 2}, id="s2")])
    store.claim_available("s", holder="w", ttl_ms=60_000)
    store.put_snapshot("s", "r", 1, {"v": 1})
    store.presence.set("ns", "p", {"f": 1}, at=AT, seen=0, ttl_ms=60_000)


def _observe(store: Store) -> tuple[object, ...]:
    return (
        store.read("s"),
        store.presence.read("ns"),
        store.inspect.list_snapshots("s"),
        store.inspect.list_sessions(),
    )


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_bad_argument_is_invalid_argument_naming_it_and_writes_nothing(
    store: Store, case: Case
) -> None:
    """SPEC §4: each rejected input -> INVALID_ARGUMENT naming the argument; nothing written.

    Every bad value of the argument is tried in turn on one store, and the
    store is observed unchanged after each (one store per argument keeps the
    suite fast on every engine and facade).
    """
    _seed(store)
    before = _observe(store)
    for bad in case.bad:
        with pytest.raises(A2Error) as raised:
            case.call(store, bad)
        assert raised.value.code is ErrorCode.INVALID_ARGUMENT, (bad, raised.value)
        assert case.argument in raised.value.message, (bad, raised.value.message)
        assert _observe(store) == before, bad


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_the_same_call_with_a_good_value_is_accepted(store: Store, case: Case) -> None:
    """Control for the test above: only the bad value makes the call fail."""
    _seed(store)
    case.call(store, case.good)


def test_names_of_255_characters_are_accepted(store: Store) -> None:
    """SPEC §4: names up to 255 characters are valid (the limit is 'longer than 255')."""
    name = "é" * 254 + "😀"
    store.append(name, [NewEvent(name, id=name, lane=name)])
    store.put_snapshot(name, name, 1, None)
    store.presence.set(name, name, {name: 1}, at=AT, seen=0, ttl_ms=1000)
    assert [e.id for e in store.read(name)] == [name]
    assert [i.reducer_name for i in store.inspect.list_snapshots(name)] == [name]
    assert [e.field for e in store.presence.read(name)] == [name]


def test_json_size_limit_is_configurable_and_rejects_bigger_values(
    open_store: Callable[..., Store],
) -> None:
    """SPEC §4: payloads, states and presence values over the configured size are invalid."""
    small = open_store(max_json_chars=100)
    small.append("s", [NewEvent("t", {"fits": "x" * 50})])
    small.put_snapshot("s", "r", 1, ["x" * 50])
    big = "x" * 200
    before = (small.read("s"), small.inspect.list_snapshots("s"), small.presence.read("ns"))
    calls: list[tuple[str, Callable[[], object]]] = [
        ("payload", lambda: small.append("s", [NewEvent("t", {"big": big})])),
        ("state", lambda: small.put_snapshot("s", "r", 1, big)),
        ("values", lambda: small.presence.set("ns", "p", {"f": big}, at=AT, seen=0, ttl_ms=1000)),
    ]
    for argument, call in calls:
        with pytest.raises(A2Error) as raised:
            call()
        assert raised.value.code is ErrorCode.INVALID_ARGUMENT
        assert argument in raised.value.message
    assert (small.read("s"), small.inspect.list_snapshots("s"), small.presence.read("ns")) == (
        before
    )
