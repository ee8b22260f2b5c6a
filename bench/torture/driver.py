"""The workers scenario: feed sessions, run worker processes, inject faults, drain, check."""

from __future__ import annotations

import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import make_url

import a2sql
from a2sql import JSON, NewEvent, Store
from bench.skew import offset_ms
from bench.torture.checks import RunFacts, WorkerRunCheck, all_sessions
from bench.torture.common import (
    GaveUp,
    JsonLog,
    Report,
    Target,
    now_ms,
    read_logs,
    retrying,
    rng_for,
    unavailable_anomalies,
)
from bench.torture.faults import BackendKiller, ProcessPool
from bench.torture.workers import WorkerSettings, worker_main

# Texts the feeder puts in payloads: quoting and LIKE metacharacters, NUL, non-ASCII.
AWKWARD_TEXTS = ("plain", "it's", 'say "hi"', "100%", "a_b", "back\\slash", "nul\x00inside", "é😀")
LANES = (None, None, "L0", "L1", "L2")
DOOMED_LANE = "dl"
DOOMED_SHARE = 0.04


@dataclass(frozen=True)
class WorkersConfig:
    """One workers run. ``duration`` is how long new work is fed; the run then drains.

    ``restart_server``: restarts the PostgreSQL server once, mid-run, and returns the
    seconds it took; the server must be the run's own (``private_postgres``), never
    one that other programs use.
    """

    target: Target
    workers: int
    duration: float
    seed: int
    kill_every: float | None = None
    terminate_every: float | None = None
    restart_server: Callable[[], float] | None = None
    ttl_ms: int = 200
    max_failures: int = 3
    max_gen: int = 2
    sessions: int | None = None
    backlog: int | None = None
    drain_timeout: float = 60.0
    # Feed past ``duration`` (up to three times as long) until this many events are
    # processed: a loaded machine gets the same amount of work done, later.
    min_processed: int = 0
    log_dir: str | None = None
    api: str = "sync"  # "async": the workers' calls go through AsyncStore
    # Worker n's store clock: the system's (n even) or skew_ms behind (n odd), by
    # bench/skew.py's rule; n counts spawns, respawns included. The feeder keeps
    # the system clock.
    skew_ms: float | None = None


class Feeder:
    """Appends batches (with and without lanes) to the run's sessions, keeping a backlog."""

    def __init__(self, store: Store, log: JsonLog, prefix: str, config: WorkersConfig) -> None:
        self.store = store
        self.log = log
        self.prefix = prefix
        self.rng = rng_for(config.seed, "feeder")
        count = config.sessions or 2 * config.workers
        self.session_ids = [f"{prefix}s{n:03d}" for n in range(count)]
        self.backlog = config.backlog or 4 * config.workers
        self.started: set[str] = set()
        self.batches = 0

    def pending(self) -> int:
        """Unprocessed events not yet dead-lettered, less those blocked forever."""
        summaries = retrying(lambda: all_sessions(self.store, self.prefix), log=self.log, op="list")
        blocked = 2 * len(self.started)
        return sum(s.pending_count for s in summaries.values()) - blocked

    def processed(self) -> int:
        """Events of the run processed so far (settled ones included)."""
        summaries = retrying(lambda: all_sessions(self.store, self.prefix), log=self.log, op="list")
        return sum(s.event_count - s.pending_count - s.failed_count for s in summaries.values())

    def feed(self) -> None:
        if self.pending() < self.backlog:
            self.append(self.rng.choice(self.session_ids))

    def batch_for(self, session_id: str) -> list[NewEvent]:
        number = self.batches
        self.batches += 1
        events: list[NewEvent] = []

        def add(lane: str | None, doom: bool) -> None:
            payload: dict[str, JSON] = {
                "gen": 0,
                "batch": number,
                "doom": doom,
                "text": self.rng.choice(AWKWARD_TEXTS),
                "n": self.rng.choice([0, -1, 2**53, 1.5, -0.0, True, None]),
            }
            events.append(
                NewEvent("seed", payload, id=f"{session_id}-b{number}-{len(events)}", lane=lane)
            )

        if session_id not in self.started:
            # A lane whose head always fails: dead-lettered, it blocks its followers.
            self.started.add(session_id)
            add(DOOMED_LANE, True)
            add(DOOMED_LANE, False)
            add(DOOMED_LANE, False)
        for _ in range(self.rng.randint(1, 5)):
            lane = self.rng.choice(LANES)
            add(lane, lane is None and self.rng.random() < DOOMED_SHARE)
        return events

    def append(self, session_id: str) -> None:
        events = self.batch_for(session_id)
        tries = 0

        def call() -> a2sql.AppendResult:
            nonlocal tries
            tries += 1
            return self.store.append(session_id, events)

        result = retrying(call, log=self.log, op="append")
        ids = [e.id for e in result.events]
        if ids != [e.id for e in events]:
            self.log.anomaly("append returned other events", s=session_id, got=ids)
        self.log.write(
            "batch", s=session_id, ids=ids, idx=[e.index for e in result.events], tries=tries
        )


