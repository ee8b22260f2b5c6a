"""An operator's web UI over a store, to mount in an ASGI app or run with ``a2sql ui``.

``app(store)`` is a Starlette application: an overview of the work, sessions by
state, each session's timeline (live), dead letters and blocked lanes, claims in
flight, and ``/metrics``. Read-only unless ``allow_actions=True``. Needs the
``ui`` extra: ``pip install '.[ui]' in a clone``.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as missing:  # pragma: no cover - said to whoever lacks the extra
    raise ImportError(
        f"a2sql.ui needs {missing.name}, which the ui extra installs: "
        "pip install '.[ui]' in a clone"
    ) from missing

from a2sql.ui.application import app

__all__ = ["app"]
