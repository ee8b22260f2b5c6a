"""The appenders scenario: processes appending to one session at once, replaying lost replies.

Each appender appends batches of 1 to 4 events with ids of its own to one
shared session. Now and then the reply is "lost": the call committed, but the
appender acts as if it never saw the result and replays the batch later (after
other batches, its own and others'); the replay must return the stored events.
Between batches all appenders meet at a barrier and race to append the same
id to a session of their own: exactly one may win, the others get
PARTIAL_DUPLICATE_BATCH. Checks read the database and the appenders' logs.
"""

from __future__ import annotations

import random
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from threading import BrokenBarrierError
from typing import Any

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent, Store, StoredEvent
from bench.torture.checks import all_sessions
from bench.torture.common import (
    GaveUp,
    JsonLog,
    Report,
    Target,
    now_ms,
    open_store,
    read_logs,
    retrying,
    unavailable_anomalies,
)
from bench.torture.faults import SPAWN

LOST_REPLY_SHARE = 0.25
CONTEST_EVERY = 4


@dataclass(frozen=True)
class AppenderSettings:
    url: str
    name: str
    prefix: str
    seed: int
    batches: int
    log_path: str


@dataclass(frozen=True)
class AppendersConfig:
    target: Target
    appenders: int
    batches: int
    seed: int
    log_dir: str | None = None


def shared_session(prefix: str) -> str:
    return f"{prefix}shared"


def own_session(prefix: str, name: str) -> str:
    return f"{prefix}own-{name}"


def contested_id(prefix: str, round_number: int) -> str:
    return f"{prefix}contest-{round_number}"


def _fingerprint(events: list[StoredEvent]) -> list[list[Any]]:
    return [[e.id, e.index, e.type, e.payload, e.lane] for e in events]


