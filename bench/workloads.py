"""The single-process workloads: append, cycle, batch and scale (a2sql and baseline interleaved).

Each workload function returns one JSON-able object: ``workload``, ``engine``,
parameters, ``seconds`` (wall time) and ``cases``, each case comparing a2sql
with the baseline (see ``measure.compare``). A wrong answer from either
implementation (e.g. a claim that does not return the one event just
appended) raises ``WrongResult``: the figures of a wrong store mean nothing.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import databases
from bench.impl import Impl, open_impls
from bench.measure import Stopwatch, compare, interleaved

BATCH = 100
MANY_SESSIONS = 1000
CHILD_TYPE = "bench.child"


class WrongResult(AssertionError):
    """An implementation answered something a2sql's contract does not allow."""


@dataclass(frozen=True)
class Params:
    """What the command line asked for (``None``: the workload's default for the engine)."""

    engine: str
    ops: int | None = None
    rounds: int | None = None
    large: int = 1_000_000
    skew_ms: float | None = None  # contention: a2sql's clocks apart (bench/skew.py)


def payload(i: int) -> dict[str, Any]:
    return {"kind": "message", "text": "hello from the benchmark", "n": i}


def check(condition: bool, what: str) -> None:
    if not condition:
        raise WrongResult(what)


def default(value: int | None, *, sqlite: int, postgres: int, engine: str) -> int:
    if value is not None:
        return value
    return sqlite if engine == "sqlite" else postgres


# --- operations -----------------------------------------------------------------------


def cycle_op(impl: Impl, session_id: str) -> Callable[[int], None]:
    """The worker's loop per event: append 1, claim it, complete it returning 1 child.

    The child is appended settled (processed), so every cycle does the same
    work: the next claim finds exactly the next appended event.
    """

    def op(i: int) -> None:
        last = impl.append(session_id, [payload(i)])
        claimed = impl.claim(session_id)
        check(
            len(claimed) == 1 and claimed[0][0] == last,
            f"{impl.name}: claim after appending index {last} gave {claimed}",
        )
        index, attempt = claimed[0]
        child = (f"{session_id}#{index}", CHILD_TYPE, {"ok": True, "n": i}, True)
        check(
            impl.complete(session_id, index, attempt, [child]),
            f"{impl.name}: complete_attempt({index}, {attempt}) was superseded",
        )

    return op


def _append_and_claim_batch(impl: Impl, session_id: str, i: int) -> list[tuple[int, int]]:
    """Append 100 events in one call and claim them all: the (index, attempt) claimed."""
    last = impl.append(session_id, [payload(i * BATCH + k) for k in range(BATCH)])
    claimed = impl.claim(session_id)
    check(
        [index for index, _ in claimed] == list(range(last - BATCH + 1, last + 1)),
        f"{impl.name}: claim after a batch ending at {last} gave {len(claimed)} events",
    )
    return claimed


def batch_op(impl: Impl, session_id: str) -> Callable[[int], None]:
    """Append 100 events in one call, claim them all, complete each (no children)."""

    def op(i: int) -> None:
        for index, attempt in _append_and_claim_batch(impl, session_id, i):
            check(
                impl.complete(session_id, index, attempt, ()),
                f"{impl.name}: complete_attempt({index}, {attempt}) was superseded",
            )

    return op


def batch_one_call_op(impl: Impl, session_id: str) -> Callable[[int], None]:
    """Append 100 events in one call, claim them all, complete them in one call."""

    def op(i: int) -> None:
        claimed = _append_and_claim_batch(impl, session_id, i)
        done = impl.complete_many(session_id, claimed)
        check(done == BATCH, f"{impl.name}: complete_attempts completed {done} of {BATCH}")

    return op


def append_one_op(impl: Impl, session_id: str) -> Callable[[int], None]:
    def op(i: int) -> None:
        impl.append(session_id, [payload(i)])

    return op


def append_many_op(impl: Impl, prefix: str) -> Callable[[int], None]:
    sessions = [f"{prefix}{n:04d}" for n in range(MANY_SESSIONS)]

    def op(i: int) -> None:
        impl.append(sessions[i % MANY_SESSIONS], [payload(i)])

    return op


# --- workloads --------------------------------------------------------------------------


