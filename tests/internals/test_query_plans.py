"""The hot statements are served by the indexes meant for them (issue 6; SPEC §5 indexes).

Each test EXPLAINs (PostgreSQL: ``EXPLAIN (FORMAT JSON)``; SQLite: ``EXPLAIN
QUERY PLAN``) a statement of a2sql.sql.queries, bound with realistic parameters, on a
table of ~23k events over 200 sessions plus one long session (90% processed;
PostgreSQL ANALYZEd, so the planner chooses as it would in production), and
asserts which index it seeks. The SQL and parameters are exactly what a2sql
sends: the statement is executed once in a rolled-back transaction and
captured with a ``before_cursor_execute`` listener. The last test EXPLAINs
every statement the worker's loop and the reads send through the public API
and asserts that none scans ``a2_events`` whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.sql import Executable

import a2sql
from a2sql import NewEvent
from a2sql.backends import backend_of
from a2sql.backends.postgresql.one_statement import claim_available as fused_claim
from a2sql.core.arguments import Lease
from a2sql.core.clock import to_millis
from a2sql.sql.queries.append import PARENT_ATTEMPTS
from a2sql.sql.queries.attempts import COMPLETE_IF_CURRENT, PROMOTE_LANE_HEAD
from a2sql.sql.queries.claims import NEXT_EXPIRY, claim, claim_statement
from a2sql.sql.queries.dispatch import CANDIDATES_PER_READ, bounds, candidates, next_free
from a2sql.sql.queries.events import EVENTS_BY_ID, PENDING_LANES, SESSION_STATUS
from a2sql.sql.queries.operator_reads import PAGE, WAITING_OR_SCHEDULED
from bench.databases import BURST, FILLER_T0_MS

SESSIONS = 200
PER_SESSION = 100
LONG = "long/0"
LONG_EVENTS = 3000
TARGET = "s/00042"

DISPATCH_READY = "a2_events_dispatch_ready"
CLAIM_EXPIRY = "a2_events_claim_expiry"
UNPROCESSED = "a2_events_unprocessed"
LANE_PENDING = "a2_events_lane_pending"
EVENT_ID = "a2_events_event_id"
DISPATCH_FREE = "a2_events_dispatch_free"
DISPATCH_DUE = "a2_events_dispatch_due"

_PG_LOAD = """
insert into a2_events (session_id, idx, event_type, payload, event_id, created_at, lane,
    lane_ready, processed_at, processed_by_attempt, attempt_count)
select %(prefix)s::text || lpad(s::text, %(width)s, '0'), i, 'filler', '{"n":1}'::json,
    md5(%(prefix)s::text || s || '/' || i), now(),
    case when i %% 3 = 0 then 'lane' || (i %% 7) end,
    i %% 10 = 0, case when i %% 10 = 0 then null else now() end,
    case when i %% 10 = 0 then null else 1 end, case when i %% 10 = 0 then 0 else 1 end
from generate_series(1, %(per)s) as i, generate_series(0, %(sessions)s - 1) as s
"""

_SQLITE_LOAD = """
insert into a2_events (session_id, idx, event_type, payload, event_id, created_at, lane,
    lane_ready, processed_at, processed_by_attempt, attempt_count)
with recursive
    s(n) as (select 0 union all select n + 1 from s where n < :sessions - 1),
    k(i) as (select 1 union all select i + 1 from k where i < :per)
select :prefix || printf('%0' || :width || 'd', n), i, 'filler', '{"n":1}',
    :prefix || n || '/' || i, 1700000000000 + i,
    case when i % 3 = 0 then 'lane' || (i % 7) end,
    i % 10 = 0, case when i % 10 = 0 then null else 1700000000001 + i end,
    case when i % 10 = 0 then null else 1 end, case when i % 10 = 0 then 0 else 1 end