class Appender:
    def __init__(self, settings: AppenderSettings, barrier: Barrier) -> None:
        self.s = settings
        self.barrier = barrier
        self.log = JsonLog(settings.log_path, settings.name)
        self.rng = random.Random(f"{settings.seed}/{settings.name}")
        self.store: Store = open_store(settings.url, self.log)
        self.session = shared_session(settings.prefix)
        # Batches whose reply was "lost": (batch name, events, what the first call returned).
        self.lost: list[tuple[str, list[NewEvent], list[list[Any]]]] = []

    def batch(self, number: int) -> list[NewEvent]:
        size = self.rng.randint(1, 4)
        lane = self.rng.choice([None, "L", f"L-{self.s.name}"])
        return [
            NewEvent(
                "append",
                {"by": self.s.name, "batch": number, "i": i, "q": "'%_\x00"},
                id=f"{self.s.name}-{number}-{i}",
                lane=lane,
            )
            for i in range(size)
        ]

    def append(self, events: list[NewEvent]) -> list[StoredEvent]:
        return retrying(
            lambda: self.store.append(self.session, events).events, log=self.log, op="append"
        )

    def run(self) -> None:
        for number in range(self.s.batches):
            if number % CONTEST_EVERY == 0:
                self.contest(number // CONTEST_EVERY)
            events = self.batch(number)
            name = f"{self.s.name}-{number}"
            self.log.write("intent", batch=name, ids=[e.id for e in events])
            stored = self.append(events)
            if [e.id for e in stored] != [e.id for e in events]:
                self.log.anomaly("append returned other events", batch=name)
            self.log.write(
                "stored", batch=name, ids=[e.id for e in stored], idx=[e.index for e in stored]
            )
            if self.rng.random() < LOST_REPLY_SHARE:
                self.lost.append((name, events, _fingerprint(stored)))
            if self.lost and self.rng.random() < 0.5:
                self.replay(self.lost.pop(self.rng.randrange(len(self.lost))))
        while self.lost:
            self.replay(self.lost.pop())
        self.store.close()

    def replay(self, lost: tuple[str, list[NewEvent], list[list[Any]]]) -> None:
        name, events, first = lost
        again = _fingerprint(self.append(events))
        self.log.write("replayed", batch=name, same=again == first)
        if again != first:
            self.log.anomaly("a replay returned other events", batch=name, first=first, again=again)

    def contest(self, round_number: int) -> None:
        """All appenders append the same id, each to its own session, at the same moment."""
        try:
            self.barrier.wait(timeout=60)
        except BrokenBarrierError:
            self.log.anomaly("the contest barrier broke", round=round_number)
            return
        event_id = contested_id(self.s.prefix, round_number)
        session = own_session(self.s.prefix, self.s.name)
        try:
            retrying(
                lambda: self.store.append(
                    session, [NewEvent("contest", round_number, id=event_id)]
                ),
                log=self.log,
                op="contest",
            )
            verdict = "won"
        except A2Error as error:
            if error.code != ErrorCode.PARTIAL_DUPLICATE_BATCH:
                self.log.anomaly("contest raised", round=round_number, err=str(error))
                return
            verdict = "lost"
        self.log.write("contest", round=round_number, r=verdict, s=session)


def appender_main(settings: AppenderSettings, barrier: Barrier) -> None:
    appender = None
    try:
        appender = Appender(settings, barrier)
        appender.run()
    except BaseException as error:
        log = appender.log if appender else JsonLog(settings.log_path, settings.name)
        log.anomaly(
            "appender crashed", err=f"{type(error).__name__}: {error}", tb=traceback.format_exc()
        )
        barrier.abort()
        raise


def run_appenders(config: AppendersConfig) -> Report:
    """Run the appenders against ``config.target`` and check the result."""
    started = time.monotonic()
    target = config.target
    report = Report("appenders", target.engine, config.seed)
    log_dir = config.log_dir or tempfile.mkdtemp(prefix="a2-torture-logs-")
    report.log_dir = log_dir
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    prefix = f"a{config.seed}-{now_ms() % 100000:05d}-"
    print(
        f"[torture appenders] seed={config.seed} engine={target.engine} logs={log_dir}", flush=True
    )
    with a2sql.create_store(target.url, migrate=True):
        pass
    barrier = SPAWN.Barrier(config.appenders)
    processes = []
    for n in range(config.appenders):
        name = f"p{n}"
        settings = AppenderSettings(
            url=target.url_for(f"torture-{prefix}{name}"),
            name=name,
            prefix=prefix,
            seed=config.seed,
            batches=config.batches,
            log_path=str(Path(log_dir) / f"{name}.jsonl"),
        )
        process = SPAWN.Process(target=appender_main, args=(settings, barrier), name=name)
        process.start()
        processes.append(process)
    for process in processes:
        process.join(timeout=300)
        if process.is_alive():
            process.kill()
            process.join()
            report.anomalies.append(f"{process.name} did not finish")
        elif process.exitcode != 0:
            report.anomalies.append(f"{process.name} exited with code {process.exitcode}")
    records, problems = read_logs(log_dir)
    report.anomalies += problems
    log = JsonLog(Path(log_dir) / "driver.jsonl", "driver")
    try:
        with a2sql.create_store(target.url, migrate=False) as store:
            retrying(lambda: check_appenders(store, prefix, records, report), log=log, op="check")
    except GaveUp as error:
        report.anomalies.append(f"the check gave up: {error}")
    seen, bad = unavailable_anomalies(records, engine=target.engine, faults_injected=False)
    report.add("unavailable_errors", seen)
    report.anomalies += bad
    report.seconds = time.monotonic() - started
    return report


def check_appenders(
    store: Store, prefix: str, records: list[dict[str, Any]], report: Report
) -> None:
    """No index taken twice, no gap, every batch stored exactly once, contests won once."""
    bad = report.anomalies.append
    for r in records:
        if r["k"] == "anomaly":
            details = {k: v for k, v in r.items() if k not in ("k", "src", "t", "what")}
            bad(f"{r['src']}: {r['what']} {details}")
    events = store.read(shared_session(prefix))
    if [e.index for e in events] != list(range(1, len(events) + 1)):
        bad("shared session: indexes are not gapless 1..n")
    at_index = {e.index: e for e in events}
    ids = Counter(e.id for e in events)
    bad_ids = [i for i, n in ids.items() if n > 1]
    if bad_ids:
        bad(f"shared session: ids stored more than once: {bad_ids[:10]}")
    intended = {r["batch"]: r["ids"] for r in records if r["k"] == "intent"}
    stored = {r["batch"]: r for r in records if r["k"] == "stored"}
    for batch, wanted in intended.items():
        if batch not in stored:
            bad(f"batch {batch}: no stored result logged")
            continue
        r = stored[batch]
        indexes = r["idx"]
        found = [at_index[i].id if i in at_index else None for i in indexes]
        if found != wanted or indexes != list(range(indexes[0], indexes[0] + len(indexes))):
            bad(f"batch {batch}: ids {wanted} not stored contiguously at {indexes}: {found}")
    expected = {event_id for ids in intended.values() for event_id in ids}
    strays = set(ids) - expected
    if strays:
        bad(f"shared session: events no appender appended: {sorted(strays)[:10]}")
    if len(events) != sum(len(ids) for ids in intended.values()):
        bad(f"shared session holds {len(events)} events, appenders appended {len(expected)}")
    _check_contests(store, prefix, records, report)
    report.add("events", len(events))
    report.add("batches", len(stored))
    report.add("replays", sum(1 for r in records if r["k"] == "replayed"))


def _check_contests(
    store: Store, prefix: str, records: list[dict[str, Any]], report: Report
) -> None:
    bad = report.anomalies.append
    winners: dict[int, list[str]] = {}
    entrants: Counter[int] = Counter()
    for r in records:
        if r["k"] == "contest":
            entrants[r["round"]] += 1
            if r["r"] == "won":
                winners.setdefault(r["round"], []).append(r["s"])
    holders: dict[str, list[str]] = {}
    for session_id in all_sessions(store, f"{prefix}own-"):
        for event in store.read(session_id):
            holders.setdefault(event.id, []).append(session_id)
    for round_number in sorted(entrants):
        won = winners.get(round_number, [])
        held = holders.get(contested_id(prefix, round_number), [])
        if len(won) != 1 or held != won:
            bad(f"contest {round_number}: winners {won}, the id is stored in {held}")
    report.add("contests", len(entrants))
