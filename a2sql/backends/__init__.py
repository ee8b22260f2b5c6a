"""The engines a2sql runs on, behind one seam: a ``Backend`` per engine
(a2sql.backends.base), found by ``backend_of`` (a2sql.backends.registry)."""

from a2sql.backends.registry import backend_named, backend_of, database_file, register, supported

__all__ = ["backend_named", "backend_of", "database_file", "register", "supported"]
