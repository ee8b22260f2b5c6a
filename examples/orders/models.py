"""The application's own table: one row per paid order, written by the worker's handler."""

from sqlalchemy import Column, DateTime, MetaData, Numeric, String, Table

metadata = MetaData()

orders = Table(
    "orders",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("amount", Numeric(10, 2), nullable=False),
    Column("paid_at", DateTime(timezone=True), nullable=False),
)
