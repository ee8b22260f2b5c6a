"""The control scenario (SPEC §7): waits, later events, signals and cancels racing workers.

Worker processes run a2sql's own ``Worker`` (``run()``, ``claim_next`` across the
run's sessions, two handlers at a time, a short lease renewed in the background)
with a handler whose every decision is fixed by the seed, the event's id and the
attempt: it fails now and then (retried after a short backoff), runs slowly now
and then (past a renewal or two, checking ``attempt.cancelled`` every 10 ms and
stopping when told), and returns up to two events caused by the event: an
ordinary one, a later one (``available_at`` 20 to 300 ms ahead) or one waiting
for the signal ``go``, ``ok`` or ``rare`` (``wake_on``; half of them with a
timeout 100 to 800 ms ahead, through ``attempt.wait_for`` or ``NewEvent``
alike), in the event's lane if it has one, for up to ``max_gen`` generations. A
woken event's handler asks ``attempt.received`` which signal woke it. Seven
events in ten return an ``Outcome`` whose write inserts the handler's effect, one
row naming the event and the attempt, into the run's own table
``torture_effects`` in the completion's transaction (no unique index: a second
effect would show); the others return the events alone. A driver feeds new work (ordinary, later and
waiting events, without a cause) to keep a backlog.

Controller processes meanwhile, every few milliseconds, signal a session
(``go``, ``ok``, seldom ``rare``, whose waits mostly time out or are left for the
end, or ``nobody``, which nothing waits for; sometimes a session holding nothing
but signals), send again a signal they sent before with the
same id (a replay: the same event, nothing woken), or cancel a session: half
the cancels alone, half in one transaction with a settled marker event appended
after the cancel (``store.begin()`` and ``using()``), which fixes where the
cancel fell among the session's indexes. Each reason is unique.

When the feeding time is over the controllers stop and the run drains: until
every unprocessed event waits for a signal with no timeout (or waits behind one
in its lane). Then the waits left are checked; then the driver signals each of
them (and again for the waits their handlers return) until nothing is
unprocessed, and the workers stop. ``kill_every`` SIGKILLs a random worker
about that often (it is replaced).

Checked with the database as the witness, the processes' JSON-lines logs beside
it (the controllers' every answer, the workers' handlers and the outcome the
``Worker`` logs for each attempt):

- nothing processed twice: at most one effect per event, exactly one for an
  ``Outcome`` event processed by an attempt (of that attempt), none for another;
  every caused event comes from the attempt that processed its cause, and is
  the one it remembers returning; no completion logged by an attempt other than
  the one stored;
- waits: an event waiting for ``N`` is never claimed before a signal ``N`` after
  its cause, or its timeout; a later event never before its time; at the drain
  point no unprocessed event waits for ``N`` in a session holding a signal ``N``
  after its cause (after index 0 without a cause), and none whose timeout
  passed is unprocessed; every event a signal woke waited for that name and
  was woken once, never by a later signal when an earlier one after its cause
  should have; a replayed signal is the same event and wakes nothing; a signal
  nothing waits for wakes nothing; ``received`` names a signal after the cause
  (``None`` only when none came before the claim);
- cancels: the events a cancel reports carry its reason, are processed by no
  attempt with no claim, no effect and no caused event, all at one time, the
  cancel's; every event there at a cancel (before its marker, or up to the last
  it stopped) was processed by the time the cancel (or its marker) recorded,
  which it reads under the session's lock, so that no earlier write records a
  later one (docs/contract.md), and caused nothing after the marker; a handler
  told its attempt was cancelled handled an event a cancel stopped. A
  completion that committed before the cancel is fine: its event was not
  unprocessed then, so the cancel neither counts nor marks it;
- gapless indexes, unique ids, times never going back in a session, lanes first
  in first out (an event claimed only once the one before it in its lane is
  processed), inspect's counts, no STORE_UNAVAILABLE, no warning from a2sql's
  loggers, every completion logged when no worker is killed, and on SQLite an
  intact file (checks.py, driver.py).

Times are compared only where the contract orders them: a write records no
earlier time than the session's last event, a claim none earlier than the
event became free; a wait claimed at a time before its first signal after its
cause was claimed before that signal (and a timeout is compared with the
claim's time, which is no earlier than the clock that judged it due).
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Integer, MetaData, Table, Text, insert, select

import a2sql
from a2sql import JSON, A2Error, NewEvent, SignalResult, Store, StoredEvent
from a2sql.worker import Attempt, Backoff, Outcome, Worker
from bench.torture.checks import (
    all_sessions,
    created_at_problems,
    index_and_id_problems,
    logged_anomalies,
    summary_problems,
)
from bench.torture.common import (
    EPOCH,
    GaveUp,
    JsonLog,
    Report,
    Target,
    ms,
    now_ms,
    open_store,
    read_logs,
    retrying,
    rng_for,
    unavailable_anomalies,
    unit,
)
from bench.torture.driver import sqlite_file_problems
from bench.torture.faults import ProcessPool

# The signals handlers wait for (``rare`` seldom sent: its waits mostly time out, or
# are left for the final signals), and one that nothing waits for.
NAMES = ("go", "ok", "rare")
WAITED_ON = (0.4, 0.4, 0.2)
SENT = (0.5, 0.45, 0.05)
UNHEARD = "nobody"
LANES = (None, None, "L0", "L1")
MAX_FAILURES = 4
FAIL_SHARE = 0.06
SLOW_SHARE = 0.15
# Events whose handler returns an Outcome that writes its effect (by event id).
OUTCOME_SHARE = 0.7
MARKER_TYPE = "cancel.marker"
QUIET_SESSIONS = 3
WORK_KINDS = ("seed", "step", "later", "wait")

EFFECTS = Table(
    "torture_effects",
    MetaData(),
    Column("session_id", Text, nullable=False),
    Column("idx", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("holder", Text, nullable=False),
)

Key = tuple[str, int]


@dataclass(frozen=True)
class ControlConfig:
    """One control run. ``duration``: how long work is fed and controllers run."""

    target: Target
    workers: int
    duration: float
    seed: int
    controllers: int = 2
    kill_every: float | None = None
    ttl_ms: int = 200
    sessions: int | None = None
    backlog: int | None = None
    max_gen: int = 3
    drain_timeout: float = 60.0
    log_dir: str | None = None


@dataclass(frozen=True)
class ProcessSettings:
    """What a worker or controller process needs (picklable for spawn)."""

    url: str
    name: str
    prefix: str
    seed: int
    ttl_ms: int
    max_gen: int
    sessions: tuple[str, ...]
    log_path: str
    stop_path: str


def at_ms(value: int) -> datetime:
    return EPOCH + timedelta(milliseconds=value)


def payload_of(event: StoredEvent) -> dict[str, Any]:
    return event.payload if isinstance(event.payload, dict) else {}


def kind_of(event: StoredEvent) -> str | None:
    """seed, step, later or wait for the run's work; None for signals and markers."""
    kind = payload_of(event).get("kind")
    return kind if kind in WORK_KINDS else None


