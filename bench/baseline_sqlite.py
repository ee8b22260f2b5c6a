"""The bare-driver floor on SQLite: ``sqlite3`` and hand-written SQL, a2sql's semantics.

Same file, same schema (a2sql's migrations), same indexes, same pragmas
(WAL, ``synchronous=normal``, ``busy_timeout``), same transaction boundaries:
one transaction per operation, ``BEGIN IMMEDIATE`` for writers and a
deferred ``BEGIN`` for readers. ``sqlite3`` keeps every statement prepared
(its statement cache). It is the minimal SQL for the paths the workloads
take (events without lanes or supplied ids on append; no replays):

- append: ``BEGIN IMMEDIATE``; last index and "has pending" in one select;
  one insert (``executemany`` for a batch); ``COMMIT``.
- claim: ``BEGIN IMMEDIATE``; ``UPDATE … RETURNING`` over the dispatchable
  events; only when nothing was claimed, the earliest unexpired claim
  (``retry_at``); ``COMMIT``.
- complete: ``BEGIN IMMEDIATE``; one fenced ``UPDATE … RETURNING`` (attempt
  current, unprocessed, claimed, not dead-lettered) that also returns the
  session's last index; when it matches nothing, one select tells not-found
  from superseded; the returned events' insert (their ids' uniqueness is
  the unique index's job); ``COMMIT``.
- read_state / read_events / list_sessions: ``BEGIN``; the selects; ``COMMIT``.

Rows come back as driver tuples with their JSON columns decoded.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from bench.ids import uuid7
from bench.impl import EVENT_TYPE, HOLDER, JSON, TTL_MS, Child

INSERT = (
    "insert into a2_events (session_id, idx, event_type, payload, event_id, created_at,"
    " cause, lane, lane_ready, processed_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
STATUS = (
    "select (select max(idx) from a2_events where session_id = ?1),"
    " exists (select 1 from a2_events where session_id = ?1 and processed_at is null)"
)
DISPATCHABLE = "session_id = ?4 and lane_ready = 1 and processed_at is null and failed_at is null"
CLAIM = (
    "update a2_events set attempt_count = attempt_count + 1,"
    " first_claimed_at = coalesce(first_claimed_at, ?1), last_claimed_at = ?1,"
    " claim_holder = ?2, claim_expires_at = ?3"
    f" where {DISPATCHABLE} and (claim_expires_at is null or claim_expires_at <= ?1)"
    " returning idx, attempt_count, event_id, event_type, payload, cause, lane"
)
NEXT_EXPIRY = (
    "select min(claim_expires_at) from a2_events where session_id = ? and lane_ready = 1"
    " and processed_at is null and failed_at is null and claim_expires_at > ?"
)
COMPLETE = (
    "update a2_events set processed_at = ?1, processed_by_attempt = ?2,"
    " returned_event_ids = ?3, lane_ready = 0, claim_holder = null, claim_expires_at = null"
    " where session_id = ?4 and idx = ?5 and attempt_count = ?2 and processed_at is null"
    " and failed_at is null and claim_holder is not null"
    " returning lane, (select max(idx) from a2_events where session_id = ?4)"
)
EVENT_STATE = (
    "select processed_at, processed_by_attempt from a2_events where session_id = ? and idx = ?"
)
PROMOTE_LANE_HEAD = (
    "update a2_events set lane_ready = 1 where session_id = ?1 and idx = (select min(idx)"
    " from a2_events where session_id = ?1 and lane = ?2 and processed_at is null)"
)
SNAPSHOT = "select up_to_index, state from a2_snapshots where session_id = ? and reducer_name = ?"
EVENTS_AFTER = (
    "select idx, event_id, event_type, payload, created_at from a2_events"
    " where session_id = ? and idx > ? order by idx"
)
FRONTIER = "select coalesce(max(idx), 0) from a2_events where session_id = ?"
PAGE = "select * from a2_events where session_id = ? and idx > ? and idx <= ? order by idx limit ?"
SUMMARIES = (
    "select session_id, count(*), sum(processed_at is null and failed_at is null),"
    " sum(failed_at is not null), sum(attempt_count), sum(failure_count), min(created_at),"
    " max(max(created_at, coalesce(first_claimed_at, 0), coalesce(last_claimed_at, 0),"
    " coalesce(last_failed_at, 0), coalesce(processed_at, 0), coalesce(failed_at, 0))),"
    # claimed, blocked behind a dead letter, oldest pending (SessionSummary's newer fields)
    " sum(processed_at is null and failed_at is null and claim_holder is not null"
    " and claim_expires_at > ?),"
    " sum(case when processed_at is null and failed_at is not null and lane is not null then"
    " (select count(*) from a2_events b where b.session_id = a2_events.session_id"
    " and b.lane = a2_events.lane and b.processed_at is null and b.idx > a2_events.idx)"
    " else 0 end),"
    " min(case when processed_at is null and failed_at is null then created_at end)"
    " from a2_events where session_id >= ? and session_id < ?"
    " group by session_id order by session_id limit ?"
)


def encode(value: JSON) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def successor(prefix: str) -> str:
    """The least string after every string starting with ``prefix`` (bench prefixes only)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"


