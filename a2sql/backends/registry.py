"""Which backend runs an engine: the registry, keyed by SQLAlchemy's dialect name.

a2sql's own backends (SQLite, PostgreSQL) are loaded at the first lookup, not
at import: the modules they build their statements from import this package
(its column types) themselves.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL
from sqlalchemy.engine import Dialect

from a2sql.core.errors import invalid

if TYPE_CHECKING:
    from a2sql.backends.base import Backend

# Modules of the backends a2sql ships; each registers its backend when imported.
BUILT_IN = ("a2sql.backends.sqlite", "a2sql.backends.postgresql")

_registered: dict[str, Backend] = {}
_loaded = False


def register(backend: Backend) -> Backend:
    """Make ``backend`` the one for engines of its ``name``."""
    _registered[backend.name] = backend
    return backend


def _all() -> dict[str, Backend]:
    global _loaded
    if not _loaded:
        for module in BUILT_IN:
            importlib.import_module(module)
        _loaded = True
    return _registered


def supported() -> str:
    """The engines a2sql runs on, for a message: ``sqlite and postgresql``."""
    # a2sql's own first, in BUILT_IN's order, then others as registered.
    order = {module: place for place, module in enumerate(BUILT_IN)}
    backends = sorted(_all().values(), key=lambda b: order.get(type(b).__module__, len(order)))
    names = [backend.name for backend in backends]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def backend_named(name: str, *, argument: str = "url", shown: str | None = None) -> Backend:
    """The backend of SQLAlchemy's dialect ``name``; ``INVALID_ARGUMENT`` naming
    ``argument`` (and ``shown``, what it was) for an engine a2sql does not run on."""
    backend = _registered.get(name) or _all().get(name)
    if backend is None:
        raise invalid(argument, f"a2sql supports {supported()}, not {shown or name!r}")
    return backend


def backend_of(bind: Any, *, argument: str = "url") -> Backend:
    """The backend of a URL, an engine, a connection (sync or asyncio) or a SQLAlchemy
    dialect."""
    if isinstance(bind, URL):
        return backend_named(bind.get_backend_name(), argument=argument, shown=bind.drivername)
    dialect: Dialect = bind if isinstance(bind, Dialect) else bind.dialect
    backend = _registered.get(dialect.name)
    if backend is not None:
        return backend
    return backend_named(dialect.name, argument=argument, shown=f"{dialect.name}+{dialect.driver}")


def database_file(url: URL) -> Path | None:
    """The file ``url``'s database lives in, for an engine whose databases are files."""
    return backend_of(url).database_file(url)