def waits_for(event: StoredEvent) -> str:
    """The signal a waiting event of the run waits (or waited) for, by its payload."""
    return str(payload_of(event).get("waits"))


def writes_effect(seed: int, event_id: str) -> bool:
    """Whether the event's handler returns an Outcome writing its effect."""
    return unit(seed, "path", event_id) < OUTCOME_SHARE


def quiet_sessions(prefix: str) -> list[str]:
    """Sessions holding nothing but signals."""
    return [f"{prefix}q{n}" for n in range(QUIET_SESSIONS)]


def new_work(
    kind: str, rng: random.Random, payload: dict[str, JSON], event_id: str | None, lane: str | None
) -> NewEvent:
    """An ordinary, later or waiting event (its times in the payload, to the millisecond)."""
    payload = {**payload, "kind": kind}
    if kind == "later":
        at = now_ms() + rng.randint(20, 300)
        payload["at"] = at
        return NewEvent("later", payload, id=event_id, lane=lane, available_at=at_ms(at))
    if kind == "wait":
        name = rng.choices(NAMES, WAITED_ON)[0]
        until = None if rng.random() < 0.5 else now_ms() + rng.randint(100, 800)
        payload.update(waits=name, until=until)
        available_at = None if until is None else at_ms(until)
        return NewEvent(
            "wait", payload, id=event_id, lane=lane, wake_on=name, available_at=available_at
        )
    return NewEvent(kind, payload, id=event_id, lane=lane)


# --- worker processes ------------------------------------------------------------


class _ToJsonLog(logging.Handler):
    """a2sql's log records in the process's JSON log: each attempt's outcome as the
    Worker logs it, and every warning."""

    OUTCOME = "session=%s index=%d attempt=%d outcome=%s"

    def __init__(self, log: JsonLog) -> None:
        super().__init__(logging.INFO)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if isinstance(record.msg, str) and record.msg.startswith(self.OUTCOME) and len(args) >= 4:
            self.log.write("outcome", s=args[0], i=args[1], a=args[2], r=args[3])
        elif record.levelno >= logging.WARNING:
            self.log.write("warning", logger=record.name, msg=record.getMessage()[:500])


class Handler:
    """The workers' handler: what it does with an attempt is fixed by the seed."""

    def __init__(self, settings: ProcessSettings, log: JsonLog) -> None:
        self.s = settings
        self.log = log

    def __call__(self, attempt: Attempt) -> list[NewEvent] | Outcome | None:
        event, number = attempt.event, attempt.number
        sid, index = event.session_id, event.index
        rng = rng_for(self.s.seed, "handle", event.id, number)
        payload = payload_of(event)
        roll = rng.random()
        behaviour = "quick"
        if roll < FAIL_SHARE and event.failure_count < MAX_FAILURES - 1:
            behaviour = "fail"
        elif roll < FAIL_SHARE + SLOW_SHARE:
            behaviour = "slow"
        self.log.write(
            "handle",
            s=sid,
            i=index,
            a=number,
            kind=payload.get("kind"),
            b=behaviour,
            claimed=ms(event.last_claimed_at),
        )
        if payload.get("kind") == "wait":
            name = str(payload.get("waits"))
            got = attempt.received(name)
            self.log.write(
                "received",
                s=sid,
                i=index,
                a=number,
                name=name,
                got=None if got is None else got.index,
                claimed=ms(event.last_claimed_at),
            )
        if behaviour == "fail":
            raise RuntimeError(f"handler of {event.id!r} failed on attempt {number}: 'quoted' 50%_")
        if behaviour == "slow":
            until = time.monotonic() + self.s.ttl_ms * rng.uniform(0.8, 2.5) / 1000
            while time.monotonic() < until:
                if attempt.cancelled:
                    self.log.write("told_cancelled", s=sid, i=index, a=number)
                    return None
                time.sleep(0.01)
            if attempt.lost:
                self.log.write("lost", s=sid, i=index, a=number)
        events = self.caused(attempt, rng)
        self.log.write(
            "returned",
            s=sid,
            i=index,
            a=number,
            n=len(events),
            effect=writes_effect(self.s.seed, event.id),
        )
        if not writes_effect(self.s.seed, event.id):
            return events
        holder = self.s.name

        def write(connection: Any) -> None:
            connection.execute(
                insert(EFFECTS).values(
                    session_id=sid, idx=index, attempt=number, event_id=event.id, holder=holder
                )
            )

        return Outcome(events, write=write)

    def caused(self, attempt: Attempt, rng: random.Random) -> list[NewEvent]:
        event, number = attempt.event, attempt.number
        gen = payload_of(event).get("gen", 0)
        if not isinstance(gen, int) or gen >= self.s.max_gen:
            return []
        events = []
        for position in range(rng.choice([0, 1, 1, 2])):
            kind = rng.choices(["step", "later", "wait"], [0.4, 0.25, 0.35])[0]
            # Three in ten without an id: the worker derives it from event and attempt.
            event_id = None if rng.random() < 0.3 else f"{event.id}~{number}.{position}"
            payload: dict[str, JSON] = {"gen": gen + 1, "parent": event.id, "attempt": number}
            new = new_work(kind, rng, payload, event_id, event.lane)
            if kind == "wait" and event_id is None and new.lane is None and rng.random() < 0.5:
                assert new.wake_on is not None
                new = attempt.wait_for(
                    new.wake_on, type="wait", until=new.available_at, payload=new.payload
                )
            events.append(new)
        return events


