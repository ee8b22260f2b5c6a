"""``a2sql worker MODULE:HANDLER``: a pool worker from the command line (its options
are in ``a2sql.cli.worker``).

``--processes 1`` (the default) runs the worker in this process
(``a2sql.worker.serving``); ``--processes N`` runs N worker processes, each with its
own connections and its own handler import, under a parent that restarts a child that
dies and stops them all on SIGTERM or SIGINT (``a2sql.worker.pool``). A coroutine
handler runs on an ``AsyncWorker``, any other callable on a ``Worker``. SIGTERM or
SIGINT stops claiming, lets running handlers finish within the grace period and
releases what is left; a second one stops at once. ``--metrics-port`` serves the
worker's metrics and the store's gauges over HTTP (``a2sql.worker.serving.exposing``).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from a2sql.core.errors import A2Error, ErrorCode
from a2sql.worker.pool import Pool
from a2sql.worker.serving import configure_logging, load_handler, load_schedules, serve

METRICS_HINT = (
    "--metrics-port needs a2sql's metrics extra (prometheus-client):"
    " pip install '.[metrics]' in a clone"
)


def run(options: dict[str, Any]) -> int:
    """The ``worker`` command, with its options by name (``a2sql.cli.worker``)."""
    load_handler(options["handler"])  # fail here, once, rather than in every process
    load_schedules(options.get("schedules", ()))
    if options.get("metrics_port") is not None and not importlib.util.find_spec(
        "prometheus_client"
    ):
        raise A2Error(ErrorCode.INVALID_ARGUMENT, METRICS_HINT)
    configure_logging()
    if options["processes"] == 1:
        return serve(options)
    return Pool(options, options["processes"]).run()
