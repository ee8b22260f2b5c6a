"""The cancellation storm: an ``AsyncStore``'s calls cancelled at random points, every call
checked against the database.

One process, one event loop, one ``AsyncStore``. Each of ``tasks`` lanes owns a
session and runs calls on it one after another, each call in a task of its own
that the storm cancels at a random point (after a few turns of the loop, or after
a random share of such a call's usual time) or lets finish. After every call the
lane reads its session back, uncancelled, and compares it with its exact model
(every event's index, id, claim, attempts, failures, completion):

- the call returned: the session is the model changed as the result says;
- the call raised, ``CancelledError`` or any other error: the session is the model
  unchanged; the call wrote nothing.

The calls cover both ways an ``AsyncStore`` on PostgreSQL runs a write: those it
sends whole from the event loop (``append``, ``claim_available``,
``complete_attempt``, ``fail_attempt``), and those it hands to a thread
(``complete_attempts``, ``release_claims``, ``renew_claims``, and an ``append``
that waits for its session's lock: the lane holds the lock in a transaction of
its own, ``begin()`` and ``using()``, while the append waits, so a cancellation
lands in the wait too; the session's next calls then go to the thread for a
second). No fault is injected: any error other than ``CancelledError`` is an
anomaly too. At the end the store is closed, and on PostgreSQL no connection of
the run may be left on the server.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

import a2sql
from a2sql import A2Error, AsyncStore, ClaimRef, Completion, NewEvent, StoredEvent
from bench.torture.common import Report, Target, rng_for

# A lane starts a new session past this many events: reading its session back
# after every call stays cheap.
SESSION_EVENTS = 24
# Claims never expire during a run (their expiry is set explicitly, to be exact).
FAR = datetime(2100, 1, 1, tzinfo=UTC)
MAX_FAILURES = 2
# Shares of calls left alone, cancelled after turns of the loop, after a time.
UNCANCELLED, BY_TURNS = 0.15, 0.45


@dataclass(frozen=True)
class CancelsConfig:
    """``tasks`` lanes for ``duration`` seconds on ``target``, or until ``cancels``
    cancellations if that comes first; ``seed`` fixes their decisions (not the timing,
    which decides where each cancellation lands)."""

    target: Target
    tasks: int
    duration: float
    seed: int
    cancels: int | None = None
    name: str = "a2-cancels"


@dataclass(frozen=True)
class Row:
    """What the model knows of an event: everything a call may change."""

    index: int
    id: str
    processed: bool = False
    processed_by_attempt: int | None = None
    returned_event_ids: tuple[str, ...] | None = None
    attempt_count: int = 0
    failure_count: int = 0
    dead: bool = False
    claim_holder: str | None = None
    claim_expires_at: datetime | None = None


def row_of(event: StoredEvent) -> Row:
    returned = event.returned_event_ids
    return Row(
        index=event.index,
        id=event.id,
        processed=event.processed_at is not None,
        processed_by_attempt=event.processed_by_attempt,
        returned_event_ids=None if returned is None else tuple(returned),
        attempt_count=event.attempt_count,
        failure_count=event.failure_count,
        dead=event.failed_at is not None,
        claim_holder=event.claim_holder,
        claim_expires_at=event.claim_expires_at,
    )


Model = dict[int, Row]
# A call's result -> the model it leaves (raises WrongResult if the result is wrong).
Effect = Callable[[Any], Model]


class WrongResult(Exception):
    """A call's result disagrees with the model it ran on."""