def worker_main(settings: ProcessSettings) -> None:
    """A worker process: a2sql's Worker until the stop file appears."""
    log = JsonLog(settings.log_path, settings.name)
    try:
        a2sql_log = logging.getLogger("a2sql")
        a2sql_log.setLevel(logging.INFO)
        a2sql_log.addHandler(_ToJsonLog(log))
        a2sql_log.propagate = False
        store = open_store(settings.url, log)
        worker = Worker(
            store,
            Handler(settings, log),
            prefix=settings.prefix,
            holder=settings.name,
            ttl_ms=settings.ttl_ms,
            max_failures=MAX_FAILURES,
            batch=4,
            backoff=Backoff(base_ms=20, max_ms=200),
            poll_interval=0.05,
            grace_s=5.0,
            concurrency=2,
        )

        def watch() -> None:
            while not os.path.exists(settings.stop_path):
                time.sleep(0.05)
            worker.stop()

        threading.Thread(target=watch, daemon=True).start()
        log.write("start", pid=os.getpid())
        worker.run()
        log.write("stop", outcomes=dict(worker.outcomes))
        store.close()
    except BaseException as error:
        log.anomaly(
            "worker crashed", err=f"{type(error).__name__}: {error}", tb=traceback.format_exc()
        )
        raise


# --- controller processes --------------------------------------------------------


def send_signal(
    store: Store,
    log: JsonLog,
    sid: str,
    name: str,
    payload: JSON,
    signal_id: str,
    *,
    again: bool,
) -> SignalResult:
    """``store.signal``, tried again while the database is unavailable, and logged as the
    checks read it (``again``: a signal sent before, with the same id)."""
    result = retrying(lambda: store.signal(sid, name, payload, id=signal_id), log=log, op="signal")
    log.write(
        "signal",
        s=sid,
        name=name,
        id=signal_id,
        idx=result.event.index,
        woken=result.woken,
        replayed=result.replayed,
        again=again,
    )
    return result


class Controller:
    """Signals, replays signals and cancels sessions until the stop file appears."""

    def __init__(self, settings: ProcessSettings) -> None:
        self.s = settings
        self.log = JsonLog(settings.log_path, settings.name)
        self.rng = rng_for(settings.seed, "controller", settings.name)
        self.store = open_store(settings.url, self.log)
        self.sent: list[tuple[str, str, dict[str, JSON], str, int]] = []
        self.serial = 0

    def run(self) -> None:
        self.log.write("start", pid=os.getpid())
        while not os.path.exists(self.s.stop_path):
            time.sleep(self.rng.uniform(0.005, 0.04))
            roll = self.rng.random()
            self.serial += 1
            if roll < 0.1:
                self.cancel()
            elif roll < 0.22 and self.sent:
                self.replay()
            else:
                self.signal()
        self.log.write("stop")
        self.store.close()

    def signal(self) -> None:
        rng = self.rng
        sessions = quiet_sessions(self.s.prefix) if rng.random() < 0.1 else self.s.sessions
        sid = rng.choice(sessions)
        name = UNHEARD if rng.random() < 0.1 else rng.choices(NAMES, SENT)[0]
        signal_id = f"{name}:{self.s.name}:{self.serial}"
        payload: dict[str, JSON] = {"by": self.s.name, "n": self.serial, "text": "it's 100%_"}
        result = send_signal(self.store, self.log, sid, name, payload, signal_id, again=False)
        stored = result.event
        if result.replayed or (stored.id, stored.type, stored.payload) != (
            signal_id,
            name,
            payload,
        ):
            self.log.anomaly("a new signal came back other", s=sid, id=signal_id, got=repr(stored))
        if not stored.is_signal:
            self.log.anomaly("a signal's event is not a signal", s=sid, i=stored.index)
        self.sent.append((sid, name, payload, signal_id, stored.index))

    def replay(self) -> None:
        sid, name, payload, signal_id, index = self.rng.choice(self.sent)
        result = send_signal(self.store, self.log, sid, name, payload, signal_id, again=True)
        if not result.replayed or result.woken or result.event.index != index:
            self.log.anomaly(
                "a signal sent again was not replayed",
                s=sid,
                id=signal_id,
                first=index,
                got=result.event.index,
                woken=result.woken,
                replayed=result.replayed,
            )

    def cancel(self) -> None:
        sid = self.rng.choice(self.s.sessions)
        reason = f"cancelled by {self.s.name} #{self.serial}: 'hung up' 100%_"
        try:
            if self.rng.random() < 0.5:
                result = self.store.cancel_session(sid, reason=reason)
                marker = None
            else:
                with self.store.begin() as connection:
                    using = self.store.using(connection)
                    result = using.cancel_session(sid, reason=reason)
                    marked = using.append(
                        sid,
                        [NewEvent(MARKER_TYPE, {"reason": reason}, id=reason, settled=True)],
                    )
                    marker = marked.events[0].index
        except A2Error as error:
            self.log.anomaly("cancel raised", s=sid, reason=reason, err=str(error))
            return
        self.log.write("cancel", s=sid, reason=reason, n=result.cancelled, marker=marker)


def controller_main(settings: ProcessSettings) -> None:
    controller = None
    try:
        controller = Controller(settings)
        controller.run()
    except BaseException as error:
        log = (
            controller.log if controller is not None else JsonLog(settings.log_path, settings.name)
        )
        log.anomaly(
            "controller crashed", err=f"{type(error).__name__}: {error}", tb=traceback.format_exc()
        )
        raise


# --- the driver ------------------------------------------------------------------


