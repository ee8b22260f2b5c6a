"""``a2sql demo``: one job on a real store, worked by the reference worker, shown live.

The job is an order in two lanes. Lane ``order``: the order is placed, the
card is charged (the payment network times out once, so the charge is
retried after a backoff) and the parcel shipped. Lane ``report``: a report
whose template is missing fails until it is dead-lettered, and the e-mail
behind it in its lane stays blocked. Every handler's reply is appended as a
settled event, the state is folded by a reducer and kept as a snapshot, and
the demo ends with the commands that inspect what it did.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from a2sql import migrate as migrations
from a2sql.api.store import Store
from a2sql.cli.common import shown, url_option
from a2sql.cli.output import Output
from a2sql.cli.states import STATE_STYLES, event_state
from a2sql.core.escaping import command_line
from a2sql.core.records import Event, NewEvent

if TYPE_CHECKING:  # the worker is imported when the demo runs, not with every command
    from a2sql.worker import Attempt

JOB = [
    NewEvent("order.placed", {"order": 1, "items": ["tea", "cake"]}, lane="order"),
    NewEvent("payment.charge", {"order": 1, "amount": 7.5}, lane="order"),
    NewEvent("parcel.ship", {"order": 1, "carrier": "post"}, lane="order"),
    NewEvent("report.build", {"template": "weekly"}, lane="report"),
    NewEvent("report.email", {"to": "team@example.com"}, lane="report"),
]
REDUCER = "order-summary"
MAX_FAILURES = 2
BACKOFF_MS = 400  # the charge's retry waits this long: visible, and over quickly


def handle(attempt: Attempt) -> list[NewEvent]:
    """The demo's handler: reply to each event, except where the story says otherwise."""
    event = attempt.event
    if event.type == "payment.charge" and attempt.number == 1:
        raise TimeoutError("payment network timed out")
    if event.type == "report.build":
        template = event.payload.get("template") if isinstance(event.payload, dict) else None
        raise LookupError(f"no report template {template!r}")
    return [NewEvent(f"{event.type}.done", {"attempt": attempt.number}, settled=True)]


def summarize(state: dict[str, Any], event: Event) -> dict[str, Any]:
    """The reducer: what happened to the order, from its events."""
    done = {**state, "events": state["events"] + 1}
    if event.type.endswith(".done"):
        done["done"] = [*state["done"], event.type.removesuffix(".done")]
    return done


def _watch(out: Output, store: Store, session_id: str, finished: threading.Event) -> None:
    """Print each event's state whenever it changes, until the worker is done."""
    start = time.monotonic()
    seen: dict[int, tuple[object, ...]] = {}
    while True:
        last_round = finished.is_set()
        page = store.inspect.read_events(session_id, limit=1000)
        now = store.clock.now()
        for event in page.events:
            state, detail = event_state(event, page, now)
            key = (state, event.attempt_count, event.failure_count)
            if seen.get(event.index) == key:
                continue
            seen[event.index] = key
            lane = f" [{event.lane}]" if event.lane else ""
            text = f"{time.monotonic() - start:6.2f}s  #{event.index:<2} {event.type}{lane}"
            out.line(f"{text:<46} {state:<13} {detail}".rstrip(), style=STATE_STYLES[state])
        if last_round:
            return
        finished.wait(0.05)


def run_demo(url: str | None) -> None:
    """The ``demo`` command's work."""
    from a2sql.api.opening import create_store
    from a2sql.api.reducers import reduce
    from a2sql.worker import Backoff, Worker

    out = Output()
    # The worker logs each outcome; here the timeline tells the story instead.
    logging.getLogger("a2sql").addHandler(logging.NullHandler())
    logging.getLogger("a2sql").propagate = False
    with create_store(url) as store:
        where = shown(url)
        out.line(f"store: {where} (schema {migrations.database_revision(store.engine)})")
        session_id = f"demo-{uuid.uuid4().hex[:8]}"
        store.append(session_id, JOB)
        out.line(f"session {session_id}: {len(JOB)} events in lanes 'order' and 'report'")
        out.line("")
        worker = Worker(
            store,
            handle,
            prefix=session_id,
            holder="demo-worker",
            max_failures=MAX_FAILURES,
            backoff=Backoff(base_ms=BACKOFF_MS, factor=1.0, jitter=0.0),
            poll_interval=0.2,
        )
        finished = threading.Event()
        watcher = threading.Thread(target=_watch, args=(out, store, session_id, finished))
        watcher.start()
        try:
            worker.run(until_idle=True)
        finally:
            finished.set()
            watcher.join()
        initial: dict[str, Any] = {"events": 0, "done": []}
        state = reduce(store, session_id, REDUCER, summarize, initial, snapshot_every=1)
        [snapshot] = store.inspect.list_snapshots(session_id)
        out.line("")
        out.line(f"state ({REDUCER}, snapshot at #{snapshot.index}): {state}")
        dead = store.inspect.list_dead_letters(prefix=session_id).events
        flag = () if url is None else ("--url", where)
        a2sql = _command_name()

        def suggest(*words: object) -> None:
            out.line(f"  {command_line(*a2sql, *words, *flag)}")

        out.line("")
        out.line("look into it:")
        suggest("session", session_id)
        suggest("events", session_id)
        suggest("dead-letters", "--prefix", session_id)
        for event in dead:
            suggest("retry", session_id, event.index)
            suggest("skip", session_id, event.index, "--reason", "no template")


def _command_name() -> tuple[str, ...]:
    """How to run ``a2sql`` from here, as words: by name when it is on PATH, else by its
    path (a virtualenv's, not activated)."""
    if shutil.which("a2sql"):
        return ("a2sql",)
    program = Path(sys.argv[0])
    if program.name == "a2sql" and program.exists():
        relative = os.path.relpath(program)
        return (relative if relative.startswith(".") else f"./{relative}",)
    return (sys.executable, "-m", "a2sql.cli")


@click.command()
@url_option
def demo(url: str | None) -> None:
    """Run a short job with the reference worker, live.

    On the embedded store by default (.a2/dev.db, created on first use); a new
    session each time.
    """
    run_demo(url)