class Stats:
    """The storm's counts, for its report."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.anomalies: list[str] = []

    def add(self, name: str, amount: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + amount


class Lane:
    """One task's calls on a session of its own, and its model of that session."""

    def __init__(self, store: AsyncStore, number: int, seed: int, stats: Stats) -> None:
        self.store = store
        self.name = f"lane{number}"
        self.rng = rng_for(seed, "cancels", number)
        self.stats = stats
        self.session_number = 0
        self.session = ""
        self.model: Model = {}
        self.serial = 0
        # Each call's usual time (uncancelled), to cancel at a share of it.
        self.usual: dict[str, float] = {}
        # Whether the call being judged was cancelled (it may have returned anyway).
        self.cancelled = False
        self.new_session()

    def new_session(self) -> None:
        self.session_number += 1
        self.session = f"c/{self.name}/{self.session_number}"
        self.model = {}

    def fresh_id(self) -> str:
        self.serial += 1
        return f"{self.name}-{self.serial}"

    def expiry(self) -> datetime:
        """A claim expiry of its own, far off: a write that set it is told from one that
        did not."""
        self.serial += 1
        return FAR + timedelta(milliseconds=self.serial)

    async def run(self, until: float, cancels: int | None) -> None:
        stats = self.stats
        while time.monotonic() < until and len(stats.anomalies) < 20:
            if cancels is not None and stats.counts.get("cancels", 0) >= cancels:
                return
            if len(self.model) >= SESSION_EVENTS:
                self.new_session()
            try:
                await self.step()
            except WrongResult as wrong:
                self.anomaly(str(wrong))
                self.model = await self.stored()

    def anomaly(self, what: str) -> None:
        self.stats.anomalies.append(f"{self.session}: {what}")

    async def stored(self) -> Model:
        return {e.index: row_of(e) for e in await self.store.read(self.session)}

    # --- choosing a call -----------------------------------------------------------

    def held_by_me(self) -> list[Row]:
        return [
            row
            for row in self.model.values()
            if row.claim_holder == self.name and not row.processed
        ]

    async def step(self) -> None:
        rng, held = self.rng, self.held_by_me()
        choices: list[tuple[float, Callable[[], Awaitable[None]]]] = [
            (3.0, self.append),
            (0.7, self.append_while_held),
            (3.0, self.claim),
        ]
        if held:
            choices += [
                (2.0, self.complete),
                (1.0, self.complete_many),
                (1.0, self.fail),
                (0.7, self.release),
                (0.7, self.renew),
            ]
        weights, calls = zip(*choices, strict=True)
        await rng.choices(calls, weights)[0]()

    # --- the calls and their effects on the model ---------------------------------

    def new_events(self, count: int) -> list[NewEvent]:
        return [
            NewEvent("t", {"n": self.serial}, id=self.fresh_id(), settled=self.rng.random() < 0.3)
            for _ in range(count)
        ]

    def appended(self, model: Model, events: list[NewEvent], result: list[StoredEvent]) -> Model:
        ids = [e.id for e in events]
        if [e.id for e in result] != ids:
            raise WrongResult(f"appended {[e.id for e in result]}, sent {ids}")
        first = max(model, default=0) + 1
        if [e.index for e in result] != list(range(first, first + len(ids))):
            raise WrongResult(f"appended at {[e.index for e in result]}, next was {first}")
        changed = dict(model)
        for sent, stored in zip(events, result, strict=True):
            changed[stored.index] = Row(
                index=stored.index,
                id=stored.id,
                processed=sent.settled,
            )
        return changed

    async def append(self) -> None:
        events = self.new_events(self.rng.randint(1, 3))
        await self.checked(
            "append",
            lambda: self.store.append(self.session, events),
            lambda result: self.appended(self.model, events, result.events),
        )

    async def append_while_held(self) -> None:
        """An append that finds its session's lock held by the lane's own transaction:
        it waits in a thread until that commits (or is cancelled meanwhile)."""
        store, session = self.store, self.session
        held_events = self.new_events(1)
        async with store.begin() as connection:
            held = await store.using(connection).append(session, held_events)
            waiting = self.new_events(self.rng.randint(1, 2))
            call = asyncio.ensure_future(store.append(session, waiting))
            outcome = await self.cancel_at_random("append_held", call, commit_first=True)
        self.model = self.appended(self.model, held_events, held.events)
        await self.judge(
            "append_held",
            outcome,
            lambda result: self.appended(self.model, waiting, result.events),
        )

    def claimed(self, result: a2sql.ClaimResult, expires_at: datetime) -> Model:
        changed = dict(self.model)
        for event in result.events:
            before = changed.get(event.index)
            if before is None or event.attempt_count != before.attempt_count + 1:
                raise WrongResult(f"claimed {event.index} as attempt {event.attempt_count}")
            changed[event.index] = replace(
                before,
                attempt_count=event.attempt_count,
                claim_holder=self.name,
                claim_expires_at=expires_at,
            )
        if result.outcome == "claimed" and not result.events:
            raise WrongResult("claimed nothing")
        return changed

    async def claim(self) -> None:
        expires_at = self.expiry()
        limit = self.rng.choice([None, 1, 2])
        await self.checked(
            "claim",
            lambda: self.store.claim_available(
                self.session, holder=self.name, ttl_ms=60_000, expires_at=expires_at, limit=limit
            ),
            lambda result: self.claimed(result, expires_at),
        )

    def completed(
        self, model: Model, row: Row, children: list[NewEvent], result: a2sql.CompleteResult
    ) -> Model:
        if result.outcome != "completed":
            raise WrongResult(f"completing {row.index}: {result.outcome}")
        changed = self.appended(model, children, result.events)
        changed[row.index] = replace(
            row,
            processed=True,
            processed_by_attempt=row.attempt_count,
            returned_event_ids=tuple(str(e.id) for e in children),
            claim_holder=None,
            claim_expires_at=None,
        )
        return changed

    async def complete(self) -> None:
        row = self.rng.choice(self.held_by_me())
        children = self.new_events(self.rng.randint(0, 2))
        await self.checked(
            "complete",
            lambda: self.store.complete_attempt(
                self.session, index=row.index, attempt=row.attempt_count, events=children
            ),
            lambda result: self.completed(self.model, row, children, result),
        )

    async def complete_many(self) -> None:
        rows = self.held_by_me()
        rows = self.rng.sample(rows, self.rng.randint(1, min(3, len(rows))))
        children = [self.new_events(self.rng.randint(0, 1)) for _ in rows]
        completions = [
            Completion(row.index, row.attempt_count, events)
            for row, events in zip(rows, children, strict=True)
        ]

        def effect(results: list[a2sql.CompleteResult]) -> Model:
            model = self.model
            for row, events, result in zip(rows, children, results, strict=True):
                model = self.completed(model, model[row.index], events, result)
            return model

        await self.checked(
            "complete_many",
            lambda: self.store.complete_attempts(self.session, completions),
            effect,
        )

    def failed(self, row: Row, result: a2sql.FailResult) -> Model:
        dead = row.failure_count + 1 >= MAX_FAILURES
        if result.outcome != ("dead_lettered" if dead else "failed"):
            raise WrongResult(f"failing {row.index}: {result.outcome}")
        if result.failure_count != row.failure_count + 1:
            raise WrongResult(f"failing {row.index}: count {result.failure_count}")
        changed = dict(self.model)
        changed[row.index] = replace(
            row,
            failure_count=result.failure_count,
            dead=dead,
            claim_holder=None,
            claim_expires_at=None,
        )
        return changed

    async def fail(self) -> None:
        row = self.rng.choice(self.held_by_me())
        await self.checked(
            "fail",
            lambda: self.store.fail_attempt(
                self.session,
                index=row.index,
                attempt=row.attempt_count,
                error="boom",
                max_failures=MAX_FAILURES,
            ),
            lambda result: self.failed(row, result),
        )

    def refs(self) -> list[Row]:
        rows = self.held_by_me()
        return self.rng.sample(rows, self.rng.randint(1, len(rows)))

    async def release(self) -> None:
        rows = self.refs()

        def effect(result: a2sql.ReleaseResult) -> Model:
            if sorted(result.released) != sorted(r.index for r in rows) or result.superseded:
                raise WrongResult(f"released {result}")
            changed = dict(self.model)
            for row in rows:
                changed[row.index] = replace(row, claim_holder=None, claim_expires_at=None)
            return changed

        await self.checked(
            "release",
            lambda: self.store.release_claims(
                self.session,
                holder=self.name,
                claims=[ClaimRef(r.index, r.attempt_count) for r in rows],
            ),
            effect,
        )

    async def renew(self) -> None:
        rows, expires_at = self.refs(), self.expiry()

        def effect(result: a2sql.RenewResult) -> Model:
            if sorted(result.renewed) != sorted(r.index for r in rows) or result.superseded:
                raise WrongResult(f"renewed {result}")
            changed = dict(self.model)
            for row in rows:
                changed[row.index] = replace(row, claim_expires_at=expires_at)
            return changed

        await self.checked(
            "renew",
            lambda: self.store.renew_claims(
                self.session,
                holder=self.name,
                claims=[ClaimRef(r.index, r.attempt_count) for r in rows],
                ttl_ms=60_000,
                expires_at=expires_at,
            ),
            effect,
        )

    # --- cancelling and judging -------------------------------------------------

    async def checked(self, op: str, call: Callable[[], Awaitable[Any]], effect: Effect) -> None:
        outcome = await self.cancel_at_random(op, asyncio.ensure_future(call()))
        await self.judge(op, outcome, effect)

    async def cancel_at_random(
        self, op: str, call: asyncio.Future[Any], *, commit_first: bool = False
    ) -> asyncio.Future[Any]:
        """``call`` cancelled at a random point, or left alone; done when it is."""
        rng, stats = self.rng, self.stats
        self.cancelled = False
        draw = rng.random()
        started = time.monotonic()
        if draw >= UNCANCELLED:
            if draw < UNCANCELLED + BY_TURNS:
                for _ in range(rng.randint(0, 12)):
                    await asyncio.sleep(0)
            else:
                usual = self.usual.get(op, 0.001)
                await asyncio.wait([call], timeout=rng.uniform(0, 1.5 * usual))
            if not call.done():
                call.cancel()
                self.cancelled = True
                stats.add("cancels")
                stats.add(f"cancels_{op}")
        if commit_first and not call.done():
            # The lane's transaction holding the lock ends (committed by the caller)
            # only after ``call``: it waits here until then, or is cancelled.
            await asyncio.wait([call], timeout=rng.uniform(0, 0.003))
            return call
        await asyncio.wait([call])
        if draw < UNCANCELLED and not call.cancelled() and call.exception() is None:
            elapsed = time.monotonic() - started
            self.usual[op] = 0.8 * self.usual.get(op, elapsed) + 0.2 * elapsed
        return call

    async def judge(self, op: str, call: asyncio.Future[Any], effect: Effect) -> None:
        """The call's outcome against the session as stored."""
        await asyncio.wait([call])
        stats = self.stats
        stats.add("calls")
        stats.add(f"calls_{op}")
        stored = await self.stored()
        if call.cancelled():
            stats.add("cancelled")
            if stored != self.model:
                self.anomaly(
                    f"{op} raised CancelledError but wrote: {difference(self.model, stored)}"
                )
            self.model = stored
            return
        error = call.exception()
        if error is not None:
            stats.add("errors")
            detail = f"{type(error).__name__}: {error}"
            if not isinstance(error, A2Error):
                detail += "\n" + "".join(traceback.format_exception(error))
            self.anomaly(f"{op} raised {detail}")
            if stored != self.model:
                self.anomaly(f"{op} raised but wrote: {difference(self.model, stored)}")
            self.model = stored
            return
        if self.cancelled:
            stats.add("returned_though_cancelled")
        expected = effect(call.result())
        if stored != expected:
            self.anomaly(f"{op} returned, stored differs: {difference(expected, stored)}")
        self.model = stored