class Feeder:
    """Appends batches of new work, without a cause, keeping a backlog of ready work."""

    def __init__(
        self, store: Store, log: JsonLog, prefix: str, sessions: list[str], config: ControlConfig
    ) -> None:
        self.store = store
        self.log = log
        self.prefix = prefix
        self.sessions = sessions
        self.rng = rng_for(config.seed, "feeder")
        self.backlog = config.backlog or 3 * config.workers
        self.batches = 0

    def ready(self) -> int:
        """Pending events neither waiting nor scheduled."""
        found = retrying(lambda: all_sessions(self.store, self.prefix), log=self.log, op="list")
        return sum(s.pending_count - s.waiting_count - s.scheduled_count for s in found.values())

    def feed(self) -> None:
        if self.ready() < self.backlog:
            self.append(self.rng.choice(self.sessions))

    def append(self, sid: str) -> None:
        rng = self.rng
        number = self.batches
        self.batches += 1
        events = []
        for position in range(rng.randint(1, 4)):
            kind = rng.choices(["seed", "later", "wait"], [0.7, 0.15, 0.15])[0]
            payload: dict[str, JSON] = {"gen": 0, "batch": number}
            events.append(
                new_work(kind, rng, payload, f"{sid}-b{number}-{position}", rng.choice(LANES))
            )
        result = retrying(lambda: self.store.append(sid, events), log=self.log, op="append")
        if [e.id for e in result.events] != [e.id for e in events]:
            self.log.anomaly("append returned other events", s=sid)
        self.log.write(
            "batch",
            s=sid,
            ids=[e.id for e in result.events],
            idx=[e.index for e in result.events],
            waiting=[e.waiting for e in result.events],
        )


def read_all(store: Store, prefix: str) -> dict[str, list[StoredEvent]]:
    return {sid: store.read(sid) for sid in sorted(all_sessions(store, prefix))}


def forever_waiting(event: StoredEvent) -> bool:
    return event.waiting and event.wait_until is None


def behind_forever(session: list[StoredEvent]) -> set[int]:
    """Indexes of the unprocessed events behind one waiting for a signal without a timeout
    in their lane: they wait for it (lanes are first in, first out)."""
    held: set[str] = set()
    behind = set()
    for event in session:
        if event.processed_at is not None or event.lane is None:
            continue
        if event.lane in held:
            behind.add(event.index)
        elif forever_waiting(event):
            held.add(event.lane)
    return behind


def outstanding(session: list[StoredEvent]) -> list[StoredEvent]:
    """Unprocessed events that should still be handled: all but those waiting for a signal
    without a timeout, and those behind one in their lane."""
    behind = behind_forever(session)
    return [
        e
        for e in session
        if e.processed_at is None and not forever_waiting(e) and e.index not in behind
    ]


class _Run:
    """The driver's side of one run: processes, feeding, kills, draining, final signals."""

    def __init__(self, config: ControlConfig, report: Report, log_dir: str) -> None:
        self.config = config
        self.report = report
        self.log_dir = log_dir
        self.prefix = f"c{config.seed}-{now_ms() % 100000:05d}-"
        report.prefix = self.prefix
        self.app_prefix = f"torture-{self.prefix}"
        count = config.sessions or max(4, config.workers)
        self.sessions = [f"{self.prefix}s{n:02d}" for n in range(count)]
        self.log = JsonLog(Path(log_dir) / "driver.jsonl", "driver")
        self.stop_workers = str(Path(log_dir) / "STOP")
        self.stop_controllers = str(Path(log_dir) / "STOP-controllers")
        target = config.target
        with a2sql.create_store(target.url, migrate=True) as store, store.begin() as connection:
            EFFECTS.create(connection, checkfirst=True)
        self.store = a2sql.create_store(target.url_for(f"{self.app_prefix}driver"), migrate=False)
        self.workers = ProcessPool(
            worker_main, lambda name: self.settings(name, self.stop_workers), size=config.workers
        )
        self.controllers = ProcessPool(
            controller_main,
            lambda name: self.settings(name, self.stop_controllers),
            name_prefix="c",
            size=config.controllers,
        )
        self.rng = rng_for(config.seed, "faults")
        self.final_round = 0

    def settings(self, name: str, stop_path: str) -> tuple[ProcessSettings]:
        config = self.config
        return (
            ProcessSettings(
                url=config.target.url_for(f"{self.app_prefix}{name}"),
                name=name,
                prefix=self.prefix,
                seed=config.seed,
                ttl_ms=config.ttl_ms,
                max_gen=config.max_gen,
                sessions=tuple(self.sessions),
                log_path=str(Path(self.log_dir) / f"{name}.jsonl"),
                stop_path=stop_path,
            ),
        )

    def respawn(self) -> None:
        for pool in (self.workers, self.controllers):
            for name, code in pool.reap():
                self.report.anomalies.append(f"{name} exited by itself with code {code}")
                self.report.add("unexpected_exits")
        if self.report.figures.get("unexpected_exits", 0) > 2 * self.config.workers:
            raise GaveUp("processes keep exiting by themselves; see their logs")
        while len(self.workers.alive) < self.workers.size:
            self.log.write("spawn", name=self.workers.spawn())

    def run(self) -> None:
        config = self.config
        feeder = Feeder(self.store, self.log, self.prefix, self.sessions, config)
        self.respawn()
        for _ in range(config.controllers):
            self.log.write("spawn", name=self.controllers.spawn())
        self.wait_started([*self.workers.alive, *self.controllers.alive])
        begin = time.monotonic()
        next_kill = config.kill_every
        while (elapsed := time.monotonic() - begin) < config.duration:
            feeder.feed()
            if next_kill is not None and config.kill_every and elapsed >= next_kill:
                next_kill += config.kill_every * self.rng.uniform(0.5, 1.5)
                name = self.workers.kill_random(self.rng)
                if name is not None:
                    self.log.write("kill", name=name)
                    self.report.add("workers_killed")
            self.respawn()
            time.sleep(0.02)
        Path(self.stop_controllers).touch()
        stuck = self.controllers.join_all(timeout=30)
        self.report.anomalies += [f"{name} did not stop within 30 s" for name in stuck]
        self.controllers.alive.clear()
        events = self.drain("the feeding stopped")
        self.report.anomalies += waits_left_problems(events, time_of_check=now_ms())
        self.report.add("waits_left", sum(1 for s in events.values() for e in s if e.waiting))
        self.final_signals(events)

    def wait_started(self, names: list[str]) -> None:
        """Wait for the processes to be up (a spawn imports a2sql afresh: seconds, on a
        busy machine), so that the feeding time is the time they all run."""
        deadline = time.monotonic() + 120
        waiting = set(names)
        while waiting and time.monotonic() < deadline:
            for name in list(waiting):
                path = Path(self.log_dir) / f"{name}.jsonl"
                if path.exists() and '"k": "start"' in path.read_text():
                    waiting.discard(name)
            self.respawn()
            time.sleep(0.05)
        if waiting:
            raise GaveUp(f"{sorted(waiting)} did not start within 120 s")

    def drain(self, since: str) -> dict[str, list[StoredEvent]]:
        """Wait until only waits for a signal (and what waits behind them) are left."""
        deadline = time.monotonic() + self.config.drain_timeout
        while True:
            self.respawn()
            events = retrying(lambda: read_all(self.store, self.prefix), log=self.log, op="read")
            left = [e for session in events.values() for e in outstanding(session)]
            if not left:
                return events
            if time.monotonic() > deadline:
                shown = ", ".join(f"{e.session_id}#{e.index}" for e in left[:20])
                self.report.anomalies.append(
                    f"{len(left)} events still to handle {self.config.drain_timeout} s after "
                    f"{since}: {shown}"
                )
                return events
            time.sleep(0.2)

    def final_signals(self, events: dict[str, list[StoredEvent]]) -> None:
        """Signal every wait left, then those their handlers return, until none is left."""
        for round_number in range(self.config.max_gen + 3):
            waits = sorted(
                {
                    (sid, e.wake_on)
                    for sid, s in events.items()
                    for e in s
                    if e.waiting and e.wake_on
                }
            )
            if not waits:
                return
            for sid, name in waits:
                signal_id = f"final{round_number}:{name}:{sid}"
                send_signal(self.store, self.log, sid, name, None, signal_id, again=False)
                self.report.add("final_signals")
            events = self.drain(f"final signals round {round_number}")
        left = [f"{e.session_id}#{e.index}" for s in events.values() for e in s if e.waiting]
        self.report.anomalies.append(f"waits left after every final signal: {left[:20]}")

    def close(self) -> None:
        Path(self.stop_controllers).touch()
        Path(self.stop_workers).touch()
        for pool in (self.controllers, self.workers):
            stuck = pool.join_all(timeout=30)
            self.report.anomalies += [f"{name} did not stop within 30 s" for name in stuck]


