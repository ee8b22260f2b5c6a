"""The ``a2sql`` command: look into a store, repair it, signal or cancel its sessions, copy
it, migrate it, work it."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from a2sql.cli.common import URL_HELP, CommandFailed
from a2sql.cli.control import cancel, signal
from a2sql.cli.copying import copy
from a2sql.cli.demo import demo
from a2sql.cli.reading import dead_letters, events, session, sessions, status, tail
from a2sql.cli.repairs import delete, prune, retry, skip
from a2sql.cli.schema import migrate, stamp
from a2sql.cli.ui import ui
from a2sql.cli.worker import worker
from a2sql.core.errors import DRIVER_FAILURES, A2Error, from_driver_error
from a2sql.core.escaping import printable


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    invoke_without_command=True,
)
@click.version_option(package_name="a2sql")
@click.option("--url", metavar="URL", default=None, help=URL_HELP)
@click.pass_context
def cli(ctx: click.Context, url: str | None) -> None:
    """a2sql: durable, multi-worker event sessions on SQLite and PostgreSQL.

    Every command takes --url, before or after its name (default:
    $A2SQL_DATABASE_URL, else the embedded sqlite:///.a2/dev.db); reading
    commands take --json for scripts. Exit status: 0 done; 1 nothing to act
    on (no such session or event, nothing changed, schema behind); 2 could
    not run; 3 `migrate --check` found no database.
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


for command in (
    demo,
    status,
    sessions,
    session,
    events,
    tail,
    dead_letters,
    retry,
    skip,
    signal,
    cancel,
    delete,
    prune,
    copy,
    migrate,
    stamp,
    worker,
    ui,
):
    cli.add_command(command)


def _fail(message: str) -> None:
    # A message may quote stored text (a session id, an event's error): escaped.
    print(f"a2sql: {printable(message)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; errors are one line on stderr and a non-zero exit status."""
    try:
        try:
            code = cli.main(
                args=list(argv) if argv is not None else None,
                prog_name="a2sql",
                standalone_mode=False,
            )
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error
    except click.exceptions.Abort:
        _fail("aborted")
        return 130
    except click.UsageError as error:
        hint = f" (see `{error.ctx.command_path} --help`)" if error.ctx is not None else ""
        _fail(f"{error.format_message()}{hint}")
        return error.exit_code
    except click.ClickException as error:
        _fail(error.format_message())
        return error.exit_code
    except CommandFailed as error:
        _fail(str(error))
        return error.code
    except A2Error as error:
        _fail(str(error))
        return 2
    except KeyboardInterrupt:
        return 130
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0
    return code if isinstance(code, int) else 0
