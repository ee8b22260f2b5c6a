"""The bare-driver floor on PostgreSQL: psycopg 3, prepared statements, a2sql's semantics.

Same database, same schema (a2sql's migrations), same indexes, same
transaction boundaries: one transaction per operation (``BEGIN`` …
``COMMIT``, each a round trip, as SQLAlchemy's psycopg dialect sends them),
and every write on a session first takes a2sql's transaction-scoped advisory
lock on it (``pg_advisory_xact_lock(0x6132, hashtext(session_id))``) as its
own statement, so later statements see what earlier lock holders committed.
Every statement is prepared on the server (``prepare=True``; none is with
``python -m bench --unprepared``, as behind a transaction pooler). The minimal
SQL for the paths the workloads take (no lanes or supplied ids on append,
no replays):

- append: lock + ``pg_notify`` (delivered at commit) in one select; last
  index and "has pending" in one select; one insert (``executemany``,
  pipelined, for a batch).
- claim: lock; ``UPDATE … RETURNING`` over the dispatchable events; only when
  nothing was claimed, the earliest unexpired claim (``retry_at``).
- complete: lock + notify; one fenced ``UPDATE … RETURNING`` that also
  returns the session's last index; when it matches nothing, one select
  tells not-found from superseded; the returned events' insert (their ids'
  uniqueness is the unique index's job: a violation rolls back).
- read_state / read_events / list_sessions: the selects in one transaction.

Rows come back as psycopg returns them (json columns decoded by psycopg).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.ids import uuid7
from bench.impl import EVENT_TYPE, HOLDER, JSON, TTL_MS, Child

LOCK_CLASS = 0x6132
CHANNEL = "a2sql_events"

LOCK = f"select pg_advisory_xact_lock({LOCK_CLASS}, hashtext(%s))"
LOCK_NOTIFY = (
    f"select pg_advisory_xact_lock({LOCK_CLASS}, hashtext(%s)), pg_notify('{CHANNEL}', %s)"
)
INSERT = (
    "insert into a2_events (session_id, idx, event_type, payload, event_id, created_at,"
    " cause, lane, lane_ready, processed_at) values (%s, %s, %s, %s::json, %s, %s, %s, %s, %s, %s)"
)
STATUS = (
    "select (select max(idx) from a2_events where session_id = %(sid)s),"
    " exists (select 1 from a2_events where session_id = %(sid)s and processed_at is null)"
)
CLAIM = (
    "update a2_events set attempt_count = attempt_count + 1,"
    " first_claimed_at = coalesce(first_claimed_at, %(now)s), last_claimed_at = %(now)s,"
    " claim_holder = %(holder)s, claim_expires_at = %(exp)s"
    " where session_id = %(sid)s and lane_ready and processed_at is null and failed_at is null"
    " and (claim_expires_at is null or claim_expires_at <= %(now)s)"
    " returning idx, attempt_count, event_id, event_type, payload, cause, lane"
)
NEXT_EXPIRY = (
    "select min(claim_expires_at) from a2_events where session_id = %s and lane_ready"
    " and processed_at is null and failed_at is null and claim_expires_at > %s"
)
COMPLETE = (
    "update a2_events set processed_at = %(now)s, processed_by_attempt = %(attempt)s,"
    " returned_event_ids = %(ids)s, lane_ready = false, claim_holder = null,"
    " claim_expires_at = null"
    " where session_id = %(sid)s and idx = %(index)s and attempt_count = %(attempt)s"
    " and processed_at is null and failed_at is null and claim_holder is not null"
    " returning lane, (select max(idx) from a2_events where session_id = %(sid)s)"
)
EVENT_STATE = (
    "select processed_at, processed_by_attempt from a2_events where session_id = %s and idx = %s"
)
PROMOTE_LANE_HEAD = (
    "update a2_events set lane_ready = true where session_id = %(sid)s and idx = (select min(idx)"
    " from a2_events where session_id = %(sid)s and lane = %(lane)s and processed_at is null)"
)
SNAPSHOT = "select up_to_index, state from a2_snapshots where session_id = %s and reducer_name = %s"
EVENTS_AFTER = (
    "select idx, event_id, event_type, payload, created_at from a2_events"
    " where session_id = %s and idx > %s order by idx"
)
FRONTIER = "select coalesce(max(idx), 0) from a2_events where session_id = %s"
PAGE = (
    "select * from a2_events where session_id = %s and idx > %s and idx <= %s order by idx limit %s"
)
SUMMARIES = (
    "select session_id, count(*),"
    " count(*) filter (where processed_at is null and failed_at is null),"
    " count(*) filter (where failed_at is not null), sum(attempt_count), sum(failure_count),"
    " min(created_at), max(greatest(created_at, first_claimed_at, last_claimed_at,"
    " last_failed_at, processed_at, failed_at)),"
    # claimed, blocked behind a dead letter, oldest pending (SessionSummary's newer fields)
    " count(*) filter (where processed_at is null and failed_at is null"
    " and claim_holder is not null and claim_expires_at > %s),"
    " sum(case when processed_at is null and failed_at is not null and lane is not null then"
    " (select count(*) from a2_events b where b.session_id = a2_events.session_id"
    " and b.lane = a2_events.lane and b.processed_at is null and b.idx > a2_events.idx)"
    " else 0 end),"
    " min(created_at) filter (where processed_at is null and failed_at is null)"
    " from a2_events where session_id >= %s and session_id < %s"
    " group by session_id order by session_id limit %s"
)


def encode(value: JSON) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def now() -> datetime:
    """The wall clock in UTC, truncated to the millisecond (a2sql's stored precision)."""
    value = datetime.now(UTC)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def successor(prefix: str) -> str:
    """The least string after every string starting with ``prefix`` (bench prefixes only)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"


class PostgresBaseline:
    """a2sql's operations on psycopg 3, by hand."""

    name = "baseline"

    def __init__(self, dsn: str, *, prepare: bool = True) -> None:
        # autocommit: transactions are the explicit BEGIN … COMMIT below.
        self.conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=5 if prepare else None)
        self.prepare = prepare
        self.cur = self.conn.cursor()
        self.statements = 0

    def counting(self, on: bool) -> None:
        """The baseline always counts: an integer increment per statement."""

    @property
    def round_trips(self) -> int:
        """Each statement waits for its answer (an ``executemany`` is pipelined: one)."""
        return self.statements

    def _x(self, sql: str, params: Any = None) -> psycopg.Cursor[Any]:
        self.statements += 1
        return self.cur.execute(sql, params, prepare=self.prepare)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self.statements += 1  # BEGIN
        with self.conn.transaction():
            yield
        self.statements += 1  # COMMIT (or ROLLBACK)

    def _insert(self, rows: list[tuple[Any, ...]]) -> None:
        if len(rows) == 1:
            self._x(INSERT, rows[0])
        else:
            self.statements += 1
            self.cur.executemany(INSERT, rows)

    def append(self, session_id: str, payloads: Sequence[JSON]) -> int:
        with self._transaction():
            self._x(LOCK_NOTIFY, (session_id, session_id))
            at = now()
            last, _pending = self._x(STATUS, {"sid": session_id}).fetchone()  # type: ignore[misc]
            last = last or 0
            self._insert(
                [
                    (
                        session_id,
                        last + n,
                        EVENT_TYPE,
                        encode(p),
                        uuid7(),
                        at,
                        None,
                        None,
                        True,
                        None,
                    )
                    for n, p in enumerate(payloads, 1)
                ]
            )
        return int(last + len(payloads))

    def claim(self, session_id: str) -> list[tuple[int, int]]:
        with self._transaction():
            self._x(LOCK, (session_id,))
            at = now()
            params: dict[str, Any] = {
                "now": at,
                "holder": HOLDER,
                "exp": at + timedelta(milliseconds=TTL_MS),
                "sid": session_id,
            }
            rows = self._x(CLAIM, params).fetchall()
            if not rows:
                self._x(NEXT_EXPIRY, (session_id, at)).fetchone()
        claimed = sorted(
            (
                idx,
                attempt,
                event_id,
                event_type,
                payload,
                None if cause is None else json.loads(cause),
                lane,
            )
            for idx, attempt, event_id, event_type, payload, cause, lane in rows
        )
        return [(row[0], row[1]) for row in claimed]

    def complete(
        self, session_id: str, index: int, attempt: int, children: Sequence[Child]
    ) -> bool:
        with self._transaction():
            self._x(LOCK_NOTIFY, (session_id, session_id))
            return self._complete(session_id, now(), index, attempt, children)

    def complete_many(self, session_id: str, claims: Sequence[tuple[int, int]]) -> int:
        with self._transaction():
            self._x(LOCK_NOTIFY, (session_id, session_id))
            at = now()
            return sum(self._complete(session_id, at, i, a, ()) for i, a in claims)

    def _complete(
        self, session_id: str, at: datetime, index: int, attempt: int, children: Sequence[Child]
    ) -> bool:
        ids = [child[0] for child in children]
        row = self._x(
            COMPLETE,
            {"now": at, "attempt": attempt, "ids": encode(ids), "sid": session_id, "index": index},
        ).fetchone()
        if row is None:
            state = self._x(EVENT_STATE, (session_id, index)).fetchone()
            if state is None:
                raise LookupError(f"no event at index {index} in session {session_id!r}")
            if state[0] is not None and state[1] == attempt:
                raise NotImplementedError("the baseline does not replay completions")
            return False
        lane, last = row
        if lane is not None:
            self._x(PROMOTE_LANE_HEAD, {"sid": session_id, "lane": lane})
        if children:
            cause = f'{{"index":{index},"attempt":{attempt}}}'
            rows = []
            for n, (event_id, event_type, payload, settled) in enumerate(children, 1):
                processed = at if settled else None
                index = last + n
                row = (session_id, index, event_type, encode(payload), event_id, at, cause)
                rows.append((*row, None, True, processed))
            self._insert(rows)
        return True

    def read_state(self, session_id: str, reducer: str) -> int:
        with self._transaction():
            snapshot = self._x(SNAPSHOT, (session_id, reducer)).fetchone()
            after = 0 if snapshot is None else snapshot[0]
            rows = self._x(EVENTS_AFTER, (session_id, after)).fetchall()
        return len(rows)

    def list_sessions(self, prefix: str, limit: int) -> int:
        with self._transaction():
            rows = self._x(SUMMARIES, (now(), prefix, successor(prefix), limit + 1)).fetchall()
        return len(rows[:limit])

    def read_events(self, session_id: str, after: int, limit: int) -> int:
        with self._transaction():
            (frontier,) = self._x(FRONTIER, (session_id,)).fetchone()  # type: ignore[misc]
            rows = self._x(PAGE, (session_id, after, frontier, limit)).fetchall()
        events = [
            (*row[:6], None if row[6] is None else json.loads(row[6]), *row[7:]) for row in rows
        ]
        return len(events)

    def close(self) -> None:
        self.conn.close()