def waits_left_problems(events: dict[str, list[StoredEvent]], *, time_of_check: int) -> list[str]:
    """At the drain point: no unprocessed event waits for ``N`` in a session holding a signal
    ``N`` after its cause, and none whose timeout passed is left unprocessed."""
    found = []
    for sid, session in events.items():
        signals = [e for e in session if e.is_signal]
        behind = behind_forever(session)
        for event in session:
            if event.processed_at is not None:
                continue
            where = f"{sid}#{event.index} ({event.id!r})"
            until = payload_of(event).get("until")
            due = isinstance(until, int) and until < time_of_check - 1000
            if due and event.index not in behind:
                found.append(f"{where}: its timeout passed at {until}, still unprocessed")
            if not event.waiting:
                continue
            after = 0 if event.cause is None else event.cause.index
            late = [s.index for s in signals if s.type == event.wake_on and s.index > after]
            if late:
                found.append(
                    f"{where}: waits for {event.wake_on!r}, though signal(s) {late[:5]} came "
                    f"after its cause #{after} (a lost wake-up)"
                )
    return found


def run_control(config: ControlConfig) -> Report:
    """Run the scenario and check it; the report's anomalies must be empty."""
    started = time.monotonic()
    target = config.target
    report = Report("control", target.engine, config.seed)
    log_dir = config.log_dir or tempfile.mkdtemp(prefix="a2-torture-logs-")
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    report.log_dir = log_dir
    print(f"[torture control] seed={config.seed} engine={target.engine} logs={log_dir}", flush=True)
    run = _Run(config, report, log_dir)
    run.log.write("config", config=repr(config), prefix=run.prefix)
    try:
        run.run()
    except GaveUp as error:
        report.anomalies.append(f"driver stopped: {error}")
    finally:
        run.close()
    records, problems = read_logs(log_dir)
    report.anomalies += problems
    try:
        retrying(
            lambda: ControlCheck(run.store, config, run.prefix, records, report).run(),
            log=run.log,
            op="check",
        )
    finally:
        run.store.close()
    seen, bad = unavailable_anomalies(records, engine=target.engine, faults_injected=False)
    report.add("unavailable_errors", seen)
    report.anomalies += bad
    if target.engine == "sqlite":
        problems = sqlite_file_problems(target.url)
        report.anomalies += problems
        report.add("sqlite_integrity_checked", 1 if not problems else 0)
    report.seconds = time.monotonic() - started
    run.log.close()
    return report


# --- the checks ------------------------------------------------------------------


