"""A worker process: claim, handle, complete or fail, over every session of a run.

Each handler returns one child whose id derives from its parent's id and
attempt; children of generation ``max_gen`` are appended settled, so the work
ends. What a handler does with an attempt (complete, fail, stall past its
lease, renew mid-way) is fixed by the seed, the event id and the attempt.
Everything a worker learns from the store is logged as JSON lines; what it
can tell is wrong by itself (a lease broken early, a result that does not
match its request, a raw exception) is logged as an anomaly.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.util import greenlet_spawn

import a2sql
from a2sql import A2Error, ClaimRef, ErrorCode, EventCause, NewEvent, Store, StoredEvent
from bench.impl import Awaiting
from bench.skew import SkewedClock
from bench.torture.common import JsonLog, ms, now_ms, open_store, retrying, unit

# Shares of attempts (besides doomed events, whose every attempt fails).
FAIL_SHARE = 0.10
STALL_SHARE = 0.07
SLOW_SHARE = 0.08
# A lease this close to its end is renewed before the handler starts.
RENEW_MARGIN_MS = 40


@dataclass(frozen=True)
class WorkerSettings:
    """Everything a worker process needs (picklable for the spawn start method)."""

    url: str
    holder: str
    prefix: str
    seed: int
    ttl_ms: int
    max_failures: int
    max_gen: int
    log_path: str
    stop_path: str
    api: str = "sync"  # "async": an AsyncStore, each call awaited on an event loop
    # The store's clock: the system's shifted by this (bench/skew.py; 0: the system's).
    clock_offset_ms: float = 0.0


def child_id(parent_id: str, attempt: int) -> str:
    """The id of the child an attempt returns: derived from the parent's id and the attempt."""
    return f"{parent_id}~{attempt}"


def generation(event: StoredEvent) -> int:
    payload = event.payload
    gen = payload.get("gen", 0) if isinstance(payload, dict) else 0
    return gen if isinstance(gen, int) else 0


def is_doomed(event: StoredEvent) -> bool:
    return isinstance(event.payload, dict) and bool(event.payload.get("doom"))


def behaviour(seed: int, event: StoredEvent, attempt: int, max_failures: int) -> str:
    """What the handler does with this attempt: complete, fail, stall or slow.

    Only doomed events are dead-lettered: a transient failure never takes
    the last allowed one (``event`` is as claimed, with its failure count).
    """
    if is_doomed(event):
        return "fail"
    roll = unit(seed, "behaviour", event.id, attempt)
    if roll < FAIL_SHARE:
        return "fail" if event.failure_count < max_failures - 1 else "complete"
    if roll < FAIL_SHARE + STALL_SHARE:
        return "stall"
    if roll < FAIL_SHARE + STALL_SHARE + SLOW_SHARE:
        return "slow"
    return "complete"


def child_of(event: StoredEvent, attempt: int, max_gen: int) -> NewEvent:
    gen = generation(event) + 1
    return NewEvent(
        type="child",
        payload={"gen": gen, "parent": event.id, "attempt": attempt, "quote": "it's 100%_"},
        id=child_id(event.id, attempt),
        lane=event.lane,
        settled=gen >= max_gen,
    )


