"""AsyncWorker: serves sessions with a coroutine handler, on an ``AsyncStore``.

The same decisions as ``Worker`` (a2sql.worker.policy), made with asyncio:
renewals run in a task, idle waits on an ``asyncio.Event``.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection

from a2sql.aio import AsyncStore
from a2sql.errors import A2Error
from a2sql.records import ClaimRef, NewEvent, StateRead, StoredEvent
from a2sql.worker.policy import (
    Backoff,
    Outcome,
    Pacing,
    SessionOutcome,
    claims_by_session,
    failure_text,
    idle_wait,
    is_transient,
    log,
    log_dead_letter,
    log_outcome,
    own_lost_claims,
    retry_delay_ms,
    returned_events,
    settings,
    settled,
    vanished,
)


@dataclass(eq=False)
class AsyncAttempt:
    """One attempt at one event, as a coroutine handler receives it (see ``Attempt``)."""

    event: StoredEvent
    number: int
    store: AsyncStore
    connection: AsyncConnection | None = None
    _lost: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def session_id(self) -> str:
        return self.event.session_id

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    async def read_state(self, reducer_name: str) -> StateRead:
        """The session's state for ``reducer_name``, in the handler's transaction if any."""
        target = self.store if self.connection is None else self.store.using(self.connection)
        return await target.read_state(self.session_id, reducer_name)


AsyncHandler = Callable[[AsyncAttempt], Awaitable[Sequence[NewEvent] | None]]


class _HandlerFailed(Exception):
    def __init__(self, error: Exception) -> None:
        self.error = error


class _Dropped(Exception):
    """The completion was superseded: roll the handler's writes back."""


class AsyncWorker:
    """``Worker`` for asyncio: ``await worker.run()``, coroutine handlers, an ``AsyncStore``.

    Handlers run one at a time in the worker's task; run several workers
    (tasks) for more at once. Everything else is as ``Worker``.
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
    ) -> None:
        self.store = store
        self.handler = handler
        self.settings = settings(
            prefix=prefix,
            holder=holder,
            ttl_ms=ttl_ms,
            max_failures=max_failures,
            batch=batch,
            poll_interval=poll_interval,
            grace_s=grace_s,
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

    @property
    def holder(self) -> str:
        """The name this worker claims under."""
        return self.settings.holder

    # --- serving ----------------------------------------------------------------

    async def run_session(self, session_id: str) -> SessionOutcome:
        """Serve one session until it is ``settled``, ``idle`` or ``stopped``."""
        s = self.settings
        async with self._serving():
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
            async with self._serving(), self._signals():
                pacing = Pacing()
                while not self._stopping.is_set():
                    self._wake.clear()
                    try:
                        dispatch = await self.store.claim_next(
                            holder=s.holder, ttl_ms=s.ttl_ms, limit=s.batch, prefix=s.prefix
                        )
                    except A2Error as error:
                        if not is_transient(error):
                            raise
                        await self._pause(pacing.next(), error)
                        continue
                    pacing.reset()
                    if dispatch.outcome == "claimed" and dispatch.session_id is not None:
                        await self._serve(dispatch.session_id, dispatch.events)
                        continue
                    if until_idle and dispatch.retry_at is None:
                        return
                    wait = idle_wait(s.poll_interval, dispatch.retry_at, self.store.clock.now())
                    with suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait)
        finally:
            unsubscribe()

    def stop(self) -> None:
        """As ``Worker.stop``; call it from the worker's event loop (or a signal)."""
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        self._stopping.set()
        self._wake.set()

    # --- one batch of claimed events ---------------------------------------------

    async def _serve(self, session_id: str, events: list[StoredEvent]) -> None:
        attempts = [AsyncAttempt(event, event.attempt_count, self.store) for event in events]
        for attempt in attempts:
            self._held[(session_id, attempt.event.index)] = attempt
        try:
            for attempt in attempts:
                if self._stopping.is_set():
                    break
                started = time.monotonic()
                outcome = "superseded" if attempt.lost else await self._handle(attempt)
                self._held.pop((session_id, attempt.event.index), None)
                self.outcomes[outcome] += 1
                log_outcome(
                    session_id, attempt.event, attempt.number, outcome, time.monotonic() - started
                )
        finally:
            left = [a for a in attempts if (session_id, a.event.index) in self._held]
            if left:
                # Shielded: a cancelled worker still hands its claims back.
                await asyncio.shield(self._release(left))

    async def _handle(self, attempt: AsyncAttempt) -> Outcome:
        if self.transactional:
            return await self._handle_in_transaction(attempt)
        try:
            returned = await self.handler(attempt)
            events = returned_events(returned, attempt.event, attempt.number)
        except Exception as error:
            return await self._fail(attempt, error)
        if attempt.lost:
            return "superseded"
        return await self._complete(attempt, events)

    async def _complete(self, attempt: AsyncAttempt, events: list[NewEvent]) -> Outcome:
        event = attempt.event
        pacing = Pacing()
        while True:
            try:
                result = await self.store.complete_attempt(
                    event.session_id, index=event.index, attempt=attempt.number, events=events
                )
            except A2Error as error:
                if is_transient(error):
                    await self._pause(pacing.next(), error)
                    continue
                return await self._fail(attempt, error)
            return result.outcome

    async def _handle_in_transaction(self, attempt: AsyncAttempt) -> Outcome:
        event = attempt.event
        pacing = Pacing()
        while True:
            try:
                async with self.store.begin() as connection:
                    attempt.connection = connection
                    try:
                        returned = await self.handler(attempt)
                        events = returned_events(returned, event, attempt.number)
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
                        return await self._fail(attempt, error)
                    raise
                found = await self._committed(attempt)
                if found is not None:
                    return found
                await self._pause(pacing.next(), error)
            finally:
                attempt.connection = None

    async def _committed(self, attempt: AsyncAttempt) -> Outcome | None:
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

    async def _fail(self, attempt: AsyncAttempt, error: Exception) -> Outcome:
        event = attempt.event
        s = self.settings
        delay = retry_delay_ms(self.backoff, event, s.max_failures)
        text = failure_text(error)
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
            if result.outcome == "dead_lettered":
                log_dead_letter(event, result.failure_count, text)
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
            for index in result.released:
                self.outcomes["released"] += 1
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
            for attempt in attempts:
                still_held = self._held.get((session_id, attempt.event.index)) is attempt
                if attempt.event.index not in renewed and still_held:
                    attempt._lost.set()

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
        log.warning("the store did not answer (%s); trying again in %.2f s", error, seconds)
        with suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

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
