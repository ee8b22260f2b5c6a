"""The SQL each operation sends, per engine, checked in under ``tests/sql/<engine>/``.

A reviewer sees every statement an operation runs, in order, and a change to
one shows in the diff. Each file holds the statements of one call of a fixed
scenario (the common path: the fence holds, nothing is replayed), as the
driver's cursor receives them, each ending with ``;`` (a COMMIT the driver
sends itself is not among them; SQLite's ``BEGIN IMMEDIATE`` is). Where a2sql's
direct path (a2sql.direct), which nothing observes, sends other statements
(it wakes streams after the commit), they are in ``tests/sql/postgresql/direct/``.
After changing a statement on purpose, write the files anew and review the diff:

    A2SQL_WRITE_GOLDEN_SQL=1 make test PYTEST_ARGS=tests/test_golden_sql.py
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

import a2sql
from a2sql import ClaimRef, Completion, NewEvent, Store
from a2sql.testing import FakeClock
from tests.recording import recording_engine

GOLDEN = Path(__file__).parent / "sql"
WRITE = os.environ.get("A2SQL_WRITE_GOLDEN_SQL") == "1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def scenario(store: Store) -> Iterator[tuple[str, Callable[[], Any]]]:
    """The calls, named: each is run and its statements recorded in turn."""
    yield "append", lambda: store.append("s", [NewEvent("t", {"n": 1}, id="e1")])
    yield (
        "append_batch",
        lambda: store.append(
            "s", [NewEvent("t", 2, id="e2", lane="L"), NewEvent("t", 3, id="e3", lane="L")]
        ),
    )
    yield "read", lambda: store.read("s")
    # Limited, as a worker's batch (a2sql.worker); the busy claim is not.
    yield (
        "claim_available",
        lambda: store.claim_available("s", holder="w", ttl_ms=60_000, limit=16),
    )
    # Nothing free now: the same statement answers until when.
    yield "claim_available_busy", lambda: store.claim_available("s", holder="w", ttl_ms=60_000)
    yield (
        "renew_claims",
        lambda: store.renew_claims("s", holder="w", claims=[ClaimRef(1, 1)], ttl_ms=60_000),
    )
    yield (
        "complete_attempt",
        lambda: store.complete_attempt(
            "s", index=1, attempt=1, events=[NewEvent("r", id="r1", settled=True)]
        ),
    )
    yield (
        "fail_attempt",
        lambda: store.fail_attempt(
            "s", index=2, attempt=1, error="boom", max_failures=3, retry_after_ms=0
        ),
    )
    yield "release_claims", lambda: store.release_claims("s", holder="w", claims=[ClaimRef(3, 1)])
    yield "claim_next", lambda: store.claim_next(holder="w", ttl_ms=60_000, limit=16)
    yield "complete_attempts", lambda: store.complete_attempts("s", [Completion(2, 2)])
    yield "put_snapshot", lambda: store.put_snapshot("s", "r", 1, {"count": 1})
    yield "read_state", lambda: store.read_state("s", "r")
    yield (
        "presence_set",
        lambda: store.presence.set("ns", "p", {"f": 1}, at=T0, seen=1, ttl_ms=60_000),
    )
    yield "presence_read", lambda: store.presence.read("ns")
    yield "list_sessions", lambda: store.inspect.list_sessions()
    yield "read_events", lambda: store.inspect.read_events("s")
    yield "delete_session", lambda: store.delete_session("s")


def normalized(statement: str) -> str:
    """One statement as a file holds it: its lines without trailing blanks, then ``;``."""
    lines = [line.rstrip() for line in statement.strip().splitlines()]
    return "\n".join(line for line in lines if line) + ";"


@pytest.mark.parametrize("engine_kind", ["sqlite", "postgresql"])
def test_each_operation_sends_the_sql_checked_in(
    engine_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if engine_kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'golden.db'}"
    else:
        url = str(request.getfixturevalue("postgres_url"))
    recorded: list[str] = []
    with a2sql.create_store(url, migrate=True, clock=FakeClock(T0)) as store:

        @event.listens_for(store.engine, "before_cursor_execute")
        def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            recorded.append(statement)

        store.read("warm-up")  # the connection's one-time settings, outside the files
        mismatched = []
        for name, call in scenario(store):
            recorded.clear()
            call()
            text = "\n\n".join(normalized(s) for s in recorded) + "\n"
            path = GOLDEN / engine_kind / f"{name}.sql"
            if WRITE:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            elif not path.exists() or path.read_text() != text:
                mismatched.append(name)
    assert not mismatched, (
        f"{engine_kind}: the SQL of {', '.join(mismatched)} differs from tests/sql/"
        f"{engine_kind}/. If the change is meant, write the files anew "
        "(A2SQL_WRITE_GOLDEN_SQL=1, see this module's docstring) and review the diff"
    )
    found = sorted(p.stem for p in (GOLDEN / engine_kind).glob("*.sql"))
    assert found == sorted(name for name, _ in scenario(store)), "a file without its call"


def test_no_golden_file_holds_a_literal_value() -> None:
    """Values go as bound parameters: the files hold none of the scenario's values."""
    for path in GOLDEN.glob("**/*.sql"):
        assert not re.search(r"'(e1|r1|boom|ns)'", path.read_text()), path