class Worker:
    """One worker's loop; ``run`` returns when the stop file appears."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.s = settings
        self.log = JsonLog(settings.log_path, settings.holder)
        self.rng = random.Random(f"{settings.seed}/{settings.holder}")
        # The worker's own clock, its store's: what it stamps and judges leases by
        # in the store's terms. Its checks of a lease's end against the time an
        # answer came use the machine's clock (now_ms), which is never behind it.
        self.clock = SkewedClock(settings.clock_offset_ms)
        self.store: Store = (
            Awaiting(a2sql.create_async_store(settings.url, migrate=False, clock=self.clock))
            if settings.api == "async"
            else open_store(settings.url, self.log, clock=self.clock)
        )
        # The end of each held lease this worker knows for sure, by (session, index).
        self.lease_until: dict[tuple[str, int], int] = {}
        self.last_alive = 0

    def stopping(self) -> bool:
        return os.path.exists(self.s.stop_path)

    def call(self, op: str, fn: Any) -> Any:
        return retrying(fn, log=self.log, op=op)

    def run(self) -> None:
        self.log.write("start", pid=os.getpid())
        while not self.stopping():
            worked = False
            if self.rng.random() < 0.5:  # half the time through claim_next
                worked = self.claim_next_and_handle()
            else:
                for session_id in self.sessions_with_work():
                    if self.stopping():
                        break
                    worked = self.claim_and_handle(session_id) or worked
            if not worked:
                time.sleep(self.rng.uniform(0.01, 0.04))
        self.log.write("stop")
        self.store.close()

    def sessions_with_work(self) -> list[str]:
        found: list[str] = []
        cursor = None
        while True:
            page = self.call(
                "list_sessions",
                lambda c=cursor: self.store.inspect.list_sessions(
                    prefix=self.s.prefix, cursor=c, limit=200
                ),
            )
            found += [s.session_id for s in page.sessions if s.pending_count > 0]
            cursor = page.cursor
            if cursor is None:
                break
        if now_ms() - self.last_alive > 1000:
            # Proof of life: the store answers (after a server restart, say).
            self.last_alive = now_ms()
            self.log.write("alive")
        self.rng.shuffle(found)
        return found

    def claim_next_and_handle(self) -> bool:
        limit = self.rng.choice([None, 1, 4])
        try:
            dispatch = self.store.claim_next(
                holder=self.s.holder, ttl_ms=self.s.ttl_ms, prefix=self.s.prefix, limit=limit
            )
        except A2Error as error:
            if error.code != ErrorCode.STORE_UNAVAILABLE:
                self.log.anomaly("claim_next raised", err=str(error))
            else:
                self.log.write("unavailable", op="claim_next", err=error.message[:300])
                time.sleep(self.rng.uniform(0.02, 0.1))
            return False
        if dispatch.outcome != "claimed" or dispatch.session_id is None:
            return False
        if not dispatch.events or (limit is not None and len(dispatch.events) > limit):
            self.log.anomaly("claim_next claimed a wrong count", n=len(dispatch.events))
        if any(e.session_id != dispatch.session_id for e in dispatch.events):
            self.log.anomaly("claim_next claimed in another session", s=dispatch.session_id)
        self.handle_claimed(dispatch.session_id, dispatch.events)
        return True

    def claim_and_handle(self, session_id: str) -> bool:
        try:
            result = self.store.claim_available(
                session_id, holder=self.s.holder, ttl_ms=self.s.ttl_ms
            )
        except A2Error as error:
            if error.code != ErrorCode.STORE_UNAVAILABLE:
                self.log.anomaly("claim raised", s=session_id, err=str(error))
            else:
                # It may have committed: claims this worker does not know it holds.
                self.log.write("unavailable", op="claim", err=error.message[:300])
                self.log.write("claim_unknown", s=session_id)
                time.sleep(self.rng.uniform(0.02, 0.1))
            return False
        if result.outcome != "claimed":
            return False
        self.handle_claimed(session_id, result.events)
        return True

    def handle_claimed(self, session_id: str, events: list[StoredEvent]) -> None:
        for event in events:
            self.log.write(
                "claim",
                s=session_id,
                i=event.index,
                a=event.attempt_count,
                at=ms(event.last_claimed_at),
                exp=ms(event.claim_expires_at),
            )
            if event.claim_holder != self.s.holder or event.processed_at or event.failed_at:
                self.log.anomaly("claimed event in a wrong state", s=session_id, i=event.index)
            self.lease_until[(session_id, event.index)] = ms(event.claim_expires_at) or 0
        for event in events:
            if self.stopping():
                break
            self.handle(session_id, event)

    # --- one attempt -------------------------------------------------------------

    def handle(self, session_id: str, event: StoredEvent) -> None:
        attempt = event.attempt_count
        key = (session_id, event.index)
        if now_ms() > self.lease_until[key] - RENEW_MARGIN_MS:
            verdict = self.renew(session_id, event.index, attempt, explicit=False)
            if verdict == "superseded":
                self.log.write("abandon", s=session_id, i=event.index, a=attempt)
                return
        kind = behaviour(self.s.seed, event, attempt, self.s.max_failures)
        self.log.write("handle", s=session_id, i=event.index, a=attempt, kind=kind)
        if kind == "fail":
            self.fail(session_id, event, attempt)
            return
        if kind == "stall":
            time.sleep(self.s.ttl_ms * 1.6 / 1000)
        elif kind == "slow":
            time.sleep(self.s.ttl_ms * 0.5 / 1000)
            verdict = self.renew(session_id, event.index, attempt, explicit=self.rng.random() < 0.5)
            if verdict == "superseded":
                self.log.write("abandon", s=session_id, i=event.index, a=attempt)
                return
            time.sleep(self.s.ttl_ms * 0.4 / 1000)
        self.complete(session_id, event, attempt)

    def renew(self, session_id: str, index: int, attempt: int, *, explicit: bool) -> str:
        """Renew one lease; returns renewed, superseded, none or unknown."""
        # The store's clock, as the store reads it: a lower bound of its now at the renewal.
        started = ms(self.clock.now()) or 0
        expires_at = None
        if explicit:
            expires_at = self.clock.now() + timedelta(milliseconds=self.s.ttl_ms)
        try:
            result = self.store.renew_claims(
                session_id,
                holder=self.s.holder,
                claims=[ClaimRef(index, attempt)],
                ttl_ms=self.s.ttl_ms,
                expires_at=expires_at,
            )
        except A2Error as error:
            if error.code != ErrorCode.STORE_UNAVAILABLE:
                self.log.anomaly("renew raised", s=session_id, i=index, err=str(error))
            else:
                self.log.write("unavailable", op="renew", err=error.message[:300])
            self.log.write("renew", s=session_id, i=index, a=attempt, r="unknown")
            return "unknown"
        if result.renewed == [index]:
            # A lower bound of the new expiry: the store's now is after `started`.
            lease = ms(expires_at) if expires_at is not None else started + self.s.ttl_ms
            self.lease_until[(session_id, index)] = lease or 0
            self.log.write("renew", s=session_id, i=index, a=attempt, r="renewed", exp=lease)
            return "renewed"
        verdict = "superseded" if result.superseded == [index] else "none"
        if result.renewed or (result.superseded and verdict != "superseded"):
            self.log.anomaly("renew answered other indexes", s=session_id, i=index)
        self.log.write("renew", s=session_id, i=index, a=attempt, r=verdict)
        return verdict

    def early_supersession(self, session_id: str, index: int, attempt: int, op: str) -> None:
        """Superseded although this worker's lease had not ended when the store answered."""
        answered = now_ms()
        lease = self.lease_until.get((session_id, index), 0)
        if answered < lease:
            self.log.anomaly(
                f"{op} superseded before the lease ended",
                s=session_id,
                i=index,
                a=attempt,
                answered=answered,
                lease=lease,
            )

    def complete(self, session_id: str, event: StoredEvent, attempt: int) -> None:
        child = child_of(event, attempt, self.s.max_gen)
        tries = 0

        def call() -> Any:
            nonlocal tries
            tries += 1
            return self.store.complete_attempt(
                session_id, index=event.index, attempt=attempt, events=[child]
            )

        try:
            result = self.call("complete", call)
        except A2Error as error:
            self.log.anomaly(
                "complete raised", s=session_id, i=event.index, a=attempt, err=str(error)
            )
            return
        self.log.write(
            "complete", s=session_id, i=event.index, a=attempt, r=result.outcome, tries=tries
        )
        if result.outcome == "superseded":
            # A retry after a committed completion would replay, not be superseded.
            self.early_supersession(session_id, event.index, attempt, "complete")
            return
        expected_cause = EventCause(event.index, attempt)
        returned = [(e.id, e.cause, e.lane, e.payload) for e in result.events]
        wanted = [(child.id, expected_cause, child.lane, child.payload)]
        if returned != wanted:
            self.log.anomaly(
                "complete returned other events",
                s=session_id,
                i=event.index,
                a=attempt,
                got=repr(returned),
            )

    def fail(self, session_id: str, event: StoredEvent, attempt: int) -> None:
        tries = 0

        def call() -> Any:
            nonlocal tries
            tries += 1
            return self.store.fail_attempt(
                session_id,
                index=event.index,
                attempt=attempt,
                error=f"handler of {event.id!r} failed on attempt {attempt}: 'quoted' 50%_",
                max_failures=self.s.max_failures,
            )

        try:
            result = self.call("fail", call)
        except A2Error as error:
            self.log.anomaly("fail raised", s=session_id, i=event.index, a=attempt, err=str(error))
            return
        self.log.write(
            "fail",
            s=session_id,
            i=event.index,
            a=attempt,
            r=result.outcome,
            fc=result.failure_count,
            tries=tries,
        )
        # A retry after a committed failure may meet the next attempt, which is fine.
        if result.outcome == "superseded" and tries == 1:
            self.early_supersession(session_id, event.index, attempt, "fail")
        if result.outcome == "dead_lettered" and result.failure_count < self.s.max_failures:
            self.log.anomaly("dead-lettered early", s=session_id, i=event.index, a=attempt)


def worker_main(settings: WorkerSettings) -> None:
    """Entry point of a worker process: with ``api="async"``, the same loop in a greenlet
    inside an event loop, where the AsyncStore's calls are awaited (bench.impl.Awaiting)."""
    if settings.api == "async":
        asyncio.run(greenlet_spawn(_worker_main, settings))
    else:
        _worker_main(settings)


def _worker_main(settings: WorkerSettings) -> None:
    worker = None
    try:
        worker = Worker(settings)
        worker.run()
    except BaseException as error:
        log = worker.log if worker is not None else JsonLog(settings.log_path, settings.holder)
        log.anomaly(
            "worker crashed", err=f"{type(error).__name__}: {error}", tb=traceback.format_exc()
        )
        raise