class SqliteBaseline:
    """a2sql's operations on ``sqlite3``, by hand."""

    name = "baseline"

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(
            path, isolation_level=None, timeout=30, check_same_thread=False, cached_statements=256
        )
        self.conn.execute("pragma busy_timeout = 30000")
        self.conn.execute("pragma journal_mode = wal")
        self.conn.execute("pragma synchronous = normal")
        self.statements = 0
        # Nothing to wait for on SQLite: no round trips counted.
        self.round_trips = None

    def counting(self, on: bool) -> None:
        """The baseline always counts: an integer increment per statement."""

    def _x(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        self.statements += 1
        return self.conn.execute(sql, params)

    @contextmanager
    def _transaction(self, begin: str = "begin immediate") -> Iterator[None]:
        self._x(begin)
        try:
            yield
        except BaseException:
            self._x("rollback")
            raise
        self._x("commit")

    def append(self, session_id: str, payloads: Sequence[JSON]) -> int:
        with self._transaction():
            now = now_ms()
            last, _pending = self._x(STATUS, (session_id,)).fetchone()
            last = last or 0
            rows = [
                (session_id, last + n, EVENT_TYPE, encode(p), uuid7(), now, None, None, 1, None)
                for n, p in enumerate(payloads, 1)
            ]
            if len(rows) == 1:
                self._x(INSERT, rows[0])
            else:
                self.statements += 1
                self.conn.executemany(INSERT, rows)
        return last + len(rows)

    def claim(self, session_id: str) -> list[tuple[int, int]]:
        with self._transaction():
            now = now_ms()
            rows = self._x(CLAIM, (now, HOLDER, now + TTL_MS, session_id)).fetchall()
            if not rows:
                self._x(NEXT_EXPIRY, (session_id, now)).fetchone()
        claimed = sorted(
            (idx, attempt, event_id, event_type, json.loads(payload), cause, lane)
            for idx, attempt, event_id, event_type, payload, cause, lane in rows
        )
        return [(row[0], row[1]) for row in claimed]

    def complete(
        self, session_id: str, index: int, attempt: int, children: Sequence[Child]
    ) -> bool:
        with self._transaction():
            return self._complete(session_id, now_ms(), index, attempt, children)

    def complete_many(self, session_id: str, claims: Sequence[tuple[int, int]]) -> int:
        with self._transaction():
            now = now_ms()
            return sum(self._complete(session_id, now, i, a, ()) for i, a in claims)

    def _complete(
        self, session_id: str, now: int, index: int, attempt: int, children: Sequence[Child]
    ) -> bool:
        ids = [child[0] for child in children]
        row = self._x(COMPLETE, (now, attempt, encode(ids), session_id, index)).fetchone()
        if row is None:
            state = self._x(EVENT_STATE, (session_id, index)).fetchone()
            if state is None:
                raise LookupError(f"no event at index {index} in session {session_id!r}")
            if state[0] is not None and state[1] == attempt:
                raise NotImplementedError("the baseline does not replay completions")
            return False
        lane, last = row
        if lane is not None:
            self._x(PROMOTE_LANE_HEAD, (session_id, lane))
        if children:
            cause = f'{{"index":{index},"attempt":{attempt}}}'
            rows = [
                (session_id, last + n, t, encode(p), i, now, cause, None, 1, now if s else None)
                for n, (i, t, p, s) in enumerate(children, 1)
            ]
            if len(rows) == 1:
                self._x(INSERT, rows[0])
            else:
                self.statements += 1
                self.conn.executemany(INSERT, rows)
        return True

    def read_state(self, session_id: str, reducer: str) -> int:
        with self._transaction("begin"):
            snapshot = self._x(SNAPSHOT, (session_id, reducer)).fetchone()
            after = 0 if snapshot is None else snapshot[0]
            if snapshot is not None:
                json.loads(snapshot[1])
            rows = self._x(EVENTS_AFTER, (session_id, after)).fetchall()
        events = [(idx, eid, et, json.loads(p), c) for idx, eid, et, p, c in rows]
        return len(events)

    def list_sessions(self, prefix: str, limit: int) -> int:
        with self._transaction("begin"):
            rows = self._x(SUMMARIES, (now_ms(), prefix, successor(prefix), limit + 1)).fetchall()
        return len(rows[:limit])

    def read_events(self, session_id: str, after: int, limit: int) -> int:
        with self._transaction("begin"):
            (frontier,) = self._x(FRONTIER, (session_id,)).fetchone()
            rows = self._x(PAGE, (session_id, after, frontier, limit)).fetchall()
        events = [
            (
                *row[:3],
                json.loads(row[3]),
                *row[4:6],
                None if row[6] is None else json.loads(row[6]),
            )
            for row in rows
        ]
        return len(events)

    def close(self) -> None:
        self.conn.close()
