"""The SQL each operation sends, per engine, checked in under ``tests/internals/sql/<engine>/``.

A reviewer sees every statement an operation runs, in order, and a change to
one shows in the diff. Each file holds the statements of one call of a fixed
scenario (the common path: the fence holds, nothing is replayed), as the
driver's cursor receives them, each ending with ``;`` (a COMMIT the driver
sends itself is not among them; SQLite's ``BEGIN IMMEDIATE`` is). Where a2sql's
direct path (a2sql.execution.raw), which nothing observes, sends other statements
(it wakes streams after the commit), they are in ``tests/internals/sql/postgresql/direct/``.
SQLAlchemy's anonymous names (``anon_1``, ``%(param_1)s``, ``count(*) AS count_1``)
are in the files as ``anon#1``, ``%(param#1)s``, ``count#1``: numbered in the order they
first appear in their statement, not as SQLAlchemy numbers them (see anonymized).
After changing a statement on purpose, write the files anew and review the diff:

    A2SQL_WRITE_GOLDEN_SQL=1 make test PYTEST_ARGS=tests/internals/test_golden_sql.py
"""

from __future__ import annotations

import os
import re
from collections import Counter
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


# SQLAlchemy's anonymous names, which it numbers as it compiles a statement: a
# subquery, alias or label of its own (anon_1; anon__1 for a column repeated) and a
# bind parameter of its own (param_1) anywhere; any label ending in a number
# (count(*) AS count_1; a2sql names none so); and a bind parameter named after a
# function or column of the statement (coalesce(x, %(coalesce_2)s),
# attempt_count + %(attempt_count_1)s). Not a2sql's own names (sid, now, wait), nor
# the values of an expanding parameter (IN (%(ids_1)s, %(ids_2)s)), whose numbers
# are their places in the list.
_ANONYMOUS = re.compile(r"\b(?:anon|param)_+\d+\b")
_LABEL = re.compile(r"\bAS (\w+_\d+)\b")
_BIND = re.compile(r"%\((\w+_\d+)\)s|(?<![:\w]):(\w+_\d+)\b")


def anonymized(statement: str) -> str:
    """``statement`` with SQLAlchemy's anonymous names as ``anon#1``, ``coalesce#2``: the
    distinct names of a stem numbered in the order they first appear, so that a release
    of SQLAlchemy that numbers them otherwise does not rewrite the files. The renaming
    is one to one, so the files hold the statements as strictly as before. It numbers
    each statement apart, as SQLAlchemy does: a change that adds a name to one statement
    renumbers that statement alone, not the statements after it in the file."""
    names = set(_ANONYMOUS.findall(statement)) | set(_LABEL.findall(statement))
    for match in _BIND.finditer(statement):
        name = match[1] or match[2]
        if re.search(rf"\b{re.escape(name.rpartition('_')[0])}\b", statement):
            names.add(name)
    if not names:
        return statement
    placeholders: dict[str, str] = {}
    counts: Counter[str] = Counter()

    def placeholder(match: re.Match[str]) -> str:
        name = match[0]
        if name not in placeholders:
            stem = name.rpartition("_")[0]
            counts[stem] += 1
            placeholders[name] = f"{stem}#{counts[stem]}"
        return placeholders[name]

    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return re.sub(rf"\b(?:{alternatives})\b", placeholder, statement)


def normalized(statement: str) -> str:
    """One statement as a file holds it: its lines without trailing blanks, then ``;``,
    with SQLAlchemy's anonymous names renamed (anonymized)."""
    lines = [line.rstrip() for line in statement.strip().splitlines()]
    return anonymized("\n".join(line for line in lines if line)) + ";"


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
        f"{engine_kind}: the SQL of {', '.join(mismatched)} differs from tests/internals/sql/"
        f"{engine_kind}/. If the change is meant, write the files anew "
        "(A2SQL_WRITE_GOLDEN_SQL=1, see this module's docstring) and review the diff"
    )
    found = sorted(p.stem for p in (GOLDEN / engine_kind).glob("*.sql"))
    assert found == sorted(name for name, _ in scenario(store)), "a file without its call"


