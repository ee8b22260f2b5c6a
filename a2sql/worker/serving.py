"""One worker in this process, as ``a2sql worker`` runs it: the handler imported, a
store opened, a ``Worker`` (or an ``AsyncWorker`` for a coroutine handler) run until
idle or stopped; with ``--metrics-port``, its metrics and the store's served over HTTP
meanwhile."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, TypeAlias

from a2sql.core.errors import A2Error, ErrorCode
from a2sql.core.urls import listen_argument, shown_url
from a2sql.worker.schedules import Schedule, checked

if TYPE_CHECKING:
    from a2sql.api.store import Store
    from a2sql.metrics.recorder import WorkerMetrics

log = logging.getLogger("a2sql.worker")

#: Stops the running worker as ``Worker.stop`` does; callable from any thread.
StopWorker: TypeAlias = Callable[[], None]


def _imported(spec: str, what: str, example: str) -> Any:
    """``package.module:name`` (or ``module:object.attribute``), imported."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise A2Error(
            ErrorCode.INVALID_ARGUMENT,
            f"{what} {spec!r}: expected MODULE:{what.upper()}, e.g. {example}",
        )
    if "" not in sys.path:  # as `python -m` would: the working directory's modules
        sys.path.insert(0, "")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise A2Error(
            ErrorCode.INVALID_ARGUMENT, f"{what} {spec!r}: cannot import {module_name!r}: {error}"
        ) from error
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise A2Error(
                ErrorCode.INVALID_ARGUMENT,
                f"{what} {spec!r}: {module_name!r} has no {attribute!r}",
            )
        target = getattr(target, part)
    return target


def load_handler(spec: str) -> Any:
    """``package.module:function`` (or ``module:object.attribute``), imported."""
    target = _imported(spec, "handler", "app:handle")
    if not callable(target):
        raise A2Error(ErrorCode.INVALID_ARGUMENT, f"handler {spec!r} is not callable")
    return target


def load_schedules(specs: Sequence[str]) -> list[Schedule]:
    """Each ``package.module:name``, imported: a ``Schedule``, or a list of them."""
    found: list[Schedule] = []
    for spec in specs:
        target = _imported(spec, "schedule", "app:nightly")
        items = target if isinstance(target, list | tuple) else [target]
        for item in items:
            if not isinstance(item, Schedule):
                raise A2Error(
                    ErrorCode.INVALID_ARGUMENT,
                    f"schedule {spec!r} is a {type(item).__name__}, not an a2sql.Schedule",
                )
            found.append(item)
    return checked(found)


def configure_logging() -> None:
    """The command's log lines on stderr: time, process id, logger, level, message."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)


def serve(options: dict[str, Any], on_start: Callable[[StopWorker], None] | None = None) -> int:
    """Run the worker the command's options describe; 0 once it returns.

    ``on_start``, if given, is called with a ``StopWorker`` for the worker once it
    exists, before it claims anything."""
    handler = load_handler(options["handler"])
    settings = {
        "prefix": options["prefix"],
        "ttl_ms": options["ttl_ms"],
        "max_failures": options["max_failures"],
        "batch": options["batch"],
        "transactional": options["transactional"],
        "poll_interval": options["poll_interval"],
        "concurrency": options["concurrency"],
        "timeout_s": options["timeout_s"],
        "schedules": load_schedules(options.get("schedules", ())),
    }
    if inspect.iscoroutinefunction(handler):
        return asyncio.run(_serve_async(options, handler, settings, on_start))
    from a2sql.api.opening import create_store
    from a2sql.worker.threaded import Worker

    with (
        create_store(options["url"], listen=listen_argument(options["listen"])) as store,
        exposing(options, store) as metrics,
    ):
        worker = Worker(store, handler, metrics=metrics, **settings)
        if on_start is not None:
            on_start(worker.stop)
        log.info("worker %s serving %s", worker.holder, _shown(store))
        worker.run(until_idle=options["until_idle"])
    return 0


async def _serve_async(
    options: dict[str, Any],
    handler: Any,
    settings: dict[str, Any],
    on_start: Callable[[StopWorker], None] | None,
) -> int:
    from a2sql.api.opening import create_async_store
    from a2sql.worker.aio import AsyncWorker

    store = create_async_store(options["url"], listen=listen_argument(options["listen"]))
    try:
        await store.ensure_schema()
        with exposing(options, None) as metrics:
            worker = AsyncWorker(store, handler, metrics=metrics, **settings)
            if on_start is not None:
                loop = asyncio.get_running_loop()

                def stop() -> None:
                    # AsyncWorker.stop belongs on its loop; once the loop is closed
                    # there is nothing left to stop.
                    with suppress(RuntimeError):
                        loop.call_soon_threadsafe(worker.stop)

                on_start(stop)
            log.info("worker %s serving %s", worker.holder, _shown(store))
            await worker.run(until_idle=options["until_idle"])
    finally:
        await store.close()
    return 0


@contextmanager
def exposing(options: dict[str, Any], store: Store | None) -> Iterator[WorkerMetrics | None]:
    """With ``--metrics-port``: the worker's recorder, its metrics and the store's gauges
    served over HTTP while the block runs; ``None`` without.

    A pool's child ``k`` (``options["child"]``) serves on ``port + k - 1``, and only
    the first serves the store's gauges, so the store is read once per interval
    however many processes run. ``store``: the worker's, or ``None`` for an
    ``AsyncWorker``'s (the gauges read a synchronous store of their own then)."""
    port = options.get("metrics_port")
    if port is None:
        yield None
        return
    from prometheus_client import CollectorRegistry, ProcessCollector

    from a2sql.api.opening import create_store
    from a2sql.metrics.gauges import OverviewReader
    from a2sql.metrics.prometheus import PrometheusMetrics, StoreCollector, serve_prometheus

    child = options.get("child") or 1
    port += child - 1
    host = options.get("metrics_host") or "127.0.0.1"
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    ProcessCollector(registry=registry)  # the process's memory, CPU and open files
    own = None
    if child == 1:
        if store is None:
            store = own = create_store(options["url"], listen=False, migrate=False)
        registry.register(StoreCollector(OverviewReader(store, prefixes=[options["prefix"]])))
    try:
        try:
            server = serve_prometheus(registry, port, host)
        except OSError as error:
            raise A2Error(
                ErrorCode.INVALID_ARGUMENT,
                f"--metrics-port: cannot listen on {host}:{port}: {error.strerror or error}",
            ) from error
        log.info("metrics on http://%s:%d/metrics", host, server.port)
        try:
            yield metrics
        finally:
            server.stop()
    finally:
        if own is not None:
            own.close()


def _shown(store: Any) -> str:
    return shown_url(store.engine.url)