class Run:
    """A fresh database and both implementations on it, for one workload."""

    def __init__(self, engine: str, *, floor: bool = False) -> None:
        self.target = databases.prepare(engine)
        self.impls = open_impls(engine, self.target.a2sql_url, self.target.driver_dsn, floor=floor)

    def close(self) -> None:
        for impl in self.impls:
            impl.close()
        if self.target.folder is not None:
            shutil.rmtree(self.target.folder, ignore_errors=True)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _result(
    name: str, p: Params, ops: int, rounds: int, watch: Stopwatch, cases: list[Any]
) -> dict[str, Any]:
    return {
        "workload": name,
        "engine": p.engine,
        "ops": ops,
        "rounds": rounds,
        "seconds": watch.seconds(),
        "cases": cases,
    }


MakeOp = Callable[[Impl], Callable[[int], None]]


def _against_the_floor(
    p: Params, name: str, ops: int, cases: list[tuple[str, MakeOp]]
) -> dict[str, Any]:
    """Each case's operation run by a2sql, the baseline and, on PostgreSQL, the
    one-round-trip-per-transaction floor, interleaved, on one database."""
    rounds = p.rounds or 5
    watch = Stopwatch()
    compared = []
    with Run(p.engine, floor=p.engine == "postgres") as run:
        for case, make in cases:
            a2, base, *floor = interleaved(
                run.impls, make, ops=ops, rounds=rounds, warmup=max(ops // 10, 10)
            )
            compared.append(compare(case, a2, base, floor=floor[0] if floor else None))
    return _result(name, p, ops, rounds, watch, compared)


def append(p: Params) -> dict[str, Any]:
    """One event per call into one session; and one per call round-robin over 1000 sessions."""
    return _against_the_floor(
        p,
        "append",
        default(p.ops, sqlite=2000, postgres=400, engine=p.engine),
        [
            ("one_session", lambda impl: append_one_op(impl, f"{impl.name}/append")),
            ("many_sessions", lambda impl: append_many_op(impl, f"{impl.name}/many/")),
        ],
    )


def cycle(p: Params) -> dict[str, Any]:
    """append 1, claim_available, complete_attempt returning 1 child; one session."""
    return _against_the_floor(
        p,
        "cycle",
        default(p.ops, sqlite=2000, postgres=200, engine=p.engine),
        [("cycle", lambda impl: cycle_op(impl, f"{impl.name}/cycle"))],
    )


def idle_op(impl: Impl, session_id: str, *, busy: bool) -> Callable[[int], None]:
    """A claim that finds nothing free, as a worker's poll of an idle session: the session
    holds one event, completed (settled) or claimed for TTL_MS by an earlier claim (busy)."""
    last = impl.append(session_id, [payload(0)])
    [(index, attempt)] = impl.claim(session_id)
    check(index == last, f"{impl.name}: the idle session's claim took {index}, not {last}")
    if not busy:
        check(impl.complete(session_id, index, attempt, []), f"{impl.name}: not completed")

    def op(i: int) -> None:
        claimed = impl.claim(session_id)
        check(claimed == [], f"{impl.name}: a claim on an idle session took {claimed}")

    return op


def idle(p: Params) -> dict[str, Any]:
    """claim_available on a session with nothing free: all settled, or the one event busy."""
    return _against_the_floor(
        p,
        "idle",
        default(p.ops, sqlite=2000, postgres=400, engine=p.engine),
        [
            ("settled", lambda impl: idle_op(impl, f"{impl.name}/idle/settled", busy=False)),
            ("busy", lambda impl: idle_op(impl, f"{impl.name}/idle/busy", busy=True)),
        ],
    )


def _on_own_session(
    make_op: Callable[[Impl, str], Callable[[int], None]], case: str
) -> Callable[[Impl], Callable[[int], None]]:
    """``make_op`` for each implementation, on a session named after it and the case."""
    return lambda impl: make_op(impl, f"{impl.name}/{case}")


def batch(p: Params) -> dict[str, Any]:
    """append 100 per call, claim them, complete them (each in its own call, then all in
    one ``complete_attempts``): ops are batches, items are events."""
    ops = default(p.ops, sqlite=40, postgres=4, engine=p.engine)
    rounds = p.rounds or 5
    watch = Stopwatch()
    cases = []
    with Run(p.engine) as run:
        for case, make_op in (
            ("batch", batch_op),
            ("batch, one completion call", batch_one_call_op),
        ):
            a2, base = interleaved(
                run.impls,
                _on_own_session(make_op, case),
                ops=ops,
                rounds=rounds,
                warmup=1,
            )
            cases.append(compare(case, a2, base, items_per_op=BATCH, unit="batch of 100 events"))
    return _result("batch", p, ops, rounds, watch, cases)


# --- scale ------------------------------------------------------------------------------

SCALE_SESSIONS = 10_000
LISTED = ("l/", 60, 10)  # prefix, sessions, events each
PROBE = "p/00000"
PROBE_EVENTS = 200
SNAPSHOT_AT = 100
REDUCER = "counter"
PAGE = 100
LIST_PAGE = 50
SCALE_CASES = (
    "cycle",
    "read_state",
    "list_sessions_prefix",
    "list_sessions_first_page",
    "read_events",
)


def _load_scale(run: Run, total: int) -> dict[str, Any]:
    """Filler events over 10k sessions, plus the fixed sessions the reads look at."""
    watch = Stopwatch()
    engine = run.target.engine
    databases.truncate(run.target)
    per_session = max(1, total // SCALE_SESSIONS)
    with databases.connect(run.target) as conn:
        loaded = databases.load_events(
            conn, engine, prefix="s/", sessions=SCALE_SESSIONS, per_session=per_session
        )
        prefix, sessions, each = LISTED
        loaded += databases.load_events(
            conn, engine, prefix=prefix, sessions=sessions, per_session=each
        )
        loaded += databases.load_events(
            conn, engine, prefix=PROBE[:-5], sessions=1, per_session=PROBE_EVENTS
        )
        databases.load_snapshot(conn, engine, PROBE, REDUCER, SNAPSHOT_AT)
        conn.commit()
        databases.analyze(conn, engine)
        conn.commit()
    return {"events": loaded, "load_seconds": watch.seconds()}


def _scale_ops(impl: Impl) -> dict[str, Callable[[int], None]]:
    def read_state(_i: int) -> None:
        n = impl.read_state(PROBE, REDUCER)
        check(n == PROBE_EVENTS - SNAPSHOT_AT, f"{impl.name}: read_state gave {n} events")

    def list_prefix(_i: int) -> None:
        n = impl.list_sessions(LISTED[0], LIST_PAGE)
        check(n == LIST_PAGE, f"{impl.name}: list_sessions(prefix) gave {n} sessions")

    def list_all(_i: int) -> None:
        n = impl.list_sessions("", LIST_PAGE)
        check(n == LIST_PAGE, f"{impl.name}: list_sessions() gave {n} sessions")

    def read_events(_i: int) -> None:
        n = impl.read_events(PROBE, SNAPSHOT_AT // 2, PAGE)
        check(n == PAGE, f"{impl.name}: read_events gave {n} events")

    return {
        "cycle": cycle_op(impl, f"x/{impl.name}/cycle"),  # sorts after the listed sessions
        "read_state": read_state,
        "list_sessions_prefix": list_prefix,
        "list_sessions_first_page": list_all,
        "read_events": read_events,
    }


def scale(p: Params) -> dict[str, Any]:
    """The cycle and the reads with 10k, then with ``large`` (1M) events already stored."""
    ops = default(p.ops, sqlite=500, postgres=100, engine=p.engine)
    # Reads are quicker than cycles: more of them per round for a steady figure.
    read_ops = default(p.ops, sqlite=1000, postgres=300, engine=p.engine)
    rounds = p.rounds or 3
    watch = Stopwatch()
    cases: list[dict[str, Any]] = []
    sizes: dict[str, Any] = {}
    with Run(p.engine) as run:
        for size, total in (("small", 10_000), ("large", p.large)):
            sizes[size] = _load_scale(run, total)
            for case in SCALE_CASES:

                def make(impl: Impl, case: str = case) -> Callable[[int], None]:
                    return _scale_ops(impl)[case]

                n = ops if case == "cycle" else read_ops
                a2, base = interleaved(
                    run.impls, make, ops=n, rounds=rounds, warmup=max(n // 10, 10)
                )
                cases.append(compare(f"{case}@{size}", a2, base, size=size))
    by_name = {c["case"]: c for c in cases}
    growth = []
    for case in SCALE_CASES:
        small, large = by_name[f"{case}@small"], by_name[f"{case}@large"]
        growth.append(
            {
                "case": case,
                **{
                    impl: round(large[impl]["ops_per_s"] / small[impl]["ops_per_s"], 3)
                    for impl in ("a2sql", "baseline")
                },
            }
        )
    result = _result("scale", p, ops, rounds, watch, cases)
    result["notes"] = [f"ops = {ops} per round for the cycle, {read_ops} for each read"]
    result["sizes"] = sizes
    result["large_over_small"] = growth
    return result
