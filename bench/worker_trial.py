"""The agent runtime trial: `a2sql worker` pools whose handlers wait on a model call.

    python -m bench.worker_trial [--engine sqlite|postgres] [--events 400]
        [--per-session 1] [--rounds 3] [--processes 4]
        [--modes plain,outcome,transactional] [--kill outcome]
        [--concurrency-events 40] [--json]

A handler module is written to a temporary folder (``APP``) with three
handlers of one shape: sleep as a model call would wait, uniform in 50-200 ms
(drawn from a generator seeded with the event's id, so that every mode sleeps
the same total), then reply with one event (``settled``: a record, not work):

- ``plain``: returns ``[reply]``, no writes of its own: the reference;
- ``outcome``: returns ``Outcome(events=[reply], write=fn)``, where ``fn``
  inserts one row into the app's table ``usage`` (session_id, idx, tokens) in
  the completion's transaction;
- ``transactional``: run with ``--transactional``: the whole handler runs in
  the completion's transaction and inserts the row through
  ``attempt.connection`` (on SQLite the transaction holds the write lock
  through the sleep).

``usage`` has no unique constraint: a duplicate must show in the check, not
be refused by the database.

Each round runs every mode once, the order rotated from round to round, each
on a fresh database (SQLite: a new file; PostgreSQL: a2sql's tables truncated
and ``usage`` made again): ``--events`` events appended (``--per-session`` to a
session, in one lane: a conversation's messages, handled in order), then
``a2sql worker app:MODE --processes N --until-idle --poll-interval 0.05`` run
as a child process until it exits. Timed: the wall time from its start to its
exit (start-up and teardown included), and from the database the span from the
first claim to the last completion (``first_claimed_at`` to ``processed_at``).
Reported: events/s of both per mode (median of rounds), and per round the
ratios outcome/plain and transactional/plain, with their medians.

Checked from the database after every run, not from the workers' word: every
event processed, none failed or still claimed; one reply per event (each
event's ``returned_event_ids`` name exactly the replies); for ``outcome`` and
``transactional``, exactly one ``usage`` row per event and none other; in each
lane, events completed (and ``usage`` rows inserted) in index order. A wrong
answer raises ``WrongResult``.

``--kill MODES`` (default ``outcome``; ``none`` for none): one more run of each
of these modes, untimed for the ratios, with ``--ttl-ms 2000``: once a quarter
of the events are processed and pool child 1 holds a claim, that child is
SIGKILLed; the pool restarts it and its claims are taken over when their lease
ends. The same checks follow; reported: the run's figures and how many events
were completed by a later attempt.

``--concurrency-events N`` (default 40; 0 skips): one process,
``--concurrency 8``, handlers (``outcome``) sleeping exactly 200 ms, N events in
N sessions, ``--rounds`` times: seconds from the first claim to the last
completion (the process's start-up excluded) and the wall time.

PostgreSQL: ``A2SQL_BENCH_POSTGRES_URL`` or
``postgresql://postgres@127.0.0.1/a2sql_bench`` (bench.databases).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from sqlalchemy import Engine, func, select

import a2sql
from a2sql import NewEvent
from a2sql.sql.schema import events as events_table
from bench import databases
from bench.workloads import check

MODES = ("plain", "outcome", "transactional")
SLEEP_S = (0.05, 0.2)
PREFIX = "trial/"
LANE = "conversation"
POLL_INTERVAL_S = 0.05
KILL_TTL_MS = 2000
CONCURRENCY = 8
CONCURRENCY_SLEEP_S = 0.2
# No run may hang: a pool still running after this is killed and the run fails.
RUN_TIMEOUT_S = 900.0

# The handlers' module, as an application would write it. SLEEP_S is prepended.
APP = textwrap.dedent(
    '''
    """The trial's handlers: a model call (a sleep), then one reply; the app's usage row."""

    import random
    import time

    from sqlalchemy import Column, Integer, MetaData, String, Table, insert

    from a2sql import NewEvent
    from a2sql.worker import Outcome

    meta = MetaData()
    # No unique constraint: a row written twice must show, not be refused.
    usage = Table(
        "usage",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("session_id", String(255), nullable=False),
        Column("idx", Integer, nullable=False),
        Column("tokens", Integer, nullable=False),
    )


    def model_call(attempt):
        """Wait as a model call would: the same draw for an event in every mode."""
        draw = random.Random(attempt.event.id)
        time.sleep(draw.uniform(*SLEEP_S))
        tokens = draw.randint(50, 500)
        return NewEvent("reply", {"tokens": tokens}, settled=True), tokens


    def usage_row(attempt, tokens):
        return insert(usage).values(
            session_id=attempt.session_id, idx=attempt.event.index, tokens=tokens
        )


    def plain(attempt):
        reply, _ = model_call(attempt)
        return [reply]


    def outcome(attempt):
        reply, tokens = model_call(attempt)

        def write(connection):
            connection.execute(usage_row(attempt, tokens))

        return Outcome(events=[reply], write=write)


    def transactional(attempt):
        reply, tokens = model_call(attempt)
        attempt.connection.execute(usage_row(attempt, tokens))
        return [reply]
    '''
)


def write_app(folder: Path, sleep_s: tuple[float, float] = SLEEP_S, module: str = "app") -> Path:
    """The handlers' module ``module``.py in ``folder``, its model calls sleeping
    uniformly within ``sleep_s`` seconds."""
    path = folder / f"{module}.py"
    path.write_text(f"SLEEP_S = {sleep_s!r}\n{APP}")
    return path


def load_app(path: Path) -> ModuleType:
    """The handlers' module at ``path``, imported here too (for its ``usage`` table)."""
    spec = importlib.util.spec_from_file_location(f"a2sql_trial_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def append_trial(store: a2sql.Store, sessions: int, per_session: int) -> list[tuple[str, int]]:
    """``per_session`` messages in one lane in each of ``sessions`` sessions; their keys."""
    keys = []
    for s in range(sessions):
        session_id = f"{PREFIX}{s:05d}"
        store.append(
            session_id,
            [
                NewEvent("message", {"text": f"message {i}"}, id=f"{session_id}/{i}", lane=LANE)
                for i in range(per_session)
            ],
        )
        keys += [(session_id, i + 1) for i in range(per_session)]
    return keys


# --- running a pool -------------------------------------------------------------------


def start_worker(
    app_dir: Path, url: str, handler: str, options: list[str], log: Path
) -> subprocess.Popen[bytes]:
    """``a2sql worker app:HANDLER`` in ``app_dir``, in a process group of its own, its
    output to ``log``; it runs the a2sql this process imported."""
    here = str(Path(a2sql.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "a2sql.cli", "worker", handler, "--url", url, *options]
    with log.open("wb") as output:
        return subprocess.Popen(
            command,
            cwd=app_dir,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Kill what is left of a pool (its children share its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def started_children(log: Path) -> dict[int, int]:
    """The pool's children by number, as its log has started them: the latest pid of each."""
    found = re.findall(r"child (\d+) started: pid (\d+)", log.read_text())
    return {int(number): int(pid) for number, pid in found}


def processed_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(
                select(func.count())
                .select_from(events_table)
                .where(events_table.c.event_type == "message")
                .where(events_table.c.processed_at.is_not(None))
            ).scalar_one()
        )


def claims_of(engine: Engine, pid: int) -> dict[tuple[str, int], int]:
    """The unprocessed events the worker of process ``pid`` holds a claim on (a holder
    names its pid), with the attempt each claim is."""
    e = events_table
    with engine.connect() as connection:
        rows = connection.execute(
            select(e.c.session_id, e.c.idx, e.c.attempt_count)
            .where(e.c.claim_holder.like(f"%:{pid}:%"))
            .where(e.c.processed_at.is_(None))
        ).all()
    return {(row.session_id, row.idx): row.attempt_count for row in rows}


def kill_holding_a_claim(pid: int, engine: Engine) -> dict[tuple[str, int], int] | None:
    """SIGKILL process ``pid`` if it holds a claim, and return its claims then; None (and
    the process left running) if it holds none. It is stopped (SIGSTOP) while its claims
    are read, so that none is completed between the look and the kill."""
    os.kill(pid, signal.SIGSTOP)
    try:
        held = claims_of(engine, pid)
    except BaseException:
        os.kill(pid, signal.SIGCONT)
        raise
    if not held:
        os.kill(pid, signal.SIGCONT)
        return None
    os.kill(pid, signal.SIGKILL)
    return held


def kill_child_mid_run(
    process: subprocess.Popen[bytes], engine: Engine, log: Path, after: int
) -> tuple[int, dict[tuple[str, int], int]] | None:
    """Once ``after`` events are processed, SIGKILL pool child 1 while it holds a claim;
    its pid and the claims it held, or None if the pool ended first."""
    while process.poll() is None:
        children = started_children(log)
        if 1 in children and processed_count(engine) >= after:
            held = kill_holding_a_claim(children[1], engine)
            if held is not None:
                return children[1], held
        time.sleep(0.02)
    return None


# --- one run --------------------------------------------------------------------------


@dataclass
class Run:
    mode: str
    events: int
    wall_s: float
    span_s: float
    events_per_s: float  # events over span_s (first claim to last completion)
    wall_events_per_s: float  # events over wall_s (the command's start to its exit)
    taken_over: int  # events completed by a later attempt than their first
    outcomes: dict[str, int] = field(default_factory=dict)  # from the workers' log lines
    warnings: int = 0  # WARNING lines in the workers' log (renewals failed, retries, ...)
    killed_pid: int | None = None
    held_at_kill: int = 0  # claims the killed child held, each completed by a later attempt


def run_once(
    engine_kind: str,
    app_path: Path,
    mode: str,
    *,
    sessions: int,
    per_session: int,
    options: list[str],
    kill: bool = False,
) -> Run:
    """One fresh database, the trial's events, one `a2sql worker` run until idle; checked."""
    target = databases.prepare(engine_kind)
    app = load_app(app_path)
    try:
        with a2sql.create_store(target.a2sql_url) as store:
            app.meta.drop_all(store.engine)
            app.meta.create_all(store.engine)
            keys = append_trial(store, sessions, per_session)
            log = app_path.parent / f"{mode}.log"
            started = time.perf_counter()
            process = start_worker(
                app_path.parent,
                target.a2sql_url,
                f"{app_path.stem}:{mode}",
                [*options, *(["--transactional"] if mode == "transactional" else [])],
                log,
            )
            try:
                killed = (
                    kill_child_mid_run(process, store.engine, log, len(keys) // 4) if kill else None
                )
                code = process.wait(timeout=RUN_TIMEOUT_S)
                wall_s = time.perf_counter() - started
            finally:
                stop_group(process)
            output = log.read_text()
            check(code == 0, f"{mode}: the worker exited {code}: {output[-3000:]}")
            found = check_database(store.engine, app, keys, writes=mode != "plain")
            if kill:
                check(killed is not None, f"{mode}: the pool ended before a child was killed")
                assert killed is not None
                pid, held = killed
                check(
                    f"(pid {pid}) ended: signal SIGKILL" in output,
                    f"{mode}: the pool did not see child {pid} killed",
                )
                later = {key: found["attempts"][key] > attempt for key, attempt in held.items()}
                check(all(later.values()), f"{mode}: the killed child's claims {later}")
    finally:
        if target.folder is not None:
            shutil.rmtree(target.folder, ignore_errors=True)
    outcomes = Counter(re.findall(r"outcome=(\w+)", output))
    return Run(
        mode=mode,
        events=len(keys),
        wall_s=round(wall_s, 3),
        span_s=round(found["span_s"], 3),
        events_per_s=round(len(keys) / found["span_s"], 1),
        wall_events_per_s=round(len(keys) / wall_s, 1),
        taken_over=found["taken_over"],
        outcomes=dict(outcomes),
        warnings=output.count(" WARNING "),
        killed_pid=None if killed is None else killed[0],
        held_at_kill=0 if killed is None else len(killed[1]),
    )


def check_database(
    engine: Engine, app: ModuleType, keys: list[tuple[str, int]], *, writes: bool
) -> dict[str, Any]:
    """What the database says of the run (see the module's doc); raises ``WrongResult``.
    Returns the span from the first claim to the last completion, how many events a
    later attempt than their first completed, and the completing attempt of each."""
    e = events_table
    with engine.connect() as connection:
        handled = connection.execute(
            select(
                e.c.session_id,
                e.c.idx,
                e.c.lane,
                e.c.processed_at,
                e.c.processed_by_attempt,
                e.c.attempt_count,
                e.c.first_claimed_at,
                e.c.failed_at,
                e.c.failure_count,
                e.c.claim_holder,
                e.c.returned_event_ids,
            )
            .where(e.c.event_type == "message")
            .order_by(e.c.session_id, e.c.idx)
        ).all()
        replies = connection.execute(
            select(e.c.event_id).where(e.c.event_type == "reply")
        ).scalars()
        reply_ids = list(replies)
        usage = connection.execute(
            select(app.usage.c.id, app.usage.c.session_id, app.usage.c.idx).order_by(app.usage.c.id)
        ).all()
    check(
        [(r.session_id, r.idx) for r in handled] == sorted(keys),
        f"{len(handled)} events of the trial stored, {len(keys)} appended",
    )
    unfinished = [
        (r.session_id, r.idx)
        for r in handled
        if r.processed_at is None
        or r.processed_by_attempt is None
        or r.failed_at is not None
        or r.failure_count
        or r.claim_holder is not None
    ]
    check(not unfinished, f"not processed once without failure: {unfinished[:10]}")
    returned = [id_ for r in handled for id_ in json.loads(r.returned_event_ids)]
    check(
        len(returned) == len(handled) and sorted(returned) == sorted(reply_ids),
        f"{len(reply_ids)} replies for {len(handled)} events ({len(returned)} returned ids)",
    )
    rows = Counter((row.session_id, row.idx) for row in usage)
    if writes:
        wrong = {key: n for key, n in rows.items() if n != 1}
        missing = set(keys) - set(rows)
        extra = set(rows) - set(keys)
        check(
            not wrong and not missing and not extra,
            f"usage rows: {len(usage)} for {len(keys)} events; written more than once "
            f"{list(wrong.items())[:10]}, missing {sorted(missing)[:10]}, "
            f"not of an event {sorted(extra)[:10]}",
        )
    else:
        check(not usage, f"{len(usage)} usage rows written by a handler that writes none")
    # In a lane, one event after the other: completions and the app's rows in index order.
    lanes: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for r in handled:
        if r.lane is not None:
            lanes[(r.session_id, r.lane)].append(r)
    for (session_id, name), lane_events in lanes.items():
        done = [r.processed_at for r in lane_events]
        check(done == sorted(done), f"{session_id} lane {name}: completed out of index order")
    lane_of = {(r.session_id, r.idx): r.lane for r in handled}
    written: dict[tuple[str, str], list[int]] = defaultdict(list)
    for row in usage:  # in the order the rows were inserted
        lane = lane_of.get((row.session_id, row.idx))
        if lane is not None:
            written[(row.session_id, lane)].append(row.idx)
    for (session_id, name), indexes in written.items():
        check(indexes == sorted(indexes), f"{session_id} lane {name}: usage rows {indexes}")
    first = min(r.first_claimed_at for r in handled)
    last = max(r.processed_at for r in handled)
    return {
        "span_s": (last - first).total_seconds(),
        "taken_over": sum(1 for r in handled if r.processed_by_attempt > 1),
        "attempts": {(r.session_id, r.idx): r.processed_by_attempt for r in handled},
    }


# --- the benchmark --------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="a2sql-trial-"))
    try:
        return _measure(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _measure(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    app_path = write_app(folder)
    sessions = args.events // args.per_session
    pool = [
        "--processes",
        str(args.processes),
        "--until-idle",
        "--poll-interval",
        str(POLL_INTERVAL_S),
        "--prefix",
        PREFIX,
    ]
    modes: list[str] = args.modes
    rounds: list[dict[str, Run]] = []
    for r in range(args.rounds):
        turn = r % len(modes)
        this_round = {}
        for mode in modes[turn:] + modes[:turn]:
            this_round[mode] = run_once(
                args.engine,
                app_path,
                mode,
                sessions=sessions,
                per_session=args.per_session,
                options=pool,
            )
        rounds.append(this_round)
    result: dict[str, Any] = {
        "workload": "worker_trial",
        "engine": args.engine,
        "events": sessions * args.per_session,
        "per_session": args.per_session,
        "processes": args.processes,
        "sleep_s": list(SLEEP_S),
        "modes": {},
        "ratios": {},
    }
    for mode in modes:
        runs = [each[mode] for each in rounds]
        result["modes"][mode] = {
            "events_per_s": _median([run.events_per_s for run in runs]),
            "wall_events_per_s": _median([run.wall_events_per_s for run in runs]),
            "rounds": [asdict(run) for run in runs],
        }
    if "plain" in modes:
        for mode in modes:
            if mode == "plain":
                continue
            span = [each[mode].events_per_s / each["plain"].events_per_s for each in rounds]
            wall = [
                each[mode].wall_events_per_s / each["plain"].wall_events_per_s for each in rounds
            ]
            result["ratios"][f"{mode}/plain"] = {
                "median": _median(span),
                "rounds": [round(x, 3) for x in span],
                "wall_median": _median(wall),
                "wall_rounds": [round(x, 3) for x in wall],
            }
    kill_options = [*pool, "--ttl-ms", str(KILL_TTL_MS)]
    result["killed"] = [
        asdict(
            run_once(
                args.engine,
                app_path,
                mode,
                sessions=sessions,
                per_session=args.per_session,
                options=kill_options,
                kill=True,
            )
        )
        for mode in args.kill
    ]
    if args.concurrency_events:
        result["concurrency"] = _concurrency(args, folder)
    return result


def _concurrency(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    fixed = write_app(folder, (CONCURRENCY_SLEEP_S, CONCURRENCY_SLEEP_S), module="fixed")
    options = [
        "--concurrency",
        str(CONCURRENCY),
        "--until-idle",
        "--poll-interval",
        str(POLL_INTERVAL_S),
        "--prefix",
        PREFIX,
    ]
    runs = [
        run_once(
            args.engine,
            fixed,
            "outcome",
            sessions=args.concurrency_events,
            per_session=1,
            options=options,
        )
        for _ in range(args.rounds)
    ]
    return {
        "events": args.concurrency_events,
        "concurrency": CONCURRENCY,
        "sleep_s": CONCURRENCY_SLEEP_S,
        "span_s": _median([run.span_s for run in runs]),
        "wall_s": _median([run.wall_s for run in runs]),
        "rounds": [asdict(run) for run in runs],
    }


def _print(result: dict[str, Any]) -> None:
    print(
        f"\n{result['engine']}: {result['events']} events ({result['per_session']} per "
        f"session), --processes {result['processes']}, model call "
        f"{result['sleep_s'][0] * 1000:g}-{result['sleep_s'][1] * 1000:g} ms"
    )
    print(
        f"{'mode':<14} {'events/s':>9} {'wall ev/s':>10}"
        "   rounds (events/s, first claim to last completion)"
    )
    for mode, figures in result["modes"].items():
        each = " ".join(f"{run['events_per_s']:.1f}" for run in figures["rounds"])
        print(
            f"{mode:<14} {figures['events_per_s']:>9.1f} "
            f"{figures['wall_events_per_s']:>10.1f}   {each}{_unusual(figures['rounds'])}"
        )
    for name, ratio in result["ratios"].items():
        print(
            f"{name}: {ratio['median']:.2f} (rounds {ratio['rounds']}); "
            f"wall {ratio['wall_median']:.2f} (rounds {ratio['wall_rounds']})"
        )
    for run in result["killed"]:
        print(
            f"killed a child mid-run ({run['mode']}, --ttl-ms {KILL_TTL_MS}): "
            f"{run['events_per_s']:.1f} events/s, wall {run['wall_s']:.1f} s, "
            f"{run['held_at_kill']} claim(s) held at the kill, {run['taken_over']} event(s) "
            f"completed by a later attempt; exactly once: checked{_unusual([run])}"
        )
    if "concurrency" in result:
        c = result["concurrency"]
        spans = [run["span_s"] for run in c["rounds"]]
        walls = [run["wall_s"] for run in c["rounds"]]
        print(
            f"one process, --concurrency {c['concurrency']}, {c['events']} events of "
            f"{c['sleep_s'] * 1000:g} ms: {c['span_s']:.2f} s first claim to last "
            f"(rounds {spans}), wall {c['wall_s']:.2f} s (rounds {walls})"
        )


def _unusual(runs: list[dict[str, Any]]) -> str:
    """What the workers logged besides completions, over ``runs``: outcomes, warnings."""
    seen: Counter[str] = Counter()
    for run in runs:
        seen.update({k: v for k, v in run["outcomes"].items() if k != "completed"})
        seen["warnings"] += run["warnings"]
        seen["taken over"] += run["taken_over"]
    shown = ", ".join(f"{name} {n}" for name, n in seen.items() if n)
    return f"  ({shown})" if shown else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--events", type=int, default=400)
    parser.add_argument("--per-session", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--modes", type=_modes, default=list(MODES))
    parser.add_argument("--kill", type=_modes, default=["outcome"])
    parser.add_argument("--concurrency-events", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args)
    if args.json:
        print(json.dumps(result))
    else:
        _print(result)


def _modes(value: str) -> list[str]:
    if value == "none":
        return []
    chosen = value.split(",")
    unknown = set(chosen) - set(MODES)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown modes {sorted(unknown)}; known: {MODES}")
    return chosen


if __name__ == "__main__":
    main()