# The calls whose common case is one pipeline on PostgreSQL's direct path
# (a2sql.ops.fused): the lock tried and one statement, in one implicit transaction.
FUSED = {"append", "claim_available", "claim_available_busy", "complete_attempt", "fail_attempt"}


def test_the_direct_path_sends_the_same_sql(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store nothing observes runs on the driver's cursor (a2sql.direct): it sends the
    statements of the files too, as the driver receives them, and the fused calls send
    them in one pipeline (a2sql.wire), without BEGIN and COMMIT; those that add events
    wake streams after the commit, with a statement of its own in the same pipeline
    (their files under ``direct/``). (The scenario's claim takes lane events never
    claimed, which a call sent whole leaves to the way after the lock: the session is
    not then remembered as contended.)"""
    monkeypatch.setattr(a2sql.calls, "CONTENDED_S", 0.0)
    url = str(request.getfixturevalue("postgres_url"))
    engine, sent = recording_engine(url, monkeypatch)
    try:
        with a2sql.create_store(engine, migrate=True, clock=FakeClock(T0)) as store:
            store.delete_session("s")  # a clean slate, and the connection's one-time settings
            mismatched = []
            for name, call in scenario(store):
                sent.clear()
                call()
                statements = [sql for sql, _ in sent if not sql.startswith(("BEGIN", "COMMIT"))]
                text = "\n\n".join(normalized(s) for s in statements) + "\n"
                observed = (GOLDEN / "postgresql" / f"{name}.sql").read_text()
                direct = GOLDEN / "postgresql" / "direct" / f"{name}.sql"
                if WRITE:
                    if text != observed:
                        direct.parent.mkdir(exist_ok=True)
                        direct.write_text(text)
                    else:
                        direct.unlink(missing_ok=True)
                elif (direct.read_text() if direct.exists() else observed) != text:
                    mismatched.append(name)
                if name in FUSED:
                    # Sent whole: an implicit transaction, without BEGIN and COMMIT.
                    assert not sent[0][0].startswith("BEGIN"), name
                    assert all(pipelined for _, pipelined in sent), f"{name}: not one pipeline"
                else:
                    assert not any(pipelined for _, pipelined in sent), name
    finally:
        engine.dispose()
    assert not mismatched, f"the direct path's SQL of {', '.join(mismatched)} differs"
    found = {p.stem for p in (GOLDEN / "postgresql" / "direct").glob("*.sql")}
    assert found <= FUSED, "a file under direct/ for a call that is not sent whole"