def _faults_injected(config: WorkersConfig) -> bool:
    return bool(config.kill_every or config.terminate_every or config.restart_server)


def run_workers(config: WorkersConfig) -> Report:
    """Run the scenario and check it; the report's anomalies must be empty."""
    started = time.monotonic()
    target = config.target
    report = Report("workers", target.engine, config.seed)
    log_dir = config.log_dir or tempfile.mkdtemp(prefix="a2-torture-logs-")
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    report.log_dir = log_dir
    prefix = f"t{config.seed}-{now_ms() % 100000:05d}-"
    report.prefix = prefix
    app_prefix = f"torture-{prefix}"
    stop_path = str(Path(log_dir) / "STOP")
    log = JsonLog(Path(log_dir) / "driver.jsonl", "driver")
    log.write("config", config=repr(config), prefix=prefix)
    print(f"[torture workers] seed={config.seed} engine={target.engine} logs={log_dir}", flush=True)

    with a2sql.create_store(target.url, migrate=True):
        pass  # the schema exists before any worker opens the database
    store = a2sql.create_store(target.url_for(f"{app_prefix}driver"), migrate=False)

    def settings(name: str) -> tuple[WorkerSettings]:
        return (
            WorkerSettings(
                url=target.url_for(f"{app_prefix}{name}"),
                holder=name,
                prefix=prefix,
                seed=config.seed,
                ttl_ms=config.ttl_ms,
                max_failures=config.max_failures,
                max_gen=config.max_gen,
                log_path=str(Path(log_dir) / f"{name}.jsonl"),
                stop_path=stop_path,
                api=config.api,
                clock_offset_ms=offset_ms(int(name.lstrip("w")), config.skew_ms),
            ),
        )

    pool = ProcessPool(worker_main, settings, size=config.workers)
    feeder = Feeder(store, log, prefix, config)
    faults = _Faults(config, target, app_prefix, log, report)
    try:
        _respawn(pool, log, report)
        _feed_and_torture(config, pool, feeder, faults, log, report)
        _drain(config, pool, feeder, log, report)
    except (GaveUp, Aborted) as error:
        report.anomalies.append(f"driver stopped: {error}")
    finally:
        Path(stop_path).touch()
        stuck = pool.join_all(timeout=30)
        report.anomalies += [f"{name} did not stop within 30 s" for name in stuck]
        faults.close()

    records, problems = read_logs(log_dir)
    report.anomalies += problems
    facts = RunFacts(
        prefix=prefix,
        max_failures=config.max_failures,
        max_gen=config.max_gen,
        exact_counts=not _faults_injected(config),
        clock_skew_ms=config.skew_ms or 0.0,
    )
    try:
        retrying(lambda: WorkerRunCheck(store, facts, records, report).run(), log=log, op="check")
    finally:
        store.close()
    seen, bad = unavailable_anomalies(
        records, engine=target.engine, faults_injected=_faults_injected(config)
    )
    report.add("unavailable_errors", seen)
    report.anomalies += bad
    _check_recovery(records, faults.restarted_at, pool, report)
    if target.engine == "sqlite":
        problems = sqlite_file_problems(target.url)
        report.anomalies += problems
        report.add("sqlite_integrity_checked", 1 if not problems else 0)
    report.seconds = time.monotonic() - started
    log.close()
    return report