def test_no_golden_file_holds_a_literal_value() -> None:
    """Values go as bound parameters: the files hold none of the scenario's values."""
    for path in GOLDEN.glob("**/*.sql"):
        assert not re.search(r"'(e1|r1|boom|ns)'", path.read_text()), path


def test_anonymized_numbers_sqlalchemys_names_as_they_appear() -> None:
    """Statements that differ only in how SQLAlchemy numbers its anonymous names read
    the same; a2sql's own names and the places of an expanding parameter's values stay."""
    one = (
        "SELECT coalesce(anon_2.x, %(coalesce_2)s) AS coalesce_1, NULL AS anon_3, NULL AS"
        " anon__1 FROM (SELECT t.x AS x FROM t WHERE t.n + %(n_1)s = %(sid)s LIMIT"
        " %(param_1)s) AS anon_2 WHERE t.id IN (%(ids_1)s, %(ids_2)s) AND t.m = :param_1"
    )
    other = (
        "SELECT coalesce(anon_1.x, %(coalesce_1)s) AS coalesce_2, NULL AS anon_2, NULL AS"
        " anon__3 FROM (SELECT t.x AS x FROM t WHERE t.n + %(n_4)s = %(sid)s LIMIT"
        " %(param_2)s) AS anon_1 WHERE t.id IN (%(ids_1)s, %(ids_2)s) AND t.m = :param_2"
    )
    both = (
        "SELECT coalesce(anon#1.x, %(coalesce#1)s) AS coalesce#2, NULL AS anon#2, NULL AS"
        " anon_#1 FROM (SELECT t.x AS x FROM t WHERE t.n + %(n#1)s = %(sid)s LIMIT"
        " %(param#1)s) AS anon#1 WHERE t.id IN (%(ids_1)s, %(ids_2)s) AND t.m = :param#1"
    )
    assert anonymized(one) == both
    assert anonymized(other) == both
    # Numbered apart: the statement's first name is #1 whichever SQLAlchemy made it.
    assert anonymized("SELECT anon_7.x FROM (SELECT 1 AS x) AS anon_7") == (
        "SELECT anon#1.x FROM (SELECT 1 AS x) AS anon#1"
    )
    # One to one: two names are two placeholders, and the one they stand for shows.
    assert anonymized("SELECT anon_1.x, anon_2.x") != anonymized("SELECT anon_1.x, anon_1.x")
    which = "SELECT anon_{}.x FROM (SELECT 1 AS x) AS anon_1, (SELECT 2 AS x) AS anon_2"
    assert anonymized(which.format(1)) != anonymized(which.format(2))
    assert anonymized(one) != anonymized(one.replace("coalesce(anon_2.x", "coalesce(anon_2.y"))
    assert anonymized(one) != anonymized(one.replace("%(sid)s", "%(now)s"))
    # Not names SQLAlchemy numbers: a table, a column, a2sql's bind parameters and the
    # values of one of them that expands, though a column and a value end in numbers.
    plain = (
        "SELECT a2_events.attempt_count_2 AS attempts FROM a2_events WHERE"
        " a2_events.session_id = %(sid)s AND a2_events.idx IN (%(indexes_1)s, %(indexes_2)s)"
    )
    assert anonymized(plain) == plain


# The calls whose common case is one pipeline on PostgreSQL's direct path
# (a2sql.backends.postgresql.one_statement): the lock tried and one statement, in one implicit
# transaction.
FUSED = {"append", "claim_available", "claim_available_busy", "complete_attempt", "fail_attempt"}


def test_the_direct_path_sends_the_same_sql(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store nothing observes runs on the driver's cursor (a2sql.execution.raw): it sends the
    statements of the files too, as the driver receives them, and the fused calls send
    them in one pipeline (a2sql.execution.wire), without BEGIN and COMMIT; those that add events
    wake streams after the commit, with a statement of its own in the same pipeline
    (their files under ``direct/``)."""
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
