"""Worker: serves sessions with a synchronous handler, on a ``Store``."""

from __future__ import annotations

import inspect
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from types import FrameType
from typing import Any, TypeVar

from sqlalchemy import Connection

from a2sql.api.store import Presence, Store
from a2sql.core.errors import A2Error
from a2sql.core.records import JSON, ClaimRef, NewEvent, StateRead, StoredEvent
from a2sql.metrics.recorder import NO_METRICS, WorkerMetrics
from a2sql.worker.outcome import HandlerTimeout, Outcome, Returned, timeout_error
from a2sql.worker.policy import (
    Backoff,
    Ending,
    IdlePacing,
    Pacing,
    SessionOutcome,
    claims_by_session,
    error_line,
    failure_text,
    is_transient,
    log,
    log_outcome,
    own_lost_claims,
    retry_delay_ms,
    returned_outcome,
    settings,
    settled,
    signal_after,
    stopped_without_an_attempt,
    stopping_too_long,
    vanished,
    waiting_event,
)
from a2sql.worker.schedules import Schedule, Slots, checked, run_schedules, slot_failed

T = TypeVar("T")


@dataclass(eq=False)
class Attempt:
    """One attempt at one event, as a handler receives it.

    ``connection`` is set under ``Worker(..., transactional=True)``: the
    connection of the transaction the completion commits in, for the
    handler's own writes. ``lost`` turns true when the worker learns that
    the claim was taken over (or the handler ran past ``timeout_s``); the
    result will not be submitted. ``cancelled`` turns true (with ``lost``) when
    it learns that the session was cancelled (``Store.cancel_session``) or the
    event skipped: a long handler checks it and stops early.
    """

    event: StoredEvent
    number: int
    store: Store
    connection: Connection | None = None
    _lost: threading.Event = field(default_factory=threading.Event, repr=False)
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    _error: str | None = field(default=None, repr=False)

    @property
    def session_id(self) -> str:
        return self.event.session_id

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def wait_for(
        self, signal: str, *, type: str, until: datetime | None = None, payload: JSON = None
    ) -> NewEvent:
        """An event to return that waits for the signal ``signal`` (``Store.signal``), at
        most until ``until``: the completion appends it, and it becomes claimable as an
        event of ``type`` when the signal comes or ``until`` passes, whichever is first.
        A signal sent while this handler still runs wakes it at once. Its handler learns
        which happened from ``received``."""
        return waiting_event(type, signal, until, payload)

    def received(self, signal: str) -> StoredEvent | None:
        """For an event that waited: the first signal named ``signal`` in the session
        after the event's cause, or ``None`` when none came (its timeout woke it). A
        signal that came after the timeout, before this read, is returned too: the
        answer is what the session holds now."""
        after = 0 if self.event.cause is None else self.event.cause.index
        return signal_after(self.store.read(self.session_id, after_index=after), signal)

    def read_state(self, reducer_name: str) -> StateRead:
        """The session's state for ``reducer_name``, in the handler's transaction if any."""
        target = self.store if self.connection is None else self.store.using(self.connection)
        return target.read_state(self.session_id, reducer_name)

    @property
    def presence(self) -> Presence:
        """``store.presence`` for the handler ("typing…"): in the handler's transaction
        when it has one, so that on SQLite it never waits on that transaction's own
        write lock (the value is then seen when the transaction commits)."""
        if self.connection is None:
            return self.store.presence
        return self.store.using(self.connection).presence


Handler = Callable[[Attempt], Returned]


class _HandlerFailed(Exception):
    def __init__(self, error: Exception) -> None:
        self.error = error


class _Dropped(Exception):
    """The completion was superseded: roll the handler's writes back."""


class _GiveUp(Exception):
    """Stopped for longer than ``grace_s`` while the store does not answer."""


