"""The one-round-trip floor on PostgreSQL: each transaction of append, claim and
complete sent at once, in psycopg's pipeline mode (``python -m bench``, PostgreSQL
``append`` and ``cycle``: the third implementation).

``baseline_postgres`` sends a2sql's statements one round trip each, as a2sql
does: like for like. This floor is what the same work costs when the client
waits once per transaction: ``BEGIN``, the session lock, one statement that
does the rest on the server, ``COMMIT``, in one pipeline.

- append: the lock (and ``pg_notify``), then ``INSERT … SELECT`` that numbers
  the events on the server after the session's last index and returns, as
  append does, whether the session had unprocessed events.
- claim: the lock, then the same guarded ``UPDATE … RETURNING`` as the
  baseline (the "nothing claimable until when" read only when it claimed
  nothing, as a second round trip).
- complete: the lock (and ``pg_notify``), then one statement: the fenced
  ``UPDATE … RETURNING`` and the returned events' ``INSERT`` after the
  session's last index, as data-modifying CTEs. A lane's next event is not
  promoted: the workloads that use the floor (append, cycle) have no lanes.

One event (an append of one, a completion returning one) is sent as values,
not lists, as a2sql sends it: psycopg sends a value for less than a list.

The lock stays a statement of its own before anything that reads: under
READ COMMITTED a statement's snapshot is taken when it starts, so a lock
taken inside it would not make it see what the lock's previous holder
committed. Pipelined, it costs no extra wait.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg

from bench.baseline_postgres import (
    CLAIM,
    LOCK,
    LOCK_NOTIFY,
    NEXT_EXPIRY,
    PostgresBaseline,
    encode,
    now,
)
from bench.ids import uuid7
from bench.impl import EVENT_TYPE, HOLDER, JSON, TTL_MS, Child

_COLUMNS = (
    "insert into a2_events (session_id, idx, event_type, payload, event_id, created_at,"
    " cause, lane, lane_ready, processed_at)"
)
_LAST = "(select coalesce(max(idx), 0) from a2_events where session_id = %(sid)s)"
# Whether the session had unprocessed events before the append: part of
# append's answer (a subquery in RETURNING sees the session as it was).
_PENDING = "exists (select 1 from a2_events where session_id = %(sid)s and processed_at is null)"
APPEND = (
    f"{_COLUMNS} select %(sid)s, base.last + new.n, %(type)s, new.payload::json, new.id, %(now)s,"
    " null, null, true, null"
    f" from {_LAST} as base(last), unnest(%(payloads)s::text[], %(ids)s::text[]) with ordinality"
    f" as new(payload, id, n) returning idx, {_PENDING}"
)
# One event: its values as parameters, not lists (psycopg sends a value for
# less than a list).
APPEND_ONE = (
    f"{_COLUMNS} select %(sid)s, {_LAST} + 1, %(type)s, %(payload)s::json, %(id)s, %(now)s,"
    f" null, null, true, null returning idx, {_PENDING}"
)
_DONE = (
    "with done as ("
    " update a2_events set processed_at = %(now)s, processed_by_attempt = %(attempt)s,"
    " returned_event_ids = %(ids)s, lane_ready = false, claim_holder = null,"
    " claim_expires_at = null"
    " where session_id = %(sid)s and idx = %(index)s and attempt_count = %(attempt)s"
    " and processed_at is null and failed_at is null and claim_holder is not null"
    " returning (select max(idx) from a2_events where session_id = %(sid)s) as last),"
)
COMPLETE = (
    f"{_DONE} returned as ("
    f" {_COLUMNS}"
    " select %(sid)s, done.last + new.n, new.type, new.payload::json, new.id, %(now)s,"
    " %(cause)s, null, true, case when new.settled then %(now)s end"
    " from done, unnest(%(child_ids)s::text[], %(types)s::text[], %(payloads)s::text[],"
    " %(settled)s::boolean[]) with ordinality as new(id, type, payload, settled, n)"
    " returning 1)"
    " select count(*) from done"
)
COMPLETE_ONE = (
    f"{_DONE} returned as ("
    f" {_COLUMNS}"
    " select %(sid)s, done.last + 1, %(type)s, %(payload)s::json, %(child_id)s, %(now)s,"
    " %(cause)s, null, true, case when %(settled)s then %(now)s::timestamptz end"
    " from done returning 1)"
    " select count(*) from done"
)


class PostgresFloor(PostgresBaseline):
    """append, claim and complete at one round trip per transaction."""

    name = "floor"

    def __init__(self, dsn: str, *, prepare: bool = True) -> None:
        super().__init__(dsn, prepare=prepare)
        self.trips = 0

    @property
    def round_trips(self) -> int:
        return self.trips

    def _pipelined(self, *statements: tuple[str, Any]) -> psycopg.Cursor[Any]:
        """BEGIN, ``statements``, COMMIT in one round trip: the last statement's cursor."""
        self.statements += len(statements) + 2
        self.trips += 1
        cursors = []
        with self.conn.pipeline():
            self.conn.execute("BEGIN")
            for sql, params in statements:
                cursors.append(self.conn.execute(sql, params, prepare=self.prepare))
            self.conn.execute("COMMIT")
        return cursors[-1]

    def append(self, session_id: str, payloads: Sequence[JSON]) -> int:
        params: dict[str, Any] = {"sid": session_id, "type": EVENT_TYPE, "now": now()}
        if len(payloads) == 1:
            params.update(payload=encode(payloads[0]), id=uuid7())
            statement = APPEND_ONE
        else:
            params.update(payloads=[encode(p) for p in payloads], ids=[uuid7() for _ in payloads])
            statement = APPEND
        rows = self._pipelined(
            (LOCK_NOTIFY, (session_id, session_id)), (statement, params)
        ).fetchall()
        return int(max(row[0] for row in rows))

    def claim(self, session_id: str) -> list[tuple[int, int]]:
        at = now()
        params = {
            "now": at,
            "holder": HOLDER,
            "exp": at + timedelta(milliseconds=TTL_MS),
            "sid": session_id,
        }
        rows = self._pipelined((LOCK, (session_id,)), (CLAIM, params)).fetchall()
        if not rows:
            self.statements += 1
            self.trips += 1
            self.cur.execute(NEXT_EXPIRY, (session_id, at)).fetchone()
        return sorted((row[0], row[1]) for row in rows)

    def complete(
        self, session_id: str, index: int, attempt: int, children: Sequence[Child]
    ) -> bool:
        params: dict[str, Any] = {
            "now": now(),
            "attempt": attempt,
            "ids": encode([child[0] for child in children]),
            "sid": session_id,
            "index": index,
            "cause": json.dumps({"index": index, "attempt": attempt}, separators=(",", ":")),
        }
        if len(children) == 1:
            [(child_id, child_type, payload, settled)] = children
            params.update(
                child_id=child_id, type=child_type, payload=encode(payload), settled=settled
            )
            statement = COMPLETE_ONE
        else:
            params.update(
                child_ids=[child[0] for child in children],
                types=[child[1] for child in children],
                payloads=[encode(child[2]) for child in children],
                settled=[child[3] for child in children],
            )
            statement = COMPLETE
        done = self._pipelined(
            (LOCK_NOTIFY, (session_id, session_id)), (statement, params)
        ).fetchone()
        return bool(done and done[0])
