"""Copying sessions between databases: events with every processing column, snapshots.

Each session is read in one transaction of the source and written in one
transaction of the destination, under its lock there, so a session is at
the destination whole or not at all: a copy that was interrupted, run
again, finds the sessions it finished exactly as the source has them and
passes over them. Presence is not copied (it is ephemeral), nor the attempt
numbers kept for deleted sessions (a2sql.sql.schema.retired_attempts). The rows are
copied as stored: ids, indexes, times, attempts, claims, payload text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from sqlalchemy import Text, cast, insert, select
from sqlalchemy.exc import DBAPIError

from a2sql.api.store import Store
from a2sql.core.errors import is_event_id_collision
from a2sql.core.records import SessionSummary, SnapshotInfo
from a2sql.plans.kinds import Plan
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.events import SESSION
from a2sql.sql.schema import events as E
from a2sql.sql.schema import snapshots as S

# JSON columns are read as their text, so that a copy keeps it byte for byte.
_EVENT_COLUMNS = [cast(c, Text).label(c.name) if c.name == "payload" else c for c in E.c]
_SNAPSHOT_COLUMNS = [cast(c, Text).label(c.name) if c.name == "state" else c for c in S.c]
READ_EVENTS = select(*_EVENT_COLUMNS).where(E.c.session_id == SESSION).order_by(E.c.idx)
READ_SNAPSHOTS = (
    select(*_SNAPSHOT_COLUMNS).where(S.c.session_id == SESSION).order_by(S.c.reducer_name)
)
HAS_EVENTS = select(E.c.idx).where(E.c.session_id == SESSION).limit(1)
INSERT_EVENTS = insert(E)
INSERT_SNAPSHOTS = insert(S)

# Rows per executemany: one session's copy is one transaction, sent in batches.
BATCH = 1000

Verdict = Literal["copy", "present", "different"]


class CopyConflict(Exception):
    """The destination cannot take a session as the source has it."""


@dataclass(frozen=True, slots=True)
class SessionRows:
    """One session's rows as read from the source, by column name."""

    session_id: str
    events: list[dict[str, Any]]
    snapshots: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """What a copy will do with each session of the source under the prefix."""

    to_copy: list[str]
    present: list[str]  # already at the destination, as at the source
    different: list[str]  # at the destination, but not as at the source


@dataclass(frozen=True, slots=True)
class CopyReport:
    """What a copy did."""

    copied: int
    events: int
    snapshots: int
    present: int
    skipped: int


def _rows(tx: Transaction, statement: Any, session_id: str, names: Sequence[str]) -> list[Any]:
    return [dict(zip(names, row, strict=True)) for row in tx.rows(statement, {"sid": session_id})]


def read_session(source: Store, session_id: str) -> SessionRows:
    """The session's events and snapshots, read in one transaction of ``source``."""

    def run(tx: Transaction) -> SessionRows:
        return SessionRows(
            session_id,
            _rows(tx, READ_EVENTS, session_id, [c.name for c in E.c]),
            _rows(tx, READ_SNAPSHOTS, session_id, [c.name for c in S.c]),
        )

    return source._run(Plan(run, read_only=True))


def write_session(destination: Store, rows: SessionRows) -> bool:
    """Insert the session's rows under its lock; ``False`` (nothing written) when the
    destination already has events in that session."""

    def run(tx: Transaction) -> bool:
        if tx.first(HAS_EVENTS, {"sid": rows.session_id}) is not None:
            return False
        try:
            for start in range(0, len(rows.events), BATCH):
                tx.run_many(INSERT_EVENTS, rows.events[start : start + BATCH])
        except DBAPIError as error:
            if not is_event_id_collision(error):
                raise
            raise CopyConflict(
                f"session {rows.session_id!r}: one of its event ids already exists at the "
                "destination, in another session"
            ) from None
        if rows.snapshots:
            tx.run_many(INSERT_SNAPSHOTS, rows.snapshots)
        return True

    # lock_session: the destination's writers of this session wait for the copy.
    return destination._run(Plan(run, lock_session=rows.session_id))


def source_sessions(source: Store, prefix: str) -> Iterator[SessionSummary]:
    """Every session of ``source`` under ``prefix``, by id, a page at a time."""
    cursor = None
    while True:
        page = source.inspect.list_sessions(prefix=prefix, cursor=cursor, limit=1000)
        yield from page.sessions
        if (cursor := page.cursor) is None:
            return


def _comparable(summary: SessionSummary | None) -> SessionSummary | None:
    # Live claims are counted by each store's clock at a slightly different time.
    return None if summary is None else replace(summary, claimed_count=0)


def _snapshots(store: Store, session_id: str) -> list[SnapshotInfo]:
    return store.inspect.list_snapshots(session_id)


def plan(source: Store, destination: Store, summaries: Sequence[SessionSummary]) -> CopyPlan:
    """Sort the source's sessions into those to copy, those the destination already has
    as the source has them (an earlier copy's), and those it has otherwise."""
    to_copy, present, different = [], [], []
    for summary in summaries:
        sid = summary.session_id
        there = destination.inspect.session(sid)
        if there is None:
            to_copy.append(sid)
        # The counts first; then every row, as the same times may well hold other events.
        elif _comparable(there) == _comparable(summary) and read_session(
            destination, sid
        ) == read_session(source, sid):
            present.append(sid)
        else:
            different.append(sid)
    return CopyPlan(to_copy, present, different)


def copy_sessions(
    source: Store,
    destination: Store,
    session_ids: Sequence[str],
    *,
    on_session: Callable[[str, bool], None] = lambda _sid, _copied: None,
) -> tuple[int, int, int]:
    """Copy each session in turn; ``on_session(id, copied)`` after each. Returns how many
    sessions, events and snapshots were written."""
    sessions = events = snapshots = 0
    for session_id in session_ids:
        rows = read_session(source, session_id)
        written = bool(rows.events) and write_session(destination, rows)
        if written:
            sessions += 1
            events += len(rows.events)
            snapshots += len(rows.snapshots)
        on_session(session_id, written)
    return sessions, events, snapshots


def mismatches(source: Store, destination: Store, session_ids: Sequence[str]) -> list[str]:
    """Sessions whose event or snapshot count differs between the two databases."""
    wrong = []
    for session_id in session_ids:
        here = source.inspect.session(session_id)
        there = destination.inspect.session(session_id)
        counts = [
            (s.event_count if s else 0, len(_snapshots(store, session_id)))
            for s, store in ((here, source), (there, destination))
        ]
        if counts[0] != counts[1]:
            wrong.append(session_id)
    return wrong
