"""AsyncWorker: serves sessions with a coroutine handler, on an ``AsyncStore``.

The same decisions as ``Worker`` (a2sql.worker.policy), made with asyncio:
renewals run in a task, idle waits on an ``asyncio.Event``.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from a2sql.api.async_store import AsyncPresence, AsyncStore
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
from a2sql.worker.schedules import (
    MAX_SLEEP_S,
    RETRY_S,
    Schedule,
    Slots,
    append_due_async,
    checked,
    slot_failed,
)

T = TypeVar("T")


@dataclass(eq=False)
class AsyncAttempt:
    """One attempt at one event, as a coroutine handler receives it (see ``Attempt``)."""

    event: StoredEvent
    number: int
    store: AsyncStore
    connection: AsyncConnection | None = None
    _lost: threading.Event = field(default_factory=threading.Event, repr=False)
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    _error: str | None = field(default=None, repr=False)
    # The task the handler runs in, cancelled when the session is.
    _task: asyncio.Future[Any] | None = field(default=None, repr=False)

    @property
    def session_id(self) -> str:
        return self.event.session_id

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    @property
    def cancelled(self) -> bool:
        """``Attempt.cancelled``: the session was cancelled or the event skipped; the
        handler's task is cancelled too."""
        return self._cancelled.is_set()

    def wait_for(
        self, signal: str, *, type: str, until: datetime | None = None, payload: JSON = None
    ) -> NewEvent:
        """An event to return that waits for the signal ``signal`` (``Attempt.wait_for``)."""
        return waiting_event(type, signal, until, payload)

    async def received(self, signal: str) -> StoredEvent | None:
        """For an event that waited: the signal that woke it, or ``None`` (``Attempt.received``)."""
        after = 0 if self.event.cause is None else self.event.cause.index
        return signal_after(await self.store.read(self.session_id, after_index=after), signal)

    async def read_state(self, reducer_name: str) -> StateRead:
        """The session's state for ``reducer_name``, in the handler's transaction if any."""
        target = self.store if self.connection is None else self.store.using(self.connection)
        return await target.read_state(self.session_id, reducer_name)

    @property
    def presence(self) -> AsyncPresence:
        """As ``Attempt.presence``: in the handler's transaction when it has one."""
        if self.connection is None:
            return self.store.presence
        return self.store.using(self.connection).presence


AsyncHandler = Callable[[AsyncAttempt], Awaitable[Returned]]


class _HandlerFailed(Exception):
    def __init__(self, error: Exception) -> None:
        self.error = error


class _Dropped(Exception):
    """The completion was superseded: roll the handler's writes back."""


