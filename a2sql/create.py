"""create_store: from a URL (or an engine) to a ready, schema-checked store."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import URL, Engine

from a2sql import migrate as migrations
from a2sql.clock import Clock, SystemClock, uuid7_id
from a2sql.config import build_engine, install_sqlite_hooks, is_sqlite_memory, resolve_url
from a2sql.dialects import dialect_for
from a2sql.errors import DRIVER_FAILURES, A2Error, from_driver_error, invalid
from a2sql.store import Store
from a2sql.validate import DEFAULT_MAX_JSON_CHARS, Limits


def create_store(
    url: str | URL | Engine | None = None,
    *,
    clock: Clock | None = None,
    ids: Callable[[], str] | None = None,
    migrate: bool | None = None,
    max_json_chars: int = DEFAULT_MAX_JSON_CHARS,
) -> Store:
    """Open a store (SPEC §2).

    ``url``: a SQLAlchemy URL or an ``Engine``; ``None`` means
    ``A2SQL_DATABASE_URL``, else ``sqlite:///.a2/dev.db``. ``clock`` gives every
    stored time; ``ids`` makes ids for events appended without one.
    ``migrate``: ``True`` upgrades the schema, ``False`` only checks it,
    ``None`` upgrades SQLite and checks other engines. ``max_json_chars``
    bounds the encoded size of a payload, state or presence value.
    """
    if migrate is not None and not isinstance(migrate, bool):
        raise invalid("migrate", "must be True, False or None")
    if (
        isinstance(max_json_chars, bool)
        or not isinstance(max_json_chars, int)
        or (max_json_chars < 1)
    ):
        raise invalid("max_json_chars", "must be a positive int")
    if isinstance(url, Engine):
        engine, owns_engine = url, False
        if engine.dialect.name == "sqlite":
            install_sqlite_hooks(engine)
        resolve_url(engine.url)  # rejects engines of other databases
    else:
        resolved = resolve_url(url)
        engine, owns_engine = build_engine(resolved), True
    try:
        dialect = dialect_for(engine)
        upgrade = engine.dialect.name == "sqlite" if migrate is None else migrate
        try:
            migrations.ensure_schema(engine, upgrade_allowed=upgrade)
        except A2Error:
            raise
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error
    except BaseException:
        if owns_engine:
            engine.dispose()
        raise
    return Store(
        engine,
        dialect,
        clock=clock or SystemClock(),
        ids=ids or uuid7_id,
        owns_engine=owns_engine,
        serialize=is_sqlite_memory(engine.url),
        limits=Limits(max_json_chars=max_json_chars),
    )
