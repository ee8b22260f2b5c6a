"""``a2sql ui``: the operator's web UI (a2sql.ui) served on this machine."""

from __future__ import annotations

import logging

import click

from a2sql.cli.common import CANNOT_RUN, CommandFailed, listen_option, opened, shown, url_option

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command()
@url_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Anything but this machine's loopback makes the UI "
    "reachable from the network: put it behind your own authentication first.",
)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Offer retry, skip, signal, cancel and delete on the pages (each confirmed and "
    "logged). Without it the UI is read-only and every action answers 403.",
)
@listen_option
def ui(url: str | None, host: str, port: int, allow_actions: bool, listen: str | None) -> None:
    """Serve the web UI: overview, sessions, timelines (live), dead letters, in flight,
    and /metrics. Needs the ui extra (pip install '.[ui]' in a clone); stop it with Ctrl-C."""
    try:
        import uvicorn

        import a2sql.ui
    except ImportError as missing:
        raise CommandFailed(
            f"a2sql ui needs the ui extra ({missing.name} is missing): "
            "pip install '.[ui]' in a clone",
            CANNOT_RUN,
        ) from None
    _log_actions()
    with opened(url, listen) as store:
        application = a2sql.ui.app(store, allow_actions=allow_actions)
        where = f"[{host}]" if ":" in host else host
        mode = "actions allowed" if allow_actions else "read-only"
        click.echo(f"a2sql ui on {shown(url)}: http://{where}:{port}/ ({mode})", err=True)
        if host not in LOOPBACK:
            click.echo(
                f"a2sql ui: listening on {host}, not only this machine: anyone who can reach "
                "it can read every session" + (" and act on them" if allow_actions else ""),
                err=True,
            )
        uvicorn.run(application, host=host, port=port, log_level="warning")


def _log_actions() -> None:
    """The actions done and refused (the ``a2sql.ui`` logger, at INFO) on stderr, one line
    each with its time; uvicorn's own log stays at warnings."""
    log = logging.getLogger("a2sql.ui")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s a2sql ui: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)
