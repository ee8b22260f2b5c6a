"""``a2sql worker MODULE:HANDLER``: a pool worker from the command line (its options
are in ``a2sql.cli.worker``).

``--concurrency N`` runs N worker processes (each with its own connections
and its own handler import); 1 runs the worker in this process. A coroutine
handler runs on an ``AsyncWorker``, any other callable on a ``Worker``.
SIGTERM or SIGINT stops claiming, lets running handlers finish within the
grace period and releases what is left; a second one stops at once.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import multiprocessing
import os
import signal
import sys
from types import FrameType
from typing import Any

from a2sql.cli.common import listen_argument
from a2sql.errors import A2Error, ErrorCode
from a2sql.urls import shown_url


def load_handler(spec: str) -> Any:
    """``package.module:function`` (or ``module:object.attribute``), imported."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise A2Error(
            ErrorCode.INVALID_ARGUMENT,
            f"handler {spec!r}: expected MODULE:HANDLER, e.g. app:handle",
        )
    if "" not in sys.path:  # as `python -m` would: the working directory's modules
        sys.path.insert(0, "")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise A2Error(
            ErrorCode.INVALID_ARGUMENT, f"handler {spec!r}: cannot import {module_name!r}: {error}"
        ) from error
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise A2Error(
                ErrorCode.INVALID_ARGUMENT,
                f"handler {spec!r}: {module_name!r} has no {attribute!r}",
            )
        target = getattr(target, part)
    if not callable(target):
        raise A2Error(ErrorCode.INVALID_ARGUMENT, f"handler {spec!r} is not callable")
    return target


def run(options: dict[str, Any]) -> int:
    """The ``worker`` command, with its options by name (``a2sql.cli.worker``)."""
    if options["concurrency"] < 1:
        raise A2Error(ErrorCode.INVALID_ARGUMENT, "--concurrency: must be at least 1")
    load_handler(options["handler"])  # fail here, once, rather than in every process
    if options["concurrency"] == 1:
        return _serve(options)
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_child, args=(options,), name=f"a2sql-worker-{n}")
        for n in range(options["concurrency"])
    ]
    for process in processes:
        process.start()

    def forward(signum: int, _frame: FrameType | None) -> None:
        for process in processes:
            if process.pid is not None and process.is_alive():
                process.terminate()  # SIGTERM: each stops gracefully

    previous = {each: signal.signal(each, forward) for each in (signal.SIGTERM, signal.SIGINT)}
    try:
        for process in processes:
            process.join()
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)
    return max((process.exitcode or 0) for process in processes)


def _child(options: dict[str, Any]) -> None:
    # Out of the terminal's process group: Ctrl-C reaches the parent alone, which
    # passes one SIGTERM on; a child hit by both would take the second as "now".
    os.setpgrp()
    sys.exit(_serve(options))


def _serve(options: dict[str, Any]) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    handler = load_handler(options["handler"])
    settings = {
        "prefix": options["prefix"],
        "ttl_ms": options["ttl_ms"],
        "max_failures": options["max_failures"],
        "batch": options["batch"],
        "transactional": options["transactional"],
        "poll_interval": options["poll_interval"],
    }
    if inspect.iscoroutinefunction(handler):
        return asyncio.run(_serve_async(options, handler, settings))
    from a2sql.create import create_store
    from a2sql.worker.threaded import Worker

    with create_store(options["url"], listen=listen_argument(options["listen"])) as store:
        worker = Worker(store, handler, **settings)
        logging.getLogger("a2sql.worker").info("worker %s serving %s", worker.holder, _shown(store))
        worker.run(until_idle=options["until_idle"])
    return 0


async def _serve_async(options: dict[str, Any], handler: Any, settings: dict[str, Any]) -> int:
    from a2sql.create import create_async_store
    from a2sql.worker.aio import AsyncWorker

    store = create_async_store(options["url"], listen=listen_argument(options["listen"]))
    try:
        await store.ensure_schema()
        worker = AsyncWorker(store, handler, **settings)
        logging.getLogger("a2sql.worker").info("worker %s serving %s", worker.holder, _shown(store))
        await worker.run(until_idle=options["until_idle"])
    finally:
        await store.close()
    return 0


def _shown(store: Any) -> str:
    return shown_url(store.engine.url)
