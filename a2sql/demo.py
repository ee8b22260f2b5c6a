"""A short worker loop on a real store, printed step by step (`a2sql demo`)."""

from __future__ import annotations

import uuid

from a2sql import migrate as migrations
from a2sql.create import create_store
from a2sql.records import NewEvent


def run_demo(url: str | None = None) -> None:
    with create_store(url) as store:
        shown = store.engine.url.render_as_string(hide_password=True)
        print(f"store: {shown} (schema revision {migrations.database_revision(store.engine)})")
        session = f"demo-{uuid.uuid4().hex[:8]}"
        appended = store.append(
            session,
            [
                NewEvent("order.placed", {"order": 1, "items": ["tea", "cake"]}, lane="order-1"),
                NewEvent("order.paid", {"order": 1, "amount": 7.5}, lane="order-1"),
            ],
        )
        print(f"appended {[e.index for e in appended.events]} to {session}")
        while True:
            claim = store.claim_available(session, holder="demo-worker", ttl_ms=30_000)
            if claim.outcome != "claimed":
                print(f"claim: {claim.outcome}")
                break
            for event in claim.events:
                print(f"claimed #{event.index} {event.type} (attempt {event.attempt_count})")
                done = store.complete_attempt(
                    session,
                    index=event.index,
                    attempt=event.attempt_count,
                    events=[
                        NewEvent(
                            f"{event.type}.handled",
                            {"handled": event.index},
                            id=f"{event.id}:handled",
                            settled=True,
                        )
                    ],
                )
                print(f"  {done.outcome}: appended #{done.events[0].index} {done.events[0].type}")
        state = store.read_state(session, "demo")
        print(f"{len(state.events)} events in {session}:")
        for each in state.events:
            print(f"  #{each.index} {each.type} {each.payload}")