class _Faults:
    """Kills, backend terminations and the restart, each on its own schedule."""

    def __init__(
        self, config: WorkersConfig, target: Target, app_prefix: str, log: JsonLog, report: Report
    ) -> None:
        self.config = config
        self.log = log
        self.report = report
        self.rng = rng_for(config.seed, "faults")
        self.killer = (
            BackendKiller(target.url, app_prefix)
            if target.engine == "postgres" and (config.terminate_every or config.restart_server)
            else None
        )
        self.restart_due = config.duration / 2 if config.restart_server else None
        self.restarted_at: int | None = None
        self.next_kill = config.kill_every
        self.next_terminate = config.terminate_every

    def tick(self, elapsed: float, pool: ProcessPool) -> None:
        config = self.config
        if self.next_kill is not None and config.kill_every and elapsed >= self.next_kill:
            self.next_kill += config.kill_every * self.rng.uniform(0.5, 1.5)
            name = pool.kill_random(self.rng)
            if name is not None:
                self.log.write("kill", name=name)
                self.report.add("workers_killed")
        if (
            self.killer is not None
            and self.next_terminate is not None
            and config.terminate_every
            and elapsed >= self.next_terminate
        ):
            self.next_terminate += config.terminate_every * self.rng.uniform(0.5, 1.5)
            try:
                hit = self.killer.terminate_one(self.rng)
            except Exception as error:  # the server may be restarting: try again later
                self.log.write("terminate_failed", err=str(error)[:200])
                hit = None
            if hit is not None:
                self.log.write("terminate", **hit)
                self.report.add("backends_terminated")
                if hit["state"] != "idle":
                    self.report.add("terminated_mid_transaction")
        if (
            self.restart_due is not None
            and elapsed >= self.restart_due
            and config.restart_server is not None
        ):
            self.restart_due = None
            self.log.write("restart", phase="begin")
            seconds = config.restart_server()
            self.restarted_at = now_ms()
            self.log.write("restart", phase="end", seconds=seconds)
            self.report.add("restarts_survived")

    def close(self) -> None:
        if self.killer is not None:
            self.killer.close()


class Aborted(Exception):
    """The run cannot go on (worker processes keep dying by themselves)."""


def _respawn(pool: ProcessPool, log: JsonLog, report: Report) -> None:
    for name, code in pool.reap():
        report.anomalies.append(f"{name} exited by itself with code {code}")
        report.add("unexpected_exits")
        if report.figures["unexpected_exits"] > 2 * pool.size:
            raise Aborted("worker processes keep exiting by themselves; see their logs")
    while len(pool.alive) < pool.size:
        log.write("spawn", name=pool.spawn())


def _feed_and_torture(
    config: WorkersConfig,
    pool: ProcessPool,
    feeder: Feeder,
    faults: _Faults,
    log: JsonLog,
    report: Report,
) -> None:
    begin = time.monotonic()
    checked_at = 0.0
    while True:
        elapsed = time.monotonic() - begin
        if elapsed >= config.duration and elapsed - checked_at >= 0.5:
            checked_at = elapsed
            if not _more_wanted(config, feeder, elapsed):
                break
        feeder.feed()
        faults.tick(elapsed, pool)
        _respawn(pool, log, report)
        time.sleep(0.02)


def _more_wanted(config: WorkersConfig, feeder: Feeder, elapsed: float) -> bool:
    """Past ``duration``: whether to feed on, on a machine too loaded for the run to have
    processed ``min_processed`` events yet (up to three times as long)."""
    if config.min_processed <= 0 or elapsed >= 3 * config.duration:
        return False
    return feeder.processed() < config.min_processed


def _drain(
    config: WorkersConfig, pool: ProcessPool, feeder: Feeder, log: JsonLog, report: Report
) -> None:
    """Wait until nothing is left to do but the events blocked behind dead-lettered heads."""
    deadline = time.monotonic() + config.drain_timeout
    while True:
        _respawn(pool, log, report)
        left = feeder.pending()
        if left <= 0:
            return
        if time.monotonic() > deadline:
            report.anomalies.append(
                f"{left} events still pending {config.drain_timeout} s after feeding stopped"
            )
            return
        time.sleep(0.2)


def _check_recovery(
    records: list[dict[str, Any]], restarted_at: int | None, pool: ProcessPool, report: Report
) -> None:
    """Each worker that lived through the restart used its store again afterwards."""
    if restarted_at is None:
        return
    started = {r["src"] for r in records if r["k"] == "start" and r["t"] < restarted_at}
    survivors = started - pool.killed
    alive_after = {r["src"] for r in records if r["k"] == "alive" and r["t"] > restarted_at}
    for name in sorted(survivors - alive_after):
        report.anomalies.append(f"{name} never reached the database after the server restart")


def sqlite_file_problems(url: str) -> list[str]:
    """After every process is gone: the file passes integrity_check and its WAL checkpoints."""
    path = make_url(url).database
    assert path
    problems = []
    connection = sqlite3.connect(path, timeout=30)
    try:
        before = connection.execute("select count(*) from a2_events").fetchone()[0]
        check = connection.execute("pragma integrity_check").fetchall()
        if check != [("ok",)]:
            problems.append(f"sqlite integrity_check: {check[:5]}")
        busy, _, _ = connection.execute("pragma wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            problems.append("sqlite WAL checkpoint was blocked after every process ended")
        after = connection.execute("select count(*) from a2_events").fetchone()[0]
        if after != before:
            problems.append(f"events before/after the WAL checkpoint: {before}/{after}")
    finally:
        connection.close()
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size:
        problems.append(
            f"the WAL still holds {wal.stat().st_size} bytes after a TRUNCATE checkpoint"
        )
    return problems