from k, s
"""


@dataclass(frozen=True)
class Access:
    """How a plan reaches a2_events: by which index (None: the table), seeking or scanning."""

    index: str | None
    seek: bool
    condition: str


@dataclass(frozen=True)
class Plan:
    accesses: list[Access]
    sorts: bool  # a sort or temp b-tree: rows read before the first is returned
    text: str

    def indexes(self) -> set[str | None]:
        return {access.index for access in self.accesses}

    def seeks(self, index: str) -> list[Access]:
        return [a for a in self.accesses if a.index == index and a.seek]

    def full_scans(self) -> list[Access]:
        return [a for a in self.accesses if not a.seek]


class Explainer:
    """EXPLAIN what a2sql sends, on one migrated and loaded database."""

    def __init__(self, store: a2sql.Store) -> None:
        self.store = store
        self.engine: Engine = store.engine
        self.postgres = self.engine.dialect.name == "postgresql"
        self.pk = "a2_events_pkey" if self.postgres else "sqlite_autoindex_a2_events_1"

    def sent(self, statement: Executable, params: dict[str, Any]) -> tuple[str, Any]:
        """The SQL and parameters a2sql's dialect sends for ``statement`` (run, rolled back)."""
        with self.engine.connect() as connection, self.capture() as captured:
            transaction = connection.begin()
            try:
                connection.execute(statement, params)
            finally:
                transaction.rollback()
        return captured[-1]

    @staticmethod
    def _pg_accesses(node: dict[str, Any], out: list[Access]) -> bool:
        sorts = node["Node Type"] in ("Sort", "Incremental Sort") or (
            node["Node Type"] == "Aggregate" and node.get("Strategy") == "Hashed"
        )
        index = node.get("Index Name")
        if index is not None and index.startswith("a2_events"):
            condition = node.get("Index Cond", "")
            out.append(Access(index, bool(condition), condition))
        elif node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "a2_events":
            out.append(Access(None, False, node.get("Filter", "")))
        for child in node.get("Plans", []):
            sorts = Explainer._pg_accesses(child, out) or sorts
        return sorts

    def explain_sql(self, sql: str, params: Any) -> Plan:
        with self.engine.connect() as connection:
            if self.postgres:
                raw: Any = connection.exec_driver_sql(
                    "EXPLAIN (FORMAT JSON) " + sql, params
                ).scalar()
                tree = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
                accesses: list[Access] = []
                sorts = self._pg_accesses(tree, accesses)
                return Plan(accesses, sorts, json.dumps(tree, indent=1))
            rows = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params).fetchall()
            connection.rollback()
        details = [str(row[-1]) for row in rows]
        accesses = []
        for detail in details:
            found = re.match(r"(SEARCH|SCAN) a2_events(?: AS \w+)?(.*)", detail)
            if found is None:
                continue
            kind, rest = found.groups()
            index = re.search(r"USING (?:COVERING )?INDEX (\w+)", rest)
            condition = re.search(r"\((.*)\)", rest)
            accesses.append(
                Access(
                    index.group(1) if index else None,
                    kind == "SEARCH",
                    condition.group(1) if condition else "",
                )
            )
        sorts = any("TEMP B-TREE" in detail for detail in details)
        return Plan(accesses, sorts, "\n".join(details))

    def explain(self, statement: Executable, params: dict[str, Any]) -> Plan:
        return self.explain_sql(*self.sent(statement, params))

    def capture(self) -> _Capture:
        return _Capture(self.engine)


class _Capture:
    """Every (sql, parameters) the engine sends while open."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sent: list[tuple[str, Any]] = []

    def _grab(self, _conn: Any, _cursor: Any, sql: str, params: Any, *_: Any) -> None:
        self.sent.append((sql, params))

    def __enter__(self) -> list[tuple[str, Any]]:
        event.listen(self.engine, "before_cursor_execute", self._grab)
        return self.sent

    def __exit__(self, *_: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._grab)


def _load(store: a2sql.Store) -> None:
    postgres = store.engine.dialect.name == "postgresql"
    with store.engine.connect() as connection:
        for prefix, width, sessions, per in (
            ("s/", 5, SESSIONS, PER_SESSION),
            (LONG[:-1], 1, 1, LONG_EVENTS),
        ):
            params = {"prefix": prefix, "width": width, "sessions": sessions, "per": per}
            with connection.begin():
                connection.exec_driver_sql(_PG_LOAD if postgres else _SQLITE_LOAD, params)
        if postgres:
            connection.commit()
            connection.exec_driver_sql("analyze a2_events")
            connection.commit()


@pytest.fixture
def plans(db_url: str) -> Iterator[Explainer]:
    with a2sql.create_store(db_url, migrate=True) as store:
        _load(store)
        yield Explainer(store)


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _why(plan: Plan) -> str:
    return f"plan:\n{plan.text}"


def test_claim_seeks_a_partial_index_of_dispatchable_events(plans: Explainer) -> None:
    """claim_available (SPEC §3) reads only the session's dispatchable events.

    Either partial index over ``lane_ready and processed_at is null and
    failed_at is null`` serves it (same predicate, both led by session_id);
    a2sql orders the claimed events itself.
    """
    plan = plans.explain(
        claim_statement(False, False),
        {"sid": TARGET, "now": NOW, "holder": "w", "expires_at": None, "lease_ms": 30_000},
    )
    seeks = plans_seeking(plan, {DISPATCH_READY, CLAIM_EXPIRY})
    assert seeks and all("session_id" in s.condition for s in seeks), _why(plan)
    assert not plan.full_scans(), _why(plan)


def test_claim_retry_at_seeks_the_claim_expiry_index(plans: Explainer) -> None:
    """claim_available's ``retry_at`` (earliest unexpired claim) seeks session_id and expiry."""
    plan = plans.explain(NEXT_EXPIRY, {"sid": TARGET, "now": NOW})
    seeks = plan.seeks(CLAIM_EXPIRY)
    assert seeks and "claim_expires_at" in seeks[0].condition, _why(plan)
    assert plan.indexes() == {CLAIM_EXPIRY}, _why(plan)


