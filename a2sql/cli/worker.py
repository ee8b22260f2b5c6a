"""``a2sql worker``: its options; the serving is ``a2sql.worker.command``, loaded when run."""

from __future__ import annotations

import math
from typing import Any

import click

from a2sql.cli.common import listen_option, url_option
from a2sql.core.arguments import MAX_TTL_MS
from a2sql.worker.policy import MAX_CONCURRENCY, MAX_SECONDS


def _not_nan(_ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    # FloatRange lets nan through: every comparison with it is false.
    if value is not None and math.isnan(value):
        raise click.BadParameter(f"nan is not in the range 0<x<={MAX_SECONDS}.", param=param)
    return value


@click.command()
@click.argument("handler", metavar="MODULE:HANDLER")
@url_option
@listen_option
@click.option("--prefix", default="", help="Serve only sessions whose id starts with this.")
@click.option(
    "--processes",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Worker processes: 1 runs the worker in this one, more run supervised children.",
)
@click.option(
    "--concurrency",
    default=1,
    show_default=True,
    type=click.IntRange(1, MAX_CONCURRENCY),
    help="Handlers running at once in each process (threads, or tasks for a coroutine handler).",
)
@click.option(
    "--timeout",
    "timeout_s",
    default=None,
    type=click.FloatRange(0, MAX_SECONDS, min_open=True),
    callback=_not_nan,
    help="Fail an attempt whose handler runs longer than this many seconds (default: no limit).",
)
@click.option(
    "--ttl-ms",
    default=30_000,
    show_default=True,
    type=click.IntRange(1, MAX_TTL_MS),
    help="Claim lease, milliseconds.",
)
@click.option(
    "--max-failures", default=5, show_default=True, type=int, help="Failures before a dead letter."
)
@click.option("--batch", default=16, show_default=True, type=int, help="Events per claim.")
@click.option(
    "--transactional",
    is_flag=True,
    help="Give the handler the completion's transaction (attempt.connection).",
)
@click.option("--until-idle", is_flag=True, help="Exit once no work is claimable now or later.")
@click.option(
    "--schedule",
    "schedules",
    multiple=True,
    metavar="MODULE:NAME",
    help="An a2sql.Schedule (or a list of them) whose events this worker appends as their"
    " slots come, e.g. app:nightly; repeatable. Every worker may run it: each slot's"
    " event is appended once.",
)
@click.option(
    "--poll-interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, MAX_SECONDS, min_open=True),
    callback=_not_nan,
    help=f"Idle poll, seconds (at most {MAX_SECONDS}).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    metavar="PORT",
    help="Serve Prometheus metrics (the worker's, and the store's gauges) over HTTP on"
    " this port, at /metrics; with --processes N, child k on PORT+k-1, the store's gauges"
    " on PORT only. Needs the metrics extra.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="The address --metrics-port listens on (0.0.0.0: every interface).",
)
def worker(**options: Any) -> None:
    """Run a pool worker with a handler.

    Claims events across sessions and runs HANDLER on each.

    HANDLER is a function (or coroutine function) imported from the working
    directory, e.g. app:handle. SIGTERM or Ctrl-C lets running handlers
    finish, then releases the claims left; a second one stops at once.

    With --processes N, a child that dies is restarted (after 1 s, doubling
    to 30 s); one that dies within 10 s of its start 3 times in a row stops
    the others and the pool exits 1. If the parent dies, even by SIGKILL,
    each child stops claiming and exits within 3 s.
    """
    from a2sql.worker.command import run

    port = options["metrics_port"]
    if port is not None and port + options["processes"] - 1 > 65535:
        raise click.BadParameter(
            f"{port} leaves no port for each of {options['processes']} processes",
            param_hint="--metrics-port",
        )
    code = run(options)
    if code:
        raise SystemExit(code)