class Worker:
    """Claims events, runs ``handler`` on each and completes or fails the attempt.

    ``run()`` serves every session under ``prefix`` through ``claim_next``;
    ``run_session(id)`` serves one. ``run()`` runs up to ``concurrency``
    handlers at once, each claimed batch (events of one session, at most one
    per lane) in a thread of its own, one event after the other;
    ``run_session`` handles one event at a time in the calling thread. While
    a handler runs, its claims (and those of the events waiting behind it in
    the batch) are renewed in a background thread every third of ``ttl_ms``.

    A handler returns the events its event caused (or ``None``); they are
    appended by ``complete_attempt``, and those without an id get one derived
    from the event and the attempt, so a completion retried after a lost
    reply replays instead of appending twice. To write the application's
    own tables exactly once, it returns ``Outcome(events, write=fn)``: the
    handler runs outside any transaction and ``fn(connection)`` runs in the
    short transaction the completion commits in. A handler that raises fails
    the attempt, to be retried after ``backoff``'s delay, and dead-lettered
    at ``max_failures``; so does one that runs longer than ``timeout_s``
    (its late result is dropped: a thread cannot be stopped, so it runs on
    unwatched). With ``transactional=True`` the handler runs inside that
    transaction and gets ``attempt.connection`` (on SQLite the transaction
    holds the database's write lock while the handler runs: prefer
    ``Outcome``). ``schedules``: ``Schedule``s whose events ``run()`` appends as
    their slots come, as every worker running them does, with no leader.
    ``metrics``: what the worker reports (outcomes, durations, claim latency, lost
    renewals, timeouts) goes there (``a2sql.metrics``); by default nowhere.
    """

    def __init__(
        self,
        store: Store,
        handler: Handler,
        *,
        prefix: str = "",
        holder: str | None = None,
        ttl_ms: int = 30_000,
        max_failures: int = 5,
        batch: int = 16,
        backoff: Backoff | None = None,
        transactional: bool = False,
        poll_interval: float = 1.0,
        grace_s: float = 30.0,
        concurrency: int = 1,
        timeout_s: float | None = None,
        schedules: Sequence[Schedule] = (),
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.store = store
        self.handler = handler
        self.metrics = NO_METRICS if metrics is None else metrics
        # Appended by ``run()`` as their slots come (a2sql.worker.schedules).
        self.schedules = checked(schedules)
        self.settings = settings(
            prefix=prefix,
            holder=holder,
            ttl_ms=ttl_ms,
            max_failures=max_failures,
            batch=batch,
            poll_interval=poll_interval,
            grace_s=grace_s,
            concurrency=concurrency,
            timeout_s=timeout_s,
        )
        self.backoff = Backoff() if backoff is None else backoff
        self.transactional = transactional
        #: How many attempts ended how, since the worker was made.
        self.outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._held: dict[tuple[str, int], Attempt] = {}
        self._stopping = threading.Event()
        self._stopped_at: float | None = None
        self._wake = threading.Event()
        self._running = False
        self._slots = threading.BoundedSemaphore(self.settings.concurrency)
        self._batches: set[threading.Thread] = set()
        self._crashed: BaseException | None = None

    @property
    def holder(self) -> str:
        """The name this worker claims under."""
        return self.settings.holder

    # --- serving ----------------------------------------------------------------

    def run_session(self, session_id: str) -> SessionOutcome:
        """Serve one session until it is ``settled``, ``idle`` (only delayed retries or
        other workers' claims left) or ``stopped``."""
        with self._serving():
            try:
                return self._serve_session(session_id)
            except _GiveUp:
                return "stopped"

    def _serve_session(self, session_id: str) -> SessionOutcome:
        s = self.settings
        pacing = Pacing()
        # A claim whose reply was lost may have committed: its events are
        # this worker's, though it never saw them.
        reply_lost = False
        while not self._stopping.is_set():
            try:
                claim = self.store.claim_available(
                    session_id, holder=s.holder, ttl_ms=s.ttl_ms, limit=s.batch
                )
            except A2Error as error:
                if not is_transient(error):
                    raise
                reply_lost = True
                self._pause(pacing.next(), error)
                continue
            pacing.reset()
            if claim.outcome == "settled":
                return "settled"
            if claim.outcome == "busy":
                if not reply_lost:
                    return "idle"
                reply_lost = False
                events = self._own_lost_claims(session_id)
                if not events:
                    return "idle"
            else:
                events = claim.events
            self._serve(session_id, events)
        return "stopped"

    def run(self, *, until_idle: bool = False) -> None:
        """Serve every session under ``prefix`` until ``stop()`` (or SIGTERM/SIGINT when
        run in the main thread); with ``until_idle``, until nothing is claimable now or
        later either (no claim in flight, no retry delayed).

        When idle it waits for a wake-up (new work committed through a store of this
        process or, on PostgreSQL, anywhere) or until the next poll, and never
        polls sooner than ``claim_next``'s ``retry_at`` within that interval (nor,
        while what is claimable stays locked by others, more often than a
        doubling wait allows).
        """
        s = self.settings
        with self._serving(), self._signals(), self._watching(), self._scheduling():
            try:
                pacing = Pacing()
                idle = IdlePacing(s.poll_interval)
                while self._free_slot():
                    self._wake.clear()
                    try:
                        dispatch = self.store.claim_next(
                            holder=s.holder, ttl_ms=s.ttl_ms, limit=s.batch, prefix=s.prefix
                        )
                    except A2Error as error:
                        self._slots.release()
                        if not is_transient(error):
                            raise
                        if not self._stopping.is_set():
                            self._pause(pacing.next(), error)
                        continue
                    pacing.reset()
                    if dispatch.outcome == "claimed" and dispatch.session_id is not None:
                        idle.reset()
                        self._start_batch(dispatch.session_id, dispatch.events)
                        continue
                    self._slots.release()
                    if until_idle and dispatch.retry_at is None and not self._batches:
                        return
                    self._wake.wait(idle.next(dispatch.retry_at, self.store.clock.now()))
            finally:
                self.stop()  # whatever ended the loop, running batches wind down
                self._join_batches()
            if self._crashed is not None:
                raise self._crashed

    def stop(self) -> None:
        """Stop claiming; running handlers may finish within ``grace_s``, and the
        claims not handled yet are released so that other workers take them at once.
        Safe from any thread and from a signal handler."""
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        self._stopping.set()
        self._wake.set()

    # --- batches in flight --------------------------------------------------------

    def _free_slot(self) -> bool:
        """Wait for a free slot (``concurrency``); False once stopping."""
        while not self._stopping.is_set():
            if self._slots.acquire(blocking=False):
                return True
            # A batch ending (or stop, or new work) sets _wake; acquire is tried
            # again after the clear, so no slot freed meanwhile is missed.
            self._wake.wait()
            self._wake.clear()
        return False

    def _start_batch(self, session_id: str, events: list[StoredEvent]) -> None:
        """Serve a claimed batch, holding the slot taken for it: inline when one
        handler runs at a time, else in a thread of its own."""
        if self.settings.concurrency == 1:
            try:
                self._serve(session_id, events)
            finally:
                self._slots.release()
            return

        def serve() -> None:
            try:
                self._serve(session_id, events)
            except BaseException as error:  # handed to run(), which raises it
                if self._crashed is None:
                    self._crashed = error
                self.stop()
            finally:
                with self._lock:
                    self._batches.discard(threading.current_thread())
                self._slots.release()
                self._wake.set()

        thread = threading.Thread(target=serve, name=f"a2sql-batch-{session_id}", daemon=True)
        with self._lock:
            self._batches.add(thread)
        thread.start()

    def _join_batches(self) -> None:
        """Wait for running batches: until each ends, or ``grace_s`` (and a renewal to
        release what they hold) after stop; a handler still running then is left to
        finish in its thread, its result dropped."""
        deadline = (self._stopped_at or time.monotonic()) + self.settings.grace_s
        deadline += self.settings.renew_every_s + 1.0
        while True:
            with self._lock:
                running = list(self._batches)
            if not running:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("%d handler(s) still running after grace_s: left behind", len(running))
                return
            running[0].join(left)

    # --- one batch of claimed events ---------------------------------------------

    def _serve(self, session_id: str, events: list[StoredEvent]) -> None:
        attempts = [Attempt(event, event.attempt_count, self.store) for event in events]
        with self._lock:
            for attempt in attempts:
                self._held[(session_id, attempt.event.index)] = attempt
        for attempt in attempts:
            self.metrics.claimed(attempt.event)
        try:
            for attempt in attempts:
                if self._stopping.is_set():
                    break
                started = time.monotonic()
                try:
                    outcome = "superseded" if attempt.lost else self._handle(attempt)
                except _GiveUp:
                    break  # the store does not answer: its leases run out
                with self._lock:
                    self._held.pop((session_id, attempt.event.index), None)
                with self._lock:
                    self.outcomes[outcome] += 1
                duration = time.monotonic() - started
                self.metrics.handled(attempt.event, outcome, duration)
                log_outcome(attempt.event, attempt.number, outcome, duration, attempt._error)
        finally:
            with self._lock:
                left = [a for a in attempts if (session_id, a.event.index) in self._held]
            self._release(left)

    def _handle(self, attempt: Attempt) -> Ending:
        if self.transactional:
            try:
                return self._timed(attempt, lambda: self._commit(attempt, self._in_transaction))
            except HandlerTimeout as error:
                return self._fail(attempt, error)
        try:
            returned = self._timed(attempt, lambda: self.handler(attempt))
            outcome = returned_outcome(returned, attempt.event, attempt.number)
        except Exception as error:
            return self._fail(attempt, error)
        if attempt.lost:
            return "superseded"
        if outcome.write is None:
            return self._complete(attempt, list(outcome.events))
        return self._commit(attempt, lambda _attempt, connection: _written(outcome, connection))

    def _timed(self, attempt: Attempt, call: Callable[[], T]) -> T:
        """``call()``, or past ``timeout_s`` a ``HandlerTimeout`` with the attempt marked
        lost (its late result dropped, its renewals stopped by the failure)."""
        timeout_s = self.settings.timeout_s
        if timeout_s is None:
            return call()
        box: list[T] = []
        failed: list[BaseException] = []

        def run() -> None:
            try:
                box.append(call())
            except BaseException as error:
                failed.append(error)

        runner = threading.Thread(target=run, name="a2sql-handler", daemon=True)
        runner.start()
        runner.join(timeout_s)
        if runner.is_alive():
            attempt._lost.set()
            self.metrics.timed_out(attempt.event)
            raise timeout_error(timeout_s)
        if failed:
            raise failed[0]
        return box[0]

    def _in_transaction(self, attempt: Attempt, connection: Connection) -> list[NewEvent]:
        """Transactional mode: the handler runs in the completion's transaction."""
        attempt.connection = connection
        try:
            outcome = returned_outcome(self.handler(attempt), attempt.event, attempt.number)
            return _written(outcome, connection)
        finally:
            attempt.connection = None

    def _complete(self, attempt: Attempt, events: list[NewEvent]) -> Ending:
        event = attempt.event
        pacing = Pacing()
        while True:
            try:
                result = self.store.complete_attempt(
                    event.session_id, index=event.index, attempt=attempt.number, events=events
                )
            except A2Error as error:
                if vanished(error, event):
                    return "vanished"
                if is_transient(error):
                    # The same ids again: a completion that did commit replays.
                    self._pause(pacing.next(), error)
                    continue
                return self._fail(attempt, error)  # what the handler returned was refused
            return result.outcome

    def _commit(
        self, attempt: Attempt, body: Callable[[Attempt, Connection], list[NewEvent]]
    ) -> Ending:
        """One transaction: ``body`` (the app's writes; in transactional mode the handler
        too) and the completion with the events it gives, committed together. An error
        of ``body`` fails the attempt; an outage is retried, once the event read back
        says that the transaction did not commit."""
        event = attempt.event
        pacing = Pacing()
        while True:
            try:
                with self.store.begin() as connection:
                    try:
                        events = body(attempt, connection)
                    except Exception as error:
                        raise _HandlerFailed(error) from error
                    if attempt.lost:
                        raise _Dropped
                    result = self.store.using(connection).complete_attempt(
                        event.session_id, index=event.index, attempt=attempt.number, events=events
                    )
                    if result.outcome == "superseded":
                        raise _Dropped
                return "completed"
            except _HandlerFailed as failed:
                return self._fail(attempt, failed.error)
            except _Dropped:
                return "superseded"
            except Exception as error:
                if not is_transient(error):
                    if isinstance(error, A2Error):
                        if vanished(error, event):
                            return "vanished"
                        return self._fail(attempt, error)
                    raise
                # Did the commit happen? Only the database knows; the writes
                # must not run again if it did.
                found = self._committed(attempt)
                if found is not None:
                    return found
                self._pause(pacing.next(), error)

    def _committed(self, attempt: Attempt) -> Ending | None:
        """After an unknown outcome: ``completed`` or ``superseded`` if settled, else None."""
        event = attempt.event
        pacing = Pacing()
        while True:
            try:
                found = self.store.read(
                    event.session_id, after_index=event.index - 1, through_index=event.index
                )
            except A2Error as error:
                if not is_transient(error):
                    raise
                self._pause(pacing.next(), error)
                continue
            if not found:  # the session was deleted meanwhile
                return "vanished"
            return settled(found[0], attempt.number, self.holder)

    def _own_lost_claims(self, session_id: str) -> list[StoredEvent]:
        pacing = Pacing()
        while not self._stopping.is_set():
            try:
                events = self.store.read(session_id)
            except A2Error as error:
                if not is_transient(error):
                    raise
                self._pause(pacing.next(), error)
                continue
            with self._lock:
                held = [index for (held_in, index) in self._held if held_in == session_id]
            return own_lost_claims(events, self.holder, self.store.clock.now(), held)
        return []

    def _fail(self, attempt: Attempt, error: Exception) -> Ending:
        event = attempt.event
        s = self.settings
        delay = retry_delay_ms(self.backoff, event, s.max_failures)
        text = failure_text(error)
        attempt._error = error_line(error)
        pacing = Pacing()
        while True:
            try:
                result = self.store.fail_attempt(
                    event.session_id,
                    index=event.index,
                    attempt=attempt.number,
                    error=text,
                    max_failures=s.max_failures,
                    retry_after_ms=delay,
                )
            except A2Error as failure:
                if vanished(failure, event):
                    return "vanished"
                if not is_transient(failure):
                    raise
                self._pause(pacing.next(), failure)
                continue
            return result.outcome

    # --- claims held ----------------------------------------------------------------

    def _release(self, attempts: list[Attempt]) -> None:
        """Hand unhandled claims back (shutdown): other workers take them at once."""
        with self._lock:
            for attempt in attempts:
                self._held.pop((attempt.session_id, attempt.event.index), None)
                attempt._lost.set()
        for session_id, claims in claims_by_session(attempts).items():
            try:
                result = self.store.release_claims(session_id, holder=self.holder, claims=claims)
            except A2Error as error:
                log.warning("session=%s could not release claims %s: %s", session_id, claims, error)
                continue
            events = {a.event.index: a.event for a in attempts if a.session_id == session_id}
            for index in result.released:
                self.outcomes["released"] += 1
                self.metrics.handled(events[index], "released", None)
                log.info("session=%s index=%d outcome=released", session_id, index)

    def _renew_held(self) -> None:
        with self._lock:
            held = list(self._held.values())
        by_session: dict[str, list[Attempt]] = {}
        for attempt in held:
            by_session.setdefault(attempt.session_id, []).append(attempt)
        for session_id, attempts in by_session.items():
            claims = [ClaimRef(a.event.index, a.number) for a in attempts]
            try:
                result = self.store.renew_claims(
                    session_id, holder=self.holder, claims=claims, ttl_ms=self.settings.ttl_ms
                )
            except A2Error as error:
                log.warning("session=%s could not renew claims: %s", session_id, error)
                continue
            renewed = set(result.renewed)
            gone = []
            for attempt in attempts:
                if attempt.event.index not in renewed:
                    with self._lock:
                        still_held = self._held.get((session_id, attempt.event.index)) is attempt
                    if still_held:  # not finished meanwhile: the claim is gone
                        gone.append(attempt)
            if gone:
                self._mark_cancelled(session_id, gone)
            for attempt in gone:
                attempt._lost.set()
                self.metrics.renewal_lost(attempt.event)

    def _mark_cancelled(self, session_id: str, attempts: list[Attempt]) -> None:
        """Of attempts whose claim is gone, mark those whose event was stopped without an
        attempt (a cancelled session, a skipped event) as cancelled."""
        indexes = [attempt.event.index for attempt in attempts]
        try:
            events = self.store.read(
                session_id, after_index=min(indexes) - 1, through_index=max(indexes)
            )
        except A2Error as error:
            log.warning("session=%s could not read its lost claims: %s", session_id, error)
            return
        stopped = {event.index for event in events if stopped_without_an_attempt(event)}
        for attempt in attempts:
            if attempt.event.index in stopped:
                attempt._cancelled.set()

    def _renewing(self, done: threading.Event) -> None:
        while not done.wait(self.settings.renew_every_s):
            stopped_at = self._stopped_at
            if stopped_at is not None and time.monotonic() - stopped_at > self.settings.grace_s:
                with self._lock:
                    overdue = list(self._held.values())
                self._release(overdue)
                continue
            try:
                self._renew_held()
            except Exception:  # never let the renewer die: log and go on
                log.exception("renewing claims failed")

    # --- lifetime -------------------------------------------------------------------

    def _pause(self, seconds: float, error: BaseException) -> None:
        """Wait before trying the store again; once stopped, wait out the pause all the
        same (the stop flag no longer cuts it short), and give up past ``grace_s``."""
        log.warning("the store did not answer (%s); trying again in %.2f s", error, seconds)
        if not self._stopping.is_set():
            self._stopping.wait(seconds)
            return
        left = stopping_too_long(self._stopped_at, self.settings.grace_s)
        if left is None:
            raise _GiveUp
        time.sleep(min(seconds, left))

    @contextmanager
    def _serving(self) -> Iterator[None]:
        if self._running:
            raise RuntimeError("this worker is already running")
        self._running = True
        self._stopping.clear()
        self._stopped_at = None
        done = threading.Event()
        renewer = threading.Thread(
            target=self._renewing, args=(done,), name="a2sql-renew", daemon=True
        )
        renewer.start()
        try:
            yield
        finally:
            done.set()
            renewer.join()
            self._running = False

    @contextmanager
    def _scheduling(self) -> Iterator[None]:
        """Append the schedules' slots in a thread of their own while ``run()`` serves."""
        if not self.schedules:
            yield
            return
        done = threading.Event()
        thread = threading.Thread(
            target=run_schedules,
            args=(self.store, Slots(self.schedules), done, slot_failed),
            name="a2sql-schedules",
            daemon=True,
        )
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    @contextmanager
    def _watching(self) -> Iterator[None]:
        unsubscribe = self.store.watch(self._wake.set)
        try:
            yield
        finally:
            unsubscribe()

    @contextmanager
    def _signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous: dict[int, Any] = {}

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            # A second signal acts as it would without the worker.
            for number, handler in previous.items():
                signal.signal(number, handler)
            log.info("signal %d: stopping; running handlers may finish", signum)
            self.stop()

        for each in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(each) == signal.SIG_IGN:  # ignored on purpose (nohup, a pool)
                continue
            previous[each] = signal.signal(each, on_signal)
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


def _written(outcome: Outcome, connection: Connection) -> list[NewEvent]:
    """Run ``outcome.write`` (if any) on the completion's connection; its events."""
    if outcome.write is not None:
        result = outcome.write(connection)  # type: ignore[arg-type]
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()  # never awaited: say so here, not as a warning at exit
            raise TypeError("a Worker's Outcome.write is a plain function; use an AsyncWorker")
    return list(outcome.events)
