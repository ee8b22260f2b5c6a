"""The ``a2sql`` command: schema migrations, a pool worker and a demo."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from a2sql import migrate as migrations
from a2sql.config import ENV_URL, build_engine, resolve_url
from a2sql.errors import DRIVER_FAILURES, A2Error, from_driver_error
from a2sql.worker import command as worker_command


def _migrate(args: argparse.Namespace) -> int:
    url = resolve_url(args.url)
    shown = url.render_as_string(hide_password=True)
    engine = build_engine(url)
    try:
        head = migrations.head_revision()
        if args.check:
            found = migrations.database_revision(engine)
            print(f"database: {shown}")
            print(f"revision: {found or 'none'} (a2sql needs {head})")
            if found == head:
                print("up to date")
                return 0
            print(
                "behind: run `a2sql migrate` to upgrade"
                if found is None or found in migrations.known_revisions()
                else "unknown revision: newer than this a2sql?"
            )
            return 1
        before = migrations.database_revision(engine)
        after = migrations.move_to(engine, args.revision)
        if before == after:
            print(f"{shown}: already at {after}")
        else:
            print(f"{shown}: {before or 'empty'} -> {after}")
        return 0
    finally:
        engine.dispose()


def _demo(args: argparse.Namespace) -> int:
    from a2sql.demo import run_demo

    run_demo(args.url)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="a2sql", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    url_help = f"database URL (default: ${ENV_URL}, else sqlite:///.a2/dev.db)"

    migrate = commands.add_parser("migrate", help="upgrade the database schema")
    migrate.add_argument("--url", help=url_help)
    migrate.add_argument("--revision", default="head", help="revision to move to (default: head)")
    migrate.add_argument(
        "--check", action="store_true", help="only report; exit 1 if not at the newest revision"
    )
    migrate.set_defaults(run=_migrate)

    worker = commands.add_parser(
        "worker", help="run a pool worker: claim events across sessions and run a handler"
    )
    worker_command.add_arguments(worker, url_help)
    worker.set_defaults(run=worker_command.run)

    demo = commands.add_parser("demo", help="run a worker loop on a store and print each step")
    demo.add_argument("--url", help=url_help)
    demo.set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        try:
            return int(args.run(args))
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error
    except A2Error as error:
        print(f"a2sql: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
