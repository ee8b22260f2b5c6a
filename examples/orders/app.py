"""The example application: orders paid through a2sql, recorded exactly once.

Each order is a session; its events are placed, then paid, in one lane. The
worker runs ``handle`` on each event in the transaction its completion
commits in (``transactional=True``), so the row written to ``orders`` and the
completion are durable together or not at all: a crash, a lost lease or a
retried completion never records a payment twice.

    ORDERS_DATABASE_URL=sqlite:///orders.db python app.py
"""

from __future__ import annotations

import os

from models import orders
from sqlalchemy import insert, select

import a2sql
from a2sql import NewEvent
from a2sql.worker import Attempt, Worker

URL = os.environ.get("ORDERS_DATABASE_URL", "sqlite:///orders.db")


def handle(attempt: Attempt) -> list[NewEvent]:
    event = attempt.event
    if event.type == "order.paid":
        assert attempt.connection is not None  # transactional=True
        attempt.connection.execute(
            insert(orders).values(
                id=event.session_id, amount=event.payload["amount"], paid_at=event.created_at
            )
        )
    # A settled record of what was done: not more work.
    return [NewEvent(f"{event.type}.handled", {"by": attempt.number}, settled=True)]


def main() -> None:
    # The schema is Alembic's business here (`alembic upgrade head`): only check it.
    with a2sql.create_store(URL, migrate=False) as store:
        for n, amount in ((1, 12.5), (2, 7.0), (3, 30.25)):
            order = f"order-{n}"
            # Ids chosen once: running the app again replays these appends.
            store.append(
                order,
                [
                    NewEvent("order.placed", {"items": n}, id=f"{order}/placed", lane="order"),
                    NewEvent("order.paid", {"amount": amount}, id=f"{order}/paid", lane="order"),
                ],
            )
        Worker(store, handle, prefix="order-", transactional=True).run(until_idle=True)
        with store.engine.connect() as connection:
            for row in connection.execute(select(orders).order_by(orders.c.id)):
                print(f"{row.id} paid {row.amount}")


if __name__ == "__main__":
    main()