# --- a limited claim in a backlog the statistics have not seen ------------------

BACKLOG = 20_000
CLAIM_LIMIT = 16
BACKLOG_SESSION = "burst"

# What stays pending when the table is analyzed: a few events (one in a hundred),
# or none at all.
_STILL_PENDING = {"few": "idx % 100 = 0", "none": "false"}


def _load_backlog(store: a2sql.Store, pending: str) -> None:
    """200 sessions of 100 events, all processed but ``pending``'s, analyzed with
    autovacuum off; then BACKLOG events appended to one session, unseen by the
    statistics (a burst into one session, before autovacuum's next ANALYZE)."""
    postgres = store.engine.dialect.name == "postgresql"
    percent = "%%" if postgres else "%"
    still_pending = _STILL_PENDING[pending].replace("%", percent)
    with store.engine.connect() as connection:
        if postgres:
            connection.exec_driver_sql("alter table a2_events set (autovacuum_enabled = off)")
        params = {"prefix": "s/", "width": 5, "sessions": SESSIONS, "per": PER_SESSION}
        connection.exec_driver_sql(_PG_LOAD if postgres else _SQLITE_LOAD, params)
        connection.exec_driver_sql(
            "update a2_events set processed_at = created_at, processed_by_attempt = 1,"
            f" attempt_count = 1 where processed_at is null and not ({still_pending})"
        )
        connection.commit()
        connection.exec_driver_sql("analyze a2_events" if postgres else "analyze")
        connection.commit()
        connection.exec_driver_sql(
            BURST["postgres" if postgres else "sqlite"],
            {"sid": BACKLOG_SESSION, "events": BACKLOG, "t0": FILLER_T0_MS},
        )
        connection.commit()


def _limited_claims(postgres: bool) -> Iterator[tuple[str, Executable, dict[str, Any]]]:
    """(name, statement, parameters) of every limited claim a2sql sends for
    BACKLOG_SESSION: claim_available's and claim_next's, and on PostgreSQL the fused
    one."""
    now = datetime.now(UTC)
    args = {"holder": "w", "now": now, "lease": Lease(60_000, None)}
    for excluded in ((), (1, 3)):
        statement, params = claim(
            BACKLOG_SESSION, exclude_indexes=excluded, limit=CLAIM_LIMIT, **args
        )
        yield f"claim excluding {list(excluded)}", statement, params
    if postgres:
        one = fused_claim(BACKLOG_SESSION, exclude_indexes=(), limit=CLAIM_LIMIT, **args)
        yield "fused", one.statement, dict(one.params)