def difference(expected: Model, stored: Model) -> str:
    changes = []
    for index in sorted(set(expected) | set(stored)):
        if expected.get(index) != stored.get(index):
            changes.append(f"[{index}] expected {expected.get(index)} stored {stored.get(index)}")
    return "; ".join(changes)[:1500]


async def _storm(config: CancelsConfig, stats: Stats) -> None:
    url = config.target.url_for(config.name)
    store = a2sql.create_async_store(url, migrate=True)
    try:
        await store.ensure_schema()
        until = time.monotonic() + config.duration
        lanes = [Lane(store, n, config.seed, stats) for n in range(config.tasks)]
        results = await asyncio.gather(
            *(lane.run(until, config.cancels) for lane in lanes), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                stats.anomalies.append(
                    "a lane failed: " + "".join(traceback.format_exception(result))
                )
    finally:
        await store.close()


def connections_left(target: Target, name: str) -> list[str]:
    """The run's connections still open on the server (their state and last statement),
    once it had a moment to see them closed (PostgreSQL; none elsewhere)."""
    if target.engine != "postgres":
        return []
    admin = create_engine(target.url_for(f"{name}-check"), poolclass=NullPool)
    query = text(
        "select state, wait_event, left(query, 200) from pg_stat_activity"
        " where application_name = :n"
    )
    try:
        deadline = time.monotonic() + 5
        while True:
            with admin.connect() as connection:
                left = [str(tuple(row)) for row in connection.execute(query, {"n": name})]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)
    finally:
        admin.dispose()


def run_cancels(config: CancelsConfig) -> Report:
    """The storm, then its checks: no anomaly, no connection left."""
    started = time.monotonic()
    report = Report("cancels", config.target.engine, config.seed)
    print(
        f"[torture cancels] seed={config.seed} engine={config.target.engine} "
        f"tasks={config.tasks} duration={config.duration} cancels={config.cancels}",
        flush=True,
    )
    stats = Stats()
    asyncio.run(_storm(config, stats))
    left = connections_left(config.target, config.name)
    if left:
        stats.anomalies.append(f"connections left open on the server after close(): {left}")
    report.figures.update(stats.counts)
    report.anomalies += stats.anomalies
    report.seconds = time.monotonic() - started
    return report