class _GiveUp(Exception):
    """Stopped for longer than ``grace_s`` while the store does not answer."""


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (the worker's stop)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class AsyncWorker:
    """``Worker`` for asyncio: ``await worker.run()``, coroutine handlers, an ``AsyncStore``.

    ``run()`` runs up to ``concurrency`` handlers at once, each claimed batch
    in a task of its own, one event after the other; a handler running past
    ``timeout_s`` is cancelled and its attempt failed; a handler whose session is
    cancelled (``AsyncStore.cancel_session``) is cancelled at the next renewal, its
    outcome ``superseded``. ``Outcome.write`` is a
    coroutine function over the completion's ``AsyncConnection``. After
    ``stop()``, handlers still running when ``grace_s`` ends are cancelled.
    Everything else is as ``Worker``, ``metrics`` too (its calls are made on the
    event loop: a recorder must not block).
    """

    def __init__(
        self,
        store: AsyncStore,
        handler: AsyncHandler,
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
        self._held: dict[tuple[str, int], AsyncAttempt] = {}
        self._stopping = asyncio.Event()
        self._stopped_at: float | None = None
        self._wake = asyncio.Event()
        self._running = False
        self._batches: set[asyncio.Task[None]] = set()
        self._crashed: BaseException | None = None

    @property
    def holder(self) -> str:
        """The name this worker claims under."""
        return self.settings.holder

    # --- serving ----------------------------------------------------------------

    async def run_session(self, session_id: str) -> SessionOutcome:
        """Serve one session until it is ``settled``, ``idle`` or ``stopped``."""
        async with self._serving():
            try:
                return await self._serve_session(session_id)
            except _GiveUp:
                return "stopped"

    async def _serve_session(self, session_id: str) -> SessionOutcome:
        s = self.settings
        pacing = Pacing()
        reply_lost = False  # as in Worker.run_session
        while not self._stopping.is_set():
            try:
                claim = await self.store.claim_available(
                    session_id, holder=s.holder, ttl_ms=s.ttl_ms, limit=s.batch
                )
            except A2Error as error:
                if not is_transient(error):
                    raise
                reply_lost = True
                await self._pause(pacing.next(), error)
                continue
            pacing.reset()
            if claim.outcome == "settled":
                return "settled"
            if claim.outcome == "busy":
                if not reply_lost:
                    return "idle"
                reply_lost = False
                events = await self._own_lost_claims(session_id)
                if not events:
                    return "idle"
            else:
                events = claim.events
            await self._serve(session_id, events)
        return "stopped"

    async def run(self, *, until_idle: bool = False) -> None:
        """Serve every session under ``prefix`` until ``stop()`` (or SIGTERM/SIGINT when
        the loop runs in the main thread); with ``until_idle``, until nothing is
        claimable now or later either. Idle waits as ``Worker.run``."""
        s = self.settings
        loop = asyncio.get_running_loop()

        def wake() -> None:  # called from any thread
            loop.call_soon_threadsafe(self._wake.set)

        unsubscribe = self.store.watch(wake)
        try:
            async with self._serving(), self._signals(), self._scheduling():
                try:
                    pacing = Pacing()
                    idle = IdlePacing(s.poll_interval)
                    while await self._free_slot():
                        self._wake.clear()
                        try:
                            dispatch = await self.store.claim_next(
                                holder=s.holder, ttl_ms=s.ttl_ms, limit=s.batch, prefix=s.prefix
                            )
                        except A2Error as error:
                            if not is_transient(error):
                                raise
                            if not self._stopping.is_set():
                                await self._pause(pacing.next(), error)
                            continue
                        pacing.reset()
                        if dispatch.outcome == "claimed" and dispatch.session_id is not None:
                            idle.reset()
                            self._start_batch(dispatch.session_id, dispatch.events)
                            continue
                        if until_idle and dispatch.retry_at is None and not self._batches:
                            return
                        wait = idle.next(dispatch.retry_at, self.store.clock.now())
                        with suppress(TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), wait)
                finally:
                    self.stop()  # whatever ended the loop, running batches wind down
                    await self._join_batches()
                if self._crashed is not None:
                    raise self._crashed
        finally:
            unsubscribe()

    def stop(self) -> None:
        """As ``Worker.stop``; call it from the worker's event loop (or a signal)."""
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        self._stopping.set()
        self._wake.set()

    # --- batches in flight --------------------------------------------------------

    async def _free_slot(self) -> bool:
        """Wait until fewer than ``concurrency`` batches run; False once stopping."""
        while not self._stopping.is_set():
            if len(self._batches) < self.settings.concurrency:
                return True
            self._wake.clear()  # a batch ending (or stop) sets it
            await self._wake.wait()
        return False

    def _start_batch(self, session_id: str, events: list[StoredEvent]) -> None:
        async def serve() -> None:
            try:
                await self._serve(session_id, events)
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # handed to run(), which raises it
                if self._crashed is None:
                    self._crashed = error
                self.stop()
            finally:
                # Here, not in a done callback (which runs later): _free_slot,
                # woken by the set, must see the slot free.
                self._batches.discard(task)
                self._wake.set()

        task = asyncio.create_task(serve(), name=f"a2sql-batch-{session_id}")
        self._batches.add(task)

    async def _join_batches(self) -> None:
        """Wait for running batches until ``grace_s`` after stop, then cancel those left
        (a cancelled batch still releases its claims)."""
        if not self._batches:
            return
        left = (self._stopped_at or time.monotonic()) + self.settings.grace_s - time.monotonic()
        _, pending = await asyncio.wait(set(self._batches), timeout=max(0.0, left))
        if pending:
            log.warning("%d handler(s) still running after grace_s: cancelled", len(pending))
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)

    # --- one batch of claimed events ---------------------------------------------

    async def _serve(self, session_id: str, events: list[StoredEvent]) -> None:
        attempts = [AsyncAttempt(event, event.attempt_count, self.store) for event in events]
        for attempt in attempts:
            self._held[(session_id, attempt.event.index)] = attempt
            self.metrics.claimed(attempt.event)
        try:
            for attempt in attempts:
                if self._stopping.is_set():
                    break
                started = time.monotonic()
                try:
                    outcome = "superseded" if attempt.lost else await self._handle(attempt)
                except _GiveUp:
                    break  # the store does not answer: its leases run out
                self._held.pop((session_id, attempt.event.index), None)
                self.outcomes[outcome] += 1
                duration = time.monotonic() - started
                self.metrics.handled(attempt.event, outcome, duration)
                log_outcome(attempt.event, attempt.number, outcome, duration, attempt._error)
        finally:
            left = [a for a in attempts if (session_id, a.event.index) in self._held]
            if left:
                # Shielded: a cancelled worker still hands its claims back.
                await asyncio.shield(self._release(left))

    async def _handle(self, attempt: AsyncAttempt) -> Ending:
        if self.transactional:
            try:
                return await self._timed(attempt, self._commit(attempt, self._in_transaction))
            except HandlerTimeout as error:
                return await self._fail(attempt, error)
            except _Dropped:
                return "superseded"
        try:
            returned = await self._timed(attempt, self.handler(attempt))
            outcome = returned_outcome(returned, attempt.event, attempt.number)
        except _Dropped:
            return "superseded"
        except Exception as error:
            return await self._fail(attempt, error)
        if attempt.lost:
            return "superseded"
        if outcome.write is None:
            return await self._complete(attempt, list(outcome.events))
        return await self._commit(attempt, lambda _, connection: _written(outcome, connection))

    async def _timed(self, attempt: AsyncAttempt, call: Awaitable[T]) -> T:
        """``await call`` in a task of its own, which a cancelled session cancels (then
        ``_Dropped``); past ``timeout_s`` cancelled, with the attempt marked lost and a
        ``HandlerTimeout`` raised."""
        task: asyncio.Future[T] = asyncio.ensure_future(call)
        attempt._task = task
        timeout_s = self.settings.timeout_s
        try:
            if timeout_s is None:
                return await task
            try:
                return await asyncio.wait_for(task, timeout_s)
            except TimeoutError:
                attempt._lost.set()
                self.metrics.timed_out(attempt.event)
                raise timeout_error(timeout_s) from None
        except asyncio.CancelledError:
            # The handler's task cancelled because its session was, not this one.
            if attempt.cancelled and task.cancelled() and not _cancelling():
                raise _Dropped from None
            raise
        finally:
            attempt._task = None

    async def _in_transaction(
        self, attempt: AsyncAttempt, connection: AsyncConnection
    ) -> list[NewEvent]:
        """Transactional mode: the handler runs in the completion's transaction."""
        attempt.connection = connection
        try:
            returned = await self.handler(attempt)
            outcome = returned_outcome(returned, attempt.event, attempt.number)
            return await _written(outcome, connection)
        finally:
            attempt.connection = None

    async def _complete(self, attempt: AsyncAttempt, events: list[NewEvent]) -> Ending:
        event = attempt.event
        pacing = Pacing()
        while True:
            try:
                result = await self.store.complete_attempt(
                    event.session_id, index=event.index, attempt=attempt.number, events=events
                )
            except A2Error as error:
                if vanished(error, event):
                    return "vanished"
                if is_transient(error):
                    await self._pause(pacing.next(), error)
                    continue
                return await self._fail(attempt, error)
            return result.outcome

    async def _commit(
        self,
        attempt: AsyncAttempt,
        body: Callable[[AsyncAttempt, AsyncConnection], Awaitable[list[NewEvent]]],
    ) -> Ending:
        """As ``Worker._commit``: ``body`` and the completion in one transaction."""
        event = attempt.event
        pacing = Pacing()
        while True:
            try:
                async with self.store.begin() as connection:
                    try:
                        events = await body(attempt, connection)
                    except Exception as error:
                        raise _HandlerFailed(error) from error
                    if attempt.lost:
                        raise _Dropped
                    result = await self.store.using(connection).complete_attempt(
                        event.session_id, index=event.index, attempt=attempt.number, events=events
                    )
                    if result.outcome == "superseded":
                        raise _Dropped
                return "completed"
            except _HandlerFailed as failed:
                return await self._fail(attempt, failed.error)
            except _Dropped:
                return "superseded"
            except Exception as error:
                if not is_transient(error):
                    if isinstance(error, A2Error):
                        if vanished(error, event):
                            return "vanished"
                        return await self._fail(attempt, error)
                    raise
                found = await self._committed(attempt)
                if found is not None:
                    return found
                await self._pause(pacing.next(), error)

    async def _committed(self, attempt: AsyncAttempt) -> Ending | None:
        event = attempt.event
        pacing = Pacing()
        while True:
            try:
                found = await self.store.read(
                    event.session_id, after_index=event.index - 1, through_index=event.index
                )
            except A2Error as error:
                if not is_transient(error):
                    raise
                await self._pause(pacing.next(), error)
                continue
            if not found:  # the session was deleted meanwhile
                return "vanished"
            return settled(found[0], attempt.number, self.holder)

    async def _own_lost_claims(self, session_id: str) -> list[StoredEvent]:
        pacing = Pacing()
        while not self._stopping.is_set():
            try:
                events = await self.store.read(session_id)
            except A2Error as error:
                if not is_transient(error):
                    raise
                await self._pause(pacing.next(), error)
                continue
            held = [index for (held_in, index) in self._held if held_in == session_id]
            return own_lost_claims(events, self.holder, self.store.clock.now(), held)
        return []

    async def _fail(self, attempt: AsyncAttempt, error: Exception) -> Ending:
        event = attempt.event
        s = self.settings
        delay = retry_delay_ms(self.backoff, event, s.max_failures)
        text = failure_text(error)
        attempt._error = error_line(error)
        pacing = Pacing()
        while True:
            try:
                result = await self.store.fail_attempt(
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
                await self._pause(pacing.next(), failure)
                continue
            return result.outcome

    # --- claims held ----------------------------------------------------------------

    async def _release(self, attempts: list[AsyncAttempt]) -> None:
        for attempt in attempts:
            self._held.pop((attempt.session_id, attempt.event.index), None)
            attempt._lost.set()
        for session_id, claims in claims_by_session(attempts).items():
            try:
                result = await self.store.release_claims(
                    session_id, holder=self.holder, claims=claims
                )
            except A2Error as error:
                log.warning("session=%s could not release claims %s: %s", session_id, claims, error)
                continue
            events = {a.event.index: a.event for a in attempts if a.session_id == session_id}
            for index in result.released:
                self.outcomes["released"] += 1
                self.metrics.handled(events[index], "released", None)
                log.info("session=%s index=%d outcome=released", session_id, index)

    async def _renew_held(self) -> None:
        by_session: dict[str, list[AsyncAttempt]] = {}
        for attempt in list(self._held.values()):
            by_session.setdefault(attempt.session_id, []).append(attempt)
        for session_id, attempts in by_session.items():
            claims = [ClaimRef(a.event.index, a.number) for a in attempts]
            try:
                result = await self.store.renew_claims(
                    session_id, holder=self.holder, claims=claims, ttl_ms=self.settings.ttl_ms
                )
            except A2Error as error:
                log.warning("session=%s could not renew claims: %s", session_id, error)
                continue
            renewed = set(result.renewed)
            gone = [
                attempt
                for attempt in attempts
                if attempt.event.index not in renewed
                and self._held.get((session_id, attempt.event.index)) is attempt
            ]
            if gone:
                await self._mark_cancelled(session_id, gone)
            for attempt in gone:
                attempt._lost.set()
                self.metrics.renewal_lost(attempt.event)
                if attempt.cancelled and attempt._task is not None:
                    attempt._task.cancel()

    async def _mark_cancelled(self, session_id: str, attempts: list[AsyncAttempt]) -> None:
        """As ``Worker._mark_cancelled``."""
        indexes = [attempt.event.index for attempt in attempts]
        try:
            events = await self.store.read(
                session_id, after_index=min(indexes) - 1, through_index=max(indexes)
            )
        except A2Error as error:
            log.warning("session=%s could not read its lost claims: %s", session_id, error)
            return
        stopped = {event.index for event in events if stopped_without_an_attempt(event)}
        for attempt in attempts:
            if attempt.event.index in stopped:
                attempt._cancelled.set()

    async def _renewing(self) -> None:
        while True:
            await asyncio.sleep(self.settings.renew_every_s)
            stopped_at = self._stopped_at
            if stopped_at is not None and time.monotonic() - stopped_at > self.settings.grace_s:
                await self._release(list(self._held.values()))
                continue
            try:
                await self._renew_held()
            except Exception:  # never let the renewer die: log and go on
                log.exception("renewing claims failed")

    # --- lifetime -------------------------------------------------------------------

    async def _pause(self, seconds: float, error: BaseException) -> None:
        """As ``Worker._pause``: once stopped, pauses are waited out, and past
        ``grace_s`` the worker gives up."""
        log.warning("the store did not answer (%s); trying again in %.2f s", error, seconds)
        if not self._stopping.is_set():
            with suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), seconds)
            return
        left = stopping_too_long(self._stopped_at, self.settings.grace_s)
        if left is None:
            raise _GiveUp
        await asyncio.sleep(min(seconds, left))

    @asynccontextmanager
    async def _serving(self) -> AsyncIterator[None]:
        if self._running:
            raise RuntimeError("this worker is already running")
        self._running = True
        self._stopping.clear()
        self._stopped_at = None
        renewer = asyncio.create_task(self._renewing(), name="a2sql-renew")
        try:
            yield
        finally:
            renewer.cancel()
            with suppress(asyncio.CancelledError):
                await renewer
            self._running = False

    @asynccontextmanager
    async def _scheduling(self) -> AsyncIterator[None]:
        """Append the schedules' slots in a task of their own while ``run()`` serves."""
        if not self.schedules:
            yield
            return
        task = asyncio.create_task(self._run_schedules(), name="a2sql-schedules")
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    async def _run_schedules(self) -> None:
        slots = Slots(self.schedules)
        while True:
            try:
                wait = await append_due_async(self.store, slots, slot_failed)
            except Exception:  # never let the schedules die: log and go on
                log.exception("appending scheduled events failed")
                wait = RETRY_S
            await asyncio.sleep(min(wait, MAX_SLEEP_S) + 0.001)

    @asynccontextmanager
    async def _signals(self) -> AsyncIterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT)

        def on_signal() -> None:
            # A second signal acts as it would without the worker.
            for each in signals:
                loop.remove_signal_handler(each)
            log.info("signal: stopping; running handlers may finish")
            self.stop()

        installed = []
        for each in signals:
            if signal.getsignal(each) == signal.SIG_IGN:  # ignored on purpose (nohup, a pool)
                continue
            try:
                loop.add_signal_handler(each, on_signal)
            except (NotImplementedError, RuntimeError):  # not on this loop or platform
                continue
            installed.append(each)
        try:
            yield
        finally:
            for each in installed:
                loop.remove_signal_handler(each)


async def _written(outcome: Outcome, connection: AsyncConnection) -> list[NewEvent]:
    """Run ``outcome.write`` (if any) on the completion's connection; its events."""
    if outcome.write is not None:
        result = outcome.write(connection)  # type: ignore[arg-type]
        if inspect.isawaitable(result):
            await result
    return list(outcome.events)