def _pg_node_reads(node: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(node, rows read per loop, loops) of every node of an EXPLAIN ANALYZE tree that
    reads a2_events' rows: those it returned and those its filters removed."""
    found = []
    if node.get("Relation Name") == "a2_events":
        read = (
            node["Actual Rows"]
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
        name = f"{node['Node Type']} {node.get('Index Name', '')}"
        found.append((name, read, node["Actual Loops"]))
    for child in node.get("Plans", []):
        found.extend(_pg_node_reads(child))
    return found


def _sqlite_steps(store: a2sql.Store, sql: str, params: Any) -> int:
    """Virtual machine instructions SQLite ran for one execution (rolled back)."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 100
        return 0

    with store.engine.connect() as connection:
        driver = connection.connection.driver_connection
        driver.set_progress_handler(count, 100)
        try:
            with connection.begin() as transaction:
                connection.exec_driver_sql(sql, params).fetchall()
                transaction.rollback()
        finally:
            driver.set_progress_handler(None, 0)
    return steps


@pytest.mark.parametrize("pending", ["few", "none"])
def test_a_limited_claim_reads_its_limit_in_a_backlog_the_statistics_never_saw(
    db_url: str, pending: str
) -> None:
    """claim_available(limit=16) and claim_next(limit=16) in a session of 20,000 pending
    events appended after the last ANALYZE, which saw a table of processed events.

    PostgreSQL's planner then believes the session has one dispatchable event. With
    a few pending at the ANALYZE, every node reading a2_events reads at most twice
    the limit, once (the claim used to be a nested-loop semi-join that read the
    limit's subquery again for each of the 20,000 events). With none pending, the
    planner believes the partial indexes empty, and may read the backlog once and
    sort it for the limit's 16, but no node runs more than once. On SQLite the claim
    seeks both key columns with the list of the lowest free indexes, read in
    a2_events_dispatch_ready's order, and runs fewer instructions than the backlog
    has events."""
    with a2sql.create_store(db_url, migrate=True) as store:
        _load_backlog(store, pending)
        explainer = Explainer(store)
        for name, statement, params in _limited_claims(explainer.postgres):
            sql, sent = explainer.sent(statement, params)
            if not explainer.postgres:
                plan = explainer.explain_sql(sql, sent)
                outer, taken = plan.accesses
                assert outer.seek and re.search(r"session_id=\? AND idx=\?", outer.condition)
                assert (taken.index, taken.condition) == (DISPATCH_READY, "session_id=?")
                assert not plan.sorts, f"{name}: {_why(plan)}"
                steps = _sqlite_steps(store, sql, sent)
                assert steps < BACKLOG, f"{name}: {steps} instructions\n{_why(plan)}"
                continue
            with store.engine.connect() as connection, connection.begin() as transaction:
                raw: Any = connection.exec_driver_sql(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, sent
                ).scalar()
                transaction.rollback()
            tree = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
            reads = _pg_node_reads(tree)
            why = f"{name}: {reads}\n{json.dumps(tree, indent=1)}"
            assert reads and all(loops <= 1 for _, _, loops in reads), why
            bound = 2 * CLAIM_LIMIT if pending == "few" else BACKLOG + 2 * CLAIM_LIMIT
            assert all(read <= bound for _, read, _ in reads), why
            assert tree["Actual Rows"] == CLAIM_LIMIT, why


def test_append_supplied_id_lookup_seeks_the_unique_event_id_index(plans: Explainer) -> None:
    """append's duplicate and replay check (SPEC §3 append step 2) looks ids up by index."""
    plan = plans.explain(EVENTS_BY_ID, {"ids": [f"s/{n}/{n}" for n in range(1, 6)]})
    assert plan.seeks(EVENT_ID) and plan.indexes() == {EVENT_ID}, _why(plan)


def test_append_session_status_seeks_the_key_and_the_unprocessed_index(plans: Explainer) -> None:
    """append's next index (max idx) seeks the primary key; has_pending the first entry of
    a2_events_unprocessed (a2_events_lane_pending would read every pending event)."""
    plan = plans.explain(SESSION_STATUS, {"sid": LONG})
    assert plan.seeks(plans.pk), _why(plan)
    assert plan.seeks(UNPROCESSED) and LANE_PENDING not in plan.indexes(), _why(plan)
    assert not plan.full_scans(), _why(plan)


def _rows_read(node: dict[str, Any]) -> list[tuple[str, float]]:
    """(index or table, actual rows per loop) of every node of an EXPLAIN ANALYZE tree
    that reads a2_events."""
    found = []
    if node.get("Relation Name") == "a2_events":
        found.append((node.get("Index Name") or "a2_events", node["Actual Rows"]))
    for child in node.get("Plans", []):
        found.extend(_rows_read(child))
    return found


@pytest.mark.parametrize(
    "statement",
    ["session_status", "next_expiry", "complete_if_current", "promote_lane_head"],
)
def test_firsts_and_lasts_read_one_entry_whatever_the_statistics_say(
    postgres_url: str, statement: str
) -> None:
    """PostgreSQL, a session of 3000 claimed events (a third in one lane) appended after the
    last ANALYZE (which saw a table of 20 rows): the session's last index, whether it
    has pending events, its earliest unexpired claim and its lane's head are each read
    as one index entry, not by going through every event of the session."""
    with a2sql.create_store(postgres_url, migrate=True) as store:
        store.append("warm", [NewEvent("t", n) for n in range(20)])
        with store.engine.connect() as connection:
            connection.exec_driver_sql("analyze a2_events")
            connection.commit()
        for start in range(0, 3000, 500):
            batch = [
                NewEvent("t", n, lane="L" if n % 3 == 0 else None)
                for n in range(start, start + 500)
            ]
            store.append("big", batch)
        store.claim_available("big", holder="w", ttl_ms=60_000)
        now = datetime.now(UTC)
        statements: dict[str, tuple[Executable, dict[str, Any]]] = {
            "session_status": (SESSION_STATUS, {"sid": "big"}),
            "next_expiry": (NEXT_EXPIRY, {"sid": "big", "now": now}),
            "complete_if_current": (
                COMPLETE_IF_CURRENT,
                {"sid": "big", "index": 2, "attempt": 1, "now": now, "returned": "[]"},
            ),
            "promote_lane_head": (PROMOTE_LANE_HEAD, {"sid": "big", "lane_name": "L"}),
        }
        sql, params = Explainer(store).sent(*statements[statement])
        # ANALYZE runs the statement: the updates are rolled back.
        with store.engine.connect() as connection, connection.begin() as transaction:
            raw: Any = connection.exec_driver_sql(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params
            ).scalar()
            transaction.rollback()
    tree = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    reads = _rows_read(tree)
    assert reads and all(rows <= 1 for _, rows in reads), json.dumps(tree, indent=1)


def test_append_fence_lookup_seeks_the_primary_key(plans: Explainer) -> None:
    """append's fence (SPEC §3 append step 3) reads the causes' events by (session, index)."""
    plan = plans.explain(PARENT_ATTEMPTS, {"sid": LONG, "indexes": [5, 17, 2999]})
    seeks = plan.seeks(plans.pk)
    assert seeks and "idx" in seeks[0].condition, _why(plan)
    assert not plan.full_scans(), _why(plan)


def test_append_pending_lanes_seeks_the_lane_pending_index(plans: Explainer) -> None:
    """append's lane readiness (SPEC §3 append step 4) seeks (session, lane) among unprocessed."""
    plan = plans.explain(PENDING_LANES, {"sid": LONG, "lanes": ["lane0", "lane3"]})
    seeks = plan.seeks(LANE_PENDING)
    assert seeks and "lane" in seeks[0].condition, _why(plan)
    assert not plan.full_scans(), _why(plan)


def test_read_events_page_seeks_the_key_in_index_order(plans: Explainer) -> None:
    """inspect.read_events (SPEC §3): a page costs the page, not the session: no sort."""
    plan = plans.explain(PAGE, {"sid": LONG, "after": 1000, "through": LONG_EVENTS, "limit": 100})
    assert plan.seeks(plans.pk) and plan.indexes() == {plans.pk}, _why(plan)
    assert not plan.sorts, _why(plan)


def _list_sessions_sql(plans: Explainer, **kw: Any) -> list[tuple[str, Any]]:
    with plans.capture() as captured:
        page = plans.store.inspect.list_sessions(limit=50, **kw)
    assert page.sessions
    return [(sql, p) for sql, p in captured if "a2_events" in sql]


def test_list_sessions_prefix_is_a_range_seek_on_the_key(plans: Explainer) -> None:
    """inspect.list_sessions with a prefix (SPEC §3) seeks a range of session ids.

    Both bounds are on the key (no ``substr`` or ``like`` over every row), and
    the groups come out of the key's order (no sort).
    """
    for sql, params in _list_sessions_sql(plans, prefix="s/001"):
        plan = plans.explain_sql(sql, params)
        seeks = plan.seeks(plans.pk)
        assert seeks, _why(plan)
        assert re.search(r"session_id\s*>=?", seeks[0].condition), _why(plan)
        assert re.search(r"session_id\s*<", seeks[0].condition), _why(plan)
        assert not plan.full_scans() and not plan.sorts, _why(plan)


def test_list_sessions_first_page_reads_in_key_order_without_sorting(plans: Explainer) -> None:
    """inspect.list_sessions without prefix (SPEC §3): groups in key order, stopping at the page."""
    for cursor in (None, "s/00100"):
        for sql, params in _list_sessions_sql(plans, cursor=cursor):
            plan = plans.explain_sql(sql, params)
            # blocked_count's subquery, run per dead letter, seeks the lane's
            # pending events; the groups themselves come from the key alone.
            behind = [a for a in plan.accesses if a.index == "a2_events_lane_pending"]
            assert all(access.seek for access in behind), _why(plan)
            assert plan.indexes() - {"a2_events_lane_pending"} == {plans.pk}, _why(plan)
            assert not plan.sorts, _why(plan)


def test_a_page_of_sessions_under_a_narrow_prefix_reads_the_page(postgres_url: str) -> None:
    """PostgreSQL, 300 sessions of 5 events under a prefix holding a sliver of the key
    space of 21,500 events, statistics fresh but coarse (10 histogram buckets): from the
    histogram the prefix's range looks a few rows wide. A page of 50 of its sessions still
    reads the page's 51 sessions' events (the 51st tells whether there is more) in key
    order, not every event under the prefix through a bitmap scan and a sort."""
    with a2sql.create_store(postgres_url, migrate=True) as store:
        with store.engine.connect() as connection:
            for prefix, width, sessions, per in (("s/", 5, 200, 100), ("l/", 4, 300, 5)):
                params = {"prefix": prefix, "width": width, "sessions": sessions, "per": per}
                connection.exec_driver_sql(_PG_LOAD, params)
            connection.exec_driver_sql(
                "alter table a2_events alter column session_id set statistics 10"
            )
            connection.commit()
            connection.exec_driver_sql("analyze a2_events")
            connection.commit()
        _assert_a_page_of_5_event_sessions_reads_the_page(
            store, [f"l/{n:04d}" for n in range(50)], prefix="l/"
        )


def test_a_page_after_a_cursor_past_the_statistics_reads_the_page(postgres_url: str) -> None:
    """PostgreSQL, 20,000 events ANALYZEd, then 300 sessions of 5 events whose ids sort
    after every id the statistics saw (ids that grow with time do): the page after the
    last analyzed session reads its 51 sessions' events in key order, not every event
    after the cursor through a bitmap scan and a sort."""
    with a2sql.create_store(postgres_url, migrate=True) as store:
        with store.engine.connect() as connection:
            params = {"prefix": "s/", "width": 5, "sessions": 200, "per": 100}
            connection.exec_driver_sql(_PG_LOAD, params)
            connection.commit()
            connection.exec_driver_sql("analyze a2_events")
            params = {"prefix": "t/", "width": 4, "sessions": 300, "per": 5}
            connection.exec_driver_sql(_PG_LOAD, params)
            connection.commit()
        _assert_a_page_of_5_event_sessions_reads_the_page(
            store, [f"t/{n:04d}" for n in range(50)], cursor="s/00199"
        )


def _assert_a_page_of_5_event_sessions_reads_the_page(
    store: a2sql.Store, expected: list[str], **page_args: Any
) -> None:
    """list_sessions(limit=50, **page_args) gives ``expected``, and running its statement
    reads 51 sessions of 5 events and the first row after them, which ends the 51st group."""
    with Explainer(store).capture() as captured:
        page = store.inspect.list_sessions(limit=50, **page_args)
    assert [s.session_id for s in page.sessions] == expected
    [(sql, params)] = [(sql, p) for sql, p in captured if "a2_events" in sql]
    with store.engine.connect() as connection:
        raw: Any = connection.exec_driver_sql(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params
        ).scalar()
    tree = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    assert sum(rows for _, rows in _rows_read(tree)) <= 51 * 5 + 1, json.dumps(tree, indent=1)


def plans_seeking(plan: Plan, indexes: set[str]) -> list[Access]:
    return [a for a in plan.accesses if a.index in indexes and a.seek]


def _hot_paths(store: a2sql.Store) -> None:
    """The worker's loop and the reads, through the public API."""
    sid = "hot/0"
    store.append(sid, [NewEvent("t", {"n": 1}, lane="a"), NewEvent("t", {"n": 2}, id="hot-2")])
    store.append(sid, [NewEvent("t", {"n": 2}, id="hot-2")])  # replay
    claimed = store.claim_available(sid, holder="w", ttl_ms=30_000)
    store.claim_available(sid, holder="w", ttl_ms=30_000)  # busy: retry_at
    for position, claimed_event in enumerate(claimed.events):
        # The first completion's returned events have no lane: on PostgreSQL one
        # fused statement (a2sql.backends.postgresql.one_statement) completes, promotes lane "a"
        # and inserts.
        lane = None if position == 0 else "a"
        store.complete_attempt(
            sid,
            index=claimed_event.index,
            attempt=claimed_event.attempt_count,
            events=[
                NewEvent("child", None, id=f"hot-child-{claimed_event.index}-{n}", lane=lane)
                for n in range(2 - position)
            ],
        )
    # Fused appends: one event, and several with a supplied id.
    store.append(sid, [NewEvent("t", {"n": 3}, id="hot-3")])
    store.append(sid, [NewEvent("t", {"n": 4}), NewEvent("t", {"n": 5}, id="hot-5")])
    again = store.claim_available(sid, holder="w", ttl_ms=30_000)
    failing = again.events[0]
    store.fail_attempt(
        sid, index=failing.index, attempt=failing.attempt_count, error="e", max_failures=3
    )
    store.read_state(sid, "reducer")
    store.inspect.read_events(LONG, after_index=100, limit=100)
    store.inspect.list_sessions(prefix="s/00", limit=50)
    store.read(sid)


def test_no_hot_path_statement_scans_the_events_table(plans: Explainer) -> None:
    """Every statement of append, claim, complete, read_state and the inspect reads seeks.

    Cost then grows with the page or the batch, never with the table (issue 6).
    """
    with plans.capture() as captured:
        _hot_paths(plans.store)
    statements = [
        (sql, params)
        for sql, params in captured
        if "a2_events" in sql and re.match(r"\s*(select|update|delete|insert|with)", sql, re.I)
    ]
    assert len(statements) >= 8
    for sql, params in statements:
        if isinstance(params, list):  # executemany: the rows share one plan
            params = params[0]
        plan = plans.explain_sql(sql, params)
        assert not plan.full_scans(), f"{sql}\n{_why(plan)}"


# --- claim_next: the oldest claimable event across sessions (revision 0002) -----

# Events arrive round-robin over the sessions, a millisecond apart, so that age
# order interleaves sessions. Every tenth event is dispatchable; of those, every
# second one is claimed beyond NOW. The rest are processed.
_PG_DISPATCH_LOAD = """
insert into a2_events (session_id, idx, event_type, payload, event_id, created_at,
    lane_ready, processed_at, processed_by_attempt, attempt_count, claim_holder,
    claim_expires_at)
select %(prefix)s::text || lpad(s::text, %(width)s, '0'), i, 'filler', '{"n":1}'::json,
    md5(%(prefix)s::text || s || '/' || i),
    %(start)s + (i * %(sessions)s + s) * interval '1 millisecond',
    i %% 10 = 0, case when i %% 10 = 0 then null else %(start)s end,
    case when i %% 10 = 0 then null else 1 end,
    case when i %% 10 = 0 and i %% 20 != 0 then 0 else 1 end,
    case when i %% 20 = 0 then 'w' end,
    case when i %% 20 = 0 then %(claimed_until)s end
from generate_series(1, %(per)s) as i, generate_series(0, %(sessions)s - 1) as s
"""

_SQLITE_DISPATCH_LOAD = """
insert into a2_events (session_id, idx, event_type, payload, event_id, created_at,
    lane_ready, processed_at, processed_by_attempt, attempt_count, claim_holder,
    claim_expires_at)
with recursive
    s(n) as (select 0 union all select n + 1 from s where n < :sessions - 1),
    k(i) as (select 1 union all select i + 1 from k where i < :per)
select :prefix || printf('%0' || :width || 'd', n), i, 'filler', '{"n":1}',
    :prefix || n || '/' || i, :start + i * :sessions + n,
    i % 10 = 0, case when i % 10 = 0 then null else :start end,
    case when i % 10 = 0 then null else 1 end,
    case when i % 10 = 0 and i % 20 != 0 then 0 else 1 end,
    case when i % 20 = 0 then 'w' end,
    case when i % 20 = 0 then :claimed_until end
from k, s
"""

DISPATCH_START = NOW - timedelta(days=1)
CLAIMED_UNTIL = NOW + timedelta(minutes=5)
# Prefixes: most of the sessions, a tenth of them, and the one long session.
DISPATCH_PREFIXES = ("s/", "s/001", "long/")


def _load_dispatch(store: a2sql.Store) -> None:
    postgres = store.engine.dialect.name == "postgresql"
    start: Any = DISPATCH_START if postgres else to_millis(DISPATCH_START)
    until: Any = CLAIMED_UNTIL if postgres else to_millis(CLAIMED_UNTIL)
    with store.engine.connect() as connection:
        for prefix, width, sessions, per in (
            ("s/", 5, SESSIONS, PER_SESSION),
            (LONG[:-1], 1, 1, LONG_EVENTS),
        ):
            params = {
                "prefix": prefix,
                "width": width,
                "sessions": sessions,
                "per": per,
                "start": start,
                "claimed_until": until,
            }
            with connection.begin():
                connection.exec_driver_sql(
                    _PG_DISPATCH_LOAD if postgres else _SQLITE_DISPATCH_LOAD, params
                )
        if postgres:
            connection.exec_driver_sql("analyze a2_events")
            connection.commit()


@pytest.fixture
def dispatch_plans(db_url: str) -> Iterator[Explainer]:
    with a2sql.create_store(db_url, migrate=True) as store:
        _load_dispatch(store)
        yield Explainer(store)


def _bounds(prefix: str) -> tuple[bool, bool, dict[str, Any]]:
    """claim_next's prefix bounds, as a2sql.sql.queries.dispatch.claim_next binds them."""
    params: dict[str, Any] = {"now": NOW, **bounds(prefix)}
    return "lower" in params, "upper" in params, params


def _entries_read(node: dict[str, Any]) -> float:
    """Index entries (or rows) of a2_events an EXPLAIN ANALYZE tree read: those it kept
    and those its filters removed."""
    read = 0.0
    if node.get("Relation Name") == "a2_events":
        read += node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
    return read + sum(_entries_read(child) for child in node.get("Plans", []))


def _analyzed(plans: Explainer, sql: str, sent: Any) -> dict[str, Any]:
    """PostgreSQL's EXPLAIN ANALYZE tree of ``sql``, run in a transaction rolled back."""
    with plans.engine.connect() as connection:
        raw: Any = connection.exec_driver_sql(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, sent
        ).scalar()
        connection.rollback()
    tree: dict[str, Any] = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return tree


def _assert_reads_only_the_dispatch_indexes(plan: Plan) -> None:
    """The events never held come out of a2_events_dispatch_free in its order; those held
    are a range of a2_events_dispatch_due that ends now: no other index, no table scan."""
    assert plan.indexes() == {DISPATCH_FREE, DISPATCH_DUE}, _why(plan)
    [due] = [access for access in plan.accesses if access.index == DISPATCH_DUE]
    assert due.seek and "claim_expires_at" in due.condition, _why(plan)


def test_claim_next_candidates_read_the_free_index_in_order_and_what_is_due(
    dispatch_plans: Explainer,
) -> None:
    """claim_next's candidates (the oldest claimable events' sessions): the first entries
    of a2_events_dispatch_free, and the entries of a2_events_dispatch_due up to now. On
    PostgreSQL the read stops after the 16 it needs of each; the claims still running
    (a twentieth of the events, held until later) are not read at all."""
    lower, upper, params = _bounds("")
    sql, sent = dispatch_plans.sent(
        candidates(backend_of(dispatch_plans.engine), lower, upper, False), params
    )
    plan = dispatch_plans.explain_sql(sql, sent)
    _assert_reads_only_the_dispatch_indexes(plan)
    if not dispatch_plans.postgres:
        return
    tree = _analyzed(dispatch_plans, sql, sent)
    assert tree["Actual Rows"] == CANDIDATES_PER_READ, json.dumps(tree, indent=1)
    assert _entries_read(tree) <= 2 * CANDIDATES_PER_READ, json.dumps(tree, indent=1)


def test_claim_next_candidates_never_read_scheduled_or_waiting_events(
    dispatch_plans: Explainer,
) -> None:
    """Events held until later, older than every claimable one (5,000 runs due tomorrow,
    5,000 waits without a timeout), are never read: the due range ends now. On
    PostgreSQL, EXPLAIN ANALYZE counts the entries read."""
    held = [NewEvent("later", available_at=NOW + timedelta(days=1)) for _ in range(5_000)] + [
        NewEvent("waits", wake_on="approval") for _ in range(5_000)
    ]
    for start in range(0, len(held), 1_000):
        dispatch_plans.store.append(f"held/{start}", held[start : start + 1_000])
    with dispatch_plans.engine.begin() as connection:
        # Older than everything claimable, so that an age-ordered walk would meet them first.
        connection.exec_driver_sql(
            "update a2_events set created_at = "
            + (
                "created_at - interval '30 days'"
                if dispatch_plans.postgres
                else "created_at - 2592000000"
            )
            + " where session_id like 'held/"
            + ("%%'" if dispatch_plans.postgres else "%'")
        )
        if dispatch_plans.postgres:
            connection.exec_driver_sql("analyze a2_events")
    lower, upper, params = _bounds("")
    sql, sent = dispatch_plans.sent(
        candidates(backend_of(dispatch_plans.engine), lower, upper, False), params
    )
    plan = dispatch_plans.explain_sql(sql, sent)
    _assert_reads_only_the_dispatch_indexes(plan)
    idle_sql, idle_sent = dispatch_plans.sent(next_free(lower, upper), params)
    if dispatch_plans.postgres:
        tree = _analyzed(dispatch_plans, sql, sent)
        assert _entries_read(tree) <= 2 * CANDIDATES_PER_READ, json.dumps(tree, indent=1)
        # The idle retry_at: the first claim running out, not the waits and runs after it.
        tree = _analyzed(dispatch_plans, idle_sql, idle_sent)
        assert _entries_read(tree) <= 1, json.dumps(tree, indent=1)
    else:
        [due] = [access for access in plan.accesses if access.index == DISPATCH_DUE]
        assert "claim_expires_at<" in due.condition.replace(" ", ""), _why(plan)
        idle = dispatch_plans.explain_sql(idle_sql, idle_sent)
        assert idle.indexes() == {DISPATCH_DUE} and not idle.sorts, _why(idle)


@pytest.mark.parametrize("prefix", DISPATCH_PREFIXES)
def test_claim_next_candidates_under_a_prefix_read_the_dispatch_indexes(
    dispatch_plans: Explainer, engine_kind: str, prefix: str, request: pytest.FixtureRequest
) -> None:
    """claim_next(prefix=...)'s candidates, the prefix a range on session_id (most of
    the sessions, a tenth of them, one long session), also come out of the two
    dispatch indexes (session_id checked on their entries): on PostgreSQL a range on
    session_id, on SQLite a test of its first characters."""
    lower, upper, params = _bounds(prefix)
    plan = dispatch_plans.explain(
        candidates(backend_of(dispatch_plans.engine), lower, upper, False), params
    )
    _assert_reads_only_the_dispatch_indexes(plan)


@pytest.mark.parametrize("prefix", ("", *DISPATCH_PREFIXES))
def test_claim_next_idle_retry_at_reads_only_a_partial_dispatchable_index(
    dispatch_plans: Explainer, prefix: str
) -> None:
    """An idle claim_next's retry_at (the earliest claim, delay, run or wait ending
    under the prefix) reads a partial index of dispatchable events from now on, never
    a2_events whole nor its key: on SQLite a2_events_dispatch_due in its order; on
    PostgreSQL whichever the statistics make cheaper (with few claims running, the
    claim expiry index; test_claim_next_candidates_never_read_scheduled_or_waiting_events
    counts what it reads past many scheduled and waiting events)."""
    lower, upper, params = _bounds(prefix)
    plan = dispatch_plans.explain(next_free(lower, upper), params)
    partial = {DISPATCH_DUE, CLAIM_EXPIRY, DISPATCH_READY}
    assert plan.accesses and plan.indexes() <= partial, _why(plan)
    if not dispatch_plans.postgres:
        assert plan.indexes() == {DISPATCH_DUE} and not plan.sorts, _why(plan)


def test_waiting_and_scheduled_seek_the_sessions_unprocessed_events(plans: Explainer) -> None:
    """inspect.list_waiting_and_scheduled (SPEC §7) reads the session's unprocessed events
    (a2_events_unprocessed), not all its events nor the table. (PostgreSQL may gather
    them in a bitmap and sort the few that match: the cost is the same.)"""
    params = {"sid": LONG, "after": 0, "limit": 51, "now": NOW}
    plan = plans.explain(WAITING_OR_SCHEDULED, params)
    assert plan.seeks(UNPROCESSED) and plan.indexes() == {UNPROCESSED}, _why(plan)