class ControlCheck:
    """Checks one control run from the database and the logs, after every process ended."""

    def __init__(
        self,
        store: Store,
        config: ControlConfig,
        prefix: str,
        records: list[dict[str, Any]],
        report: Report,
    ) -> None:
        self.config = config
        self.records = records
        self.report = report
        self.summaries = all_sessions(store, prefix)
        self.events = {sid: store.read(sid) for sid in sorted(self.summaries)}
        self.at: dict[Key, StoredEvent] = {
            (sid, e.index): e for sid, events in self.events.items() for e in events
        }
        with store.engine.connect() as connection:
            rows = connection.execute(
                select(EFFECTS.c.session_id, EFFECTS.c.idx, EFFECTS.c.attempt)
            ).all()
        self.effects: dict[Key, list[int]] = defaultdict(list)
        for sid, index, attempt in rows:
            self.effects[(sid, index)].append(attempt)
        self.children: dict[Key, list[StoredEvent]] = defaultdict(list)
        for event in self.at.values():
            if event.cause is not None:
                self.children[(event.session_id, event.cause.index)].append(event)
        self.cancels = [r for r in records if r["k"] == "cancel"]
        self.reasons = {r["reason"] for r in self.cancels}
        self.signals_logged = [r for r in records if r["k"] == "signal"]
        # Each session's signals by name, in index order.
        self.signals: dict[tuple[str, str], list[StoredEvent]] = defaultdict(list)
        for sid, events in self.events.items():
            for event in events:
                if event.is_signal:
                    self.signals[(sid, event.type)].append(event)

    def bad(self, message: str) -> None:
        self.report.anomalies.append(message)

    def run(self) -> None:
        self.report.anomalies += logged_anomalies(self.records)
        for r in self.records:
            if r["k"] == "warning":
                self.bad(f"{r['src']}: {r['logger']} warned: {r['msg']}")
        self.report.anomalies += index_and_id_problems(self.events)
        self.report.anomalies += summary_problems(self.summaries, self.events)
        for sid, events in self.events.items():
            self.report.anomalies += created_at_problems(sid, events)
            self.check_lanes(sid, events)
        for event in self.at.values():
            self.check_event(event)
        self.check_effects_table()
        self.check_signal_logs()
        self.check_cancel_logs()
        self.check_worker_logs()
        self.count()

    # --- each event -------------------------------------------------------------------

    def is_cancelled(self, event: StoredEvent) -> bool:
        return (
            event.processed_at is not None
            and event.processed_by_attempt is None
            and event.last_error in self.reasons
        )

    def check_event(self, event: StoredEvent) -> None:
        where = f"{event.session_id}#{event.index} ({event.id!r})"
        key = (event.session_id, event.index)
        kind = kind_of(event)
        if kind is None:
            self.check_settled(where, event)
            return
        if event.processed_at is None:
            self.bad(f"{where}: never processed (failures {event.failure_count})")
            return
        if event.wake_on is not None:
            self.bad(f"{where}: processed, yet wake_on {event.wake_on!r} is left")
        if event.claim_holder is not None or event.claim_expires_at is not None:
            self.bad(f"{where}: processed but still claimed by {event.claim_holder!r}")
        if event.failed_at is not None:
            self.bad(f"{where}: dead-lettered")
        effects = self.effects.get(key, [])
        attempt = event.processed_by_attempt
        if attempt is None:
            if not self.is_cancelled(event):
                self.bad(f"{where}: processed by no attempt, last_error {event.last_error!r}")
            if effects:
                self.bad(f"{where}: cancelled, yet effects of attempts {effects} committed")
            if self.children.get(key) or event.returned_event_ids:
                self.bad(f"{where}: cancelled, yet it caused events")
        else:
            if not 1 <= attempt <= event.attempt_count:
                self.bad(f"{where}: processed by attempt {attempt} of {event.attempt_count}")
            wanted = [attempt] if writes_effect(self.config.seed, event.id) else []
            if sorted(effects) != wanted:
                self.bad(f"{where}: processed by attempt {attempt}, effects of {effects}")
            children = [e.id for e in self.children.get(key, [])]
            if children != (event.returned_event_ids or []):
                self.bad(f"{where}: caused {children}, remembers {event.returned_event_ids}")
        for child in self.children.get(key, []):
            self.check_child(event, child)
        self.check_timing(where, event)

    def check_settled(self, where: str, event: StoredEvent) -> None:
        """A signal's event or a cancel's marker: settled when appended, never claimed."""
        if event.type == MARKER_TYPE:
            if event.processed_at != event.created_at or event.attempt_count or event.wake_on:
                self.bad(f"{where}: a cancel's marker, not stored settled")
            return
        if not event.is_signal or event.type not in (*NAMES, UNHEARD):
            self.bad(f"{where}: neither work, a signal nor a marker: {event}")
        if event.processed_at != event.created_at or event.attempt_count or event.lane:
            self.bad(f"{where}: a signal, not stored settled")

    def check_child(self, parent: StoredEvent, child: StoredEvent) -> None:
        cause = child.cause
        assert cause is not None
        where = f"{child.session_id}#{child.index} ({child.id!r})"
        if cause.index >= child.index:
            self.bad(f"{where}: cause {cause} is not an earlier event")
        if parent.processed_by_attempt != cause.attempt:
            self.bad(
                f"{where}: caused by attempt {cause.attempt}, but the parent was processed by "
                f"attempt {parent.processed_by_attempt} (a superseded attempt's events)"
            )
        payload = payload_of(child)
        if payload.get("parent") != parent.id or payload.get("attempt") != cause.attempt:
            self.bad(f"{where}: payload {child.payload!r} does not match its cause")
        if child.lane != parent.lane:
            self.bad(f"{where}: lane {child.lane!r}, its cause's {parent.lane!r}")

    def signals_after(self, event: StoredEvent, name: str) -> list[StoredEvent]:
        after = 0 if event.cause is None else event.cause.index
        return [e for e in self.signals.get((event.session_id, name), []) if e.index > after]

    def check_timing(self, where: str, event: StoredEvent) -> None:
        """Never claimed before its time, its signal or its timeout."""
        claimed = event.first_claimed_at
        if claimed is None:
            return
        payload = payload_of(event)
        if payload.get("kind") == "later" and claimed < at_ms(int(payload["at"])):
            self.bad(f"{where}: claimed at {claimed}, before its time {payload['at']}")
        if payload.get("kind") != "wait":
            return
        signals = self.signals_after(event, str(payload.get("waits")))
        until = payload.get("until")
        signalled = bool(signals) and signals[0].created_at <= claimed
        timed_out = isinstance(until, int) and claimed >= at_ms(until)
        if not (signalled or timed_out):
            self.bad(
                f"{where}: claimed at {claimed}, before a signal {payload.get('waits')!r} "
                f"after its cause (first: {[s.index for s in signals[:1]]}) or its timeout {until}"
            )

    def check_lanes(self, sid: str, events: list[StoredEvent]) -> None:
        """First in, first out: a lane's event is claimed only after the one before it in
        the lane is processed, and processed no earlier."""
        lanes: dict[str, list[StoredEvent]] = defaultdict(list)
        for event in events:
            if event.lane is not None and kind_of(event) is not None:
                lanes[event.lane].append(event)
        for lane, members in lanes.items():
            for previous, event in pairwise(members):
                where = f"{sid} lane {lane!r} #{event.index}"
                done = previous.processed_at
                if event.first_claimed_at is not None and (
                    done is None or event.first_claimed_at < done
                ):
                    self.bad(
                        f"{where}: claimed at {event.first_claimed_at} while #{previous.index} "
                        f"was unprocessed (processed at {done})"
                    )
                # Processed after its claim, so no earlier (a cancel records no lane order).
                claimed = event.first_claimed_at is not None
                if (
                    claimed
                    and event.processed_at is not None
                    and (done is None or event.processed_at < done)
                ):
                    self.bad(
                        f"{where}: processed at {event.processed_at}, before #{previous.index}"
                    )

    def check_effects_table(self) -> None:
        for key, attempts in self.effects.items():
            if len(attempts) > 1:
                self.bad(f"{key}: its effect committed {len(attempts)} times, attempts {attempts}")
            if key not in self.at:
                self.bad(f"{key}: an effect of an event not stored")

    # --- the logs ---------------------------------------------------------------------

    def check_signal_logs(self) -> None:
        first_by_id: dict[tuple[str, str], int] = {}
        woken_by: dict[Key, list[int]] = defaultdict(list)
        for r in self.signals_logged:
            sid, index, name = r["s"], r["idx"], r["name"]
            where = f"{sid}#{index} (signal {r['id']!r})"
            stored = self.at.get((sid, index))
            if stored is None or stored.id != r["id"] or stored.type != name:
                self.bad(f"{where}: not stored as answered")
            key = (sid, r["id"])
            if r["again"]:
                if first_by_id.get(key) != index:
                    self.bad(f"{where}: sent again, first stored at {first_by_id.get(key)}")
                continue
            first_by_id[key] = index
            if name == UNHEARD and r["woken"]:
                self.bad(f"{where}: nothing waits for {UNHEARD!r}, yet it woke {r['woken']}")
            for woken in r["woken"]:
                woken_by[(sid, woken)].append(index)
                event = self.at.get((sid, woken))
                if event is None or woken >= index or payload_of(event).get("waits") != name:
                    self.bad(f"{where}: woke #{woken}, which did not wait for {name!r}")
        for (sid, index), by in woken_by.items():
            where = f"{sid}#{index}"
            if len(by) > 1:
                self.bad(f"{where}: woken by signals {by}")
            event = self.at.get((sid, index))
            if event is None:
                continue
            earlier = [s.index for s in self.signals_after(event, waits_for(event))]
            if earlier and earlier[0] < by[0]:
                self.bad(
                    f"{where}: woken by #{by[0]}, though signal #{earlier[0]} came after its "
                    f"cause first (a lost wake-up)"
                )
            if (
                event.first_claimed_at is not None
                and event.first_claimed_at < self.at[(sid, by[0])].created_at
            ):
                self.bad(f"{where}: claimed before the signal #{by[0]} that woke it")
        for event in self.at.values():
            if kind_of(event) == "wait":
                self.check_not_passed_over(event, woken_by.get((event.session_id, event.index)))
        self.check_appended_waits()

    def check_not_passed_over(self, event: StoredEvent, woken_by: list[int] | None) -> None:
        """The first signal for its name after a wait was appended woke it, unless it waited
        no more by then: woken before (on its append, by the rule), timed out when appended,
        claimed once its timeout passed, or cancelled."""
        name = waits_for(event)
        after = [s for s in self.signals.get((event.session_id, name), []) if s.index > event.index]
        if not after or (woken_by and woken_by[0] == after[0].index):
            return
        first = after[0]
        if any(s.index < event.index for s in self.signals_after(event, name)):
            return  # woken on its append
        until = payload_of(event).get("until")
        if isinstance(until, int) and at_ms(until) <= event.created_at:
            return  # its timeout had passed when it was appended
        claimed, processed = event.first_claimed_at, event.processed_at
        if (claimed is not None and claimed <= first.created_at) or (
            claimed is None and processed is not None and processed <= first.created_at
        ):
            return
        self.bad(
            f"{event.session_id}#{event.index} ({event.id!r}): waited for {name!r}, yet the "
            f"signal #{first.index} after it did not wake it (woken by {woken_by}, claimed at "
            f"{claimed}, processed at {processed}, signal at {first.created_at})"
        )

    def check_appended_waits(self) -> None:
        """A wait the feeder appends (no cause) waits unless its session already holds a
        signal for its name (or its timeout passed): as the append answered."""
        for r in self.records:
            if r["k"] != "batch":
                continue
            for index, waiting in zip(r["idx"], r["waiting"], strict=True):
                event = self.at.get((r["s"], index))
                if event is None or kind_of(event) != "wait":
                    continue
                earlier = [s.index for s in self.signals_after(event, waits_for(event))]
                prior = [i for i in earlier if i < index]
                until = payload_of(event).get("until")
                due = isinstance(until, int) and at_ms(until) <= event.created_at
                where = f"{r['s']}#{index} ({event.id!r})"
                if waiting and prior:
                    self.bad(f"{where}: appended waiting, though signal #{prior[0]} came first")
                if not waiting and not prior and not due:
                    self.bad(f"{where}: appended woken, though no signal came before it")

    def check_cancel_logs(self) -> None:
        by_reason: dict[str, list[StoredEvent]] = defaultdict(list)
        for event in self.at.values():
            if event.processed_by_attempt is None and event.last_error in self.reasons:
                by_reason[event.last_error].append(event)
        for r in self.cancels:
            sid, reason = r["s"], r["reason"]
            stopped = by_reason.get(reason, [])
            where = f"{sid} cancel {reason!r}"
            if len(stopped) != r["n"] or any(e.session_id != sid for e in stopped):
                self.bad(f"{where}: reported {r['n']} cancelled, {len(stopped)} stored so")
            unprocessed = [e.index for e in stopped if e.processed_at is None]
            if unprocessed:
                self.bad(f"{where}: its events {unprocessed} carry its reason, not processed")
            times = {e.processed_at for e in stopped if e.processed_at is not None}
            if len(times) > 1:
                self.bad(f"{where}: its events processed at different times {sorted(times)}")
            # What was there at the cancel: the events before its marker, else those up to
            # the last it stopped. Each was processed by the time the cancel (or its marker)
            # recorded, which is read under the session's lock, so no earlier write records
            # a later time (docs/contract.md); and an attempt that processed one appended
            # what it caused before the marker.
            session = self.events.get(sid, [])
            if r["marker"] is not None:
                marker = self.at.get((sid, r["marker"]))
                if marker is None or marker.type != MARKER_TYPE:
                    self.bad(f"{where}: marker #{r['marker']} not stored")
                    continue
                if any(e.index > marker.index for e in stopped):
                    self.bad(f"{where}: cancelled events after its marker #{marker.index}")
                end, cutoff = marker.index, marker.created_at
            elif times:
                end, cutoff = max(e.index for e in stopped) + 1, times.pop()
            else:
                continue
            for event in session[: end - 1]:
                if event.processed_at is None or event.processed_at > cutoff:
                    self.bad(
                        f"{where}: #{event.index} was there before the cancel at {cutoff}, "
                        f"processed at {event.processed_at}"
                    )
                caused = [c.index for c in self.children.get((sid, event.index), [])]
                if r["marker"] is not None and any(index > end for index in caused):
                    self.bad(
                        f"{where}: #{event.index}, there before the cancel, caused {caused} "
                        f"after its marker #{end}"
                    )

    def check_worker_logs(self) -> None:
        for r in self.records:
            key = (r.get("s", ""), r.get("i", 0))
            event = self.at.get(key)
            if r["k"] == "outcome" and r["r"] == "completed":
                if event is None or event.processed_by_attempt != r["a"]:
                    self.bad(
                        f"{key}: attempt {r['a']} logged completed, stored processed by "
                        f"{event.processed_by_attempt if event else 'nothing'}"
                    )
            elif r["k"] == "told_cancelled":
                if event is None or not self.is_cancelled(event):
                    self.bad(f"{key}: attempt {r['a']} was told it was cancelled; it was not")
            elif r["k"] == "received" and event is not None:
                self.check_received(event, r)
        if not self.config.kill_every:
            completed = {
                (r["s"], r["i"], r["a"])
                for r in self.records
                if r["k"] == "outcome" and r["r"] == "completed"
            }
            for key, event in self.at.items():
                attempt = event.processed_by_attempt
                if attempt is not None and (*key, attempt) not in completed:
                    self.bad(f"{key}: processed by attempt {attempt}, no completion logged")

    def check_received(self, event: StoredEvent, r: dict[str, Any]) -> None:
        where = f"{event.session_id}#{event.index} attempt {r['a']}"
        signals = self.signals_after(event, r["name"])
        claimed = at_ms(r["claimed"])
        if r["got"] is None:
            if signals and signals[0].created_at < claimed:
                self.bad(f"{where}: received() found none, though #{signals[0].index} came first")
            return
        if not signals or r["got"] != signals[0].index:
            self.bad(
                f"{where}: received() gave #{r['got']}, the first signal after its cause "
                f"is {[s.index for s in signals[:1]]}"
            )
        elif signals[0].created_at > claimed:
            # Claimed once its timeout passed; the signal came while its handler ran.
            self.report.add("received_after_claim")

    def count(self) -> None:
        add = self.report.add
        work = [e for e in self.at.values() if kind_of(e) is not None]
        add("sessions", len(self.events))
        add("events", len(self.at))
        add("work", len(work))
        add("seeded", sum(1 for e in work if e.cause is None))
        add("processed", sum(1 for e in work if e.processed_by_attempt is not None))
        add("claims", sum(e.attempt_count for e in work))
        add("failures", sum(e.failure_count for e in work))
        add("effects", sum(len(a) for a in self.effects.values()))
        add("waits", sum(1 for e in work if kind_of(e) == "wait"))
        add("laters", sum(1 for e in work if kind_of(e) == "later"))
        # A wait its timeout made claimable: no signal for it came before the timeout.
        # (Not "before its claim": on a loaded machine a signal often lands between
        # the timeout and a late claim, and the timeout still came first.)
        timed_out = 0
        for event in work:
            until = payload_of(event).get("until")
            if kind_of(event) == "wait" and event.first_claimed_at and isinstance(until, int):
                signals = self.signals_after(event, waits_for(event))
                if not signals or signals[0].created_at >= at_ms(until):
                    timed_out += 1
        add("waits_timed_out", timed_out)
        sent = [r for r in self.signals_logged if not r["again"]]
        add("signals", len(sent))
        add("signals_replayed", sum(1 for r in self.signals_logged if r["again"]))
        add("signals_waking_none", sum(1 for r in sent if not r["woken"]))
        add("wakes", sum(len(r["woken"]) for r in sent))
        woken = {(r["s"], i) for r in sent for i in r["woken"]}
        on_append = [
            e
            for e in work
            if kind_of(e) == "wait"
            and (e.session_id, e.index) not in woken
            and any(s.index < e.index for s in self.signals_after(e, waits_for(e)))
            and e.first_claimed_at is not None
        ]
        # Caused: a signal came while the handler returning the wait still ran.
        add("woken_on_append", sum(1 for e in on_append if e.cause is not None))
        add("woken_on_append_uncaused", sum(1 for e in on_append if e.cause is None))
        add("cancels", len(self.cancels))
        add("cancels_with_marker", sum(1 for r in self.cancels if r["marker"] is not None))
        cancelled = [e for e in work if self.is_cancelled(e)]
        add("cancelled", len(cancelled))
        add("cancelled_after_a_claim", sum(1 for e in cancelled if e.attempt_count))
        kinds = Counter(
            (r["k"], r.get("r")) for r in self.records if r["k"] in ("outcome", "told_cancelled")
        )
        for outcome in ("completed", "superseded", "failed", "released"):
            add(f"outcome_{outcome}", kinds[("outcome", outcome)])
        add("told_cancelled", kinds[("told_cancelled", None)])
