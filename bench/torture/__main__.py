"""``python -m bench.torture``: run a torture scenario, print its figures, exit 1 on anomalies.

Examples::

    python -m bench.torture --engine sqlite --workers 4 --duration 120 --seed 7 --kill-every 3
    python -m bench.torture --engine postgres --workers 8 --duration 120 --seed 7 \\
        --kill-every 3 --terminate-every 1 --pg-restart
    python -m bench.torture --scenario appenders --engine postgres --workers 8 --seed 3
    python -m bench.torture --scenario cancels --engine postgres --duration 600
    python -m bench.torture --scenario control --engine sqlite --duration 60 --kill-every 3
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys

from bench.torture.appenders import AppendersConfig, run_appenders
from bench.torture.cancels import CancelsConfig, run_cancels
from bench.torture.coldstart import ColdStartConfig, run_cold_start
from bench.torture.common import Report, scratch_target
from bench.torture.control import ControlConfig, run_control
from bench.torture.driver import WorkersConfig, run_workers
from bench.torture.private_postgres import NoPrivatePostgres, private_postgres


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.torture",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scenario",
        choices=["workers", "appenders", "coldstart", "cancels", "control"],
        default="workers",
    )
    parser.add_argument("--engine", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--url", help="SQLite database URL, or the PostgreSQL server (a schema is made in it)"
    )
    parser.add_argument(
        "--workers", type=int, help="processes (default: 4 on sqlite, 8 on postgres)"
    )
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of feeding new work")
    parser.add_argument("--seed", type=int, help="replays a run's decisions (default: random)")
    parser.add_argument(
        "--kill-every", type=float, help="SIGKILL a random worker about every S seconds"
    )
    parser.add_argument(
        "--terminate-every",
        type=float,
        help="postgres: pg_terminate_backend a worker's backend about every S seconds",
    )
    parser.add_argument(
        "--pg-restart",
        action="store_true",
        help="postgres: restart the server once, mid-run; the run starts a private server "
        "of its own for it (initdb in a temporary folder, deleted afterwards)",
    )
    parser.add_argument("--ttl-ms", type=int, default=200, help="claim lease")
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument("--batches", type=int, default=40, help="appenders: batches per process")
    parser.add_argument("--rounds", type=int, default=5, help="coldstart: races")
    parser.add_argument(
        "--tasks", type=int, default=16, help="cancels: tasks of one AsyncStore, a session each"
    )
    parser.add_argument(
        "--cancels", type=int, help="cancels: stop after this many cancellations (or --duration)"
    )
    parser.add_argument(
        "--controllers",
        type=int,
        default=2,
        help="control: processes sending signals and cancelling sessions beside the workers",
    )
    parser.add_argument(
        "--log-dir", help="where the processes' JSON lines go (default: a temp dir)"
    )
    parser.add_argument(
        "--api",
        choices=["sync", "async"],
        default="sync",
        help="workers: each process drives a Store, or an AsyncStore from an event loop",
    )
    parser.add_argument(
        "--skew",
        type=float,
        metavar="MS",
        help="workers: worker n's store clock is the system's (n even) or MS ms behind "
        "(n odd), as on hosts whose clocks are apart (bench/skew.py)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the PostgreSQL schema")
    parser.add_argument("--json", action="store_true", help="print the report as JSON too")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> Report:
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    workers = args.workers or (4 if args.engine == "sqlite" else 8)
    if args.engine != "postgres" and (args.pg_restart or args.terminate_every):
        raise SystemExit("--pg-restart and --terminate-every need --engine postgres")
    if args.scenario == "control" and (
        args.pg_restart or args.terminate_every or args.api != "sync"
    ):
        raise SystemExit("control: no --pg-restart, --terminate-every or --api async")
    if args.skew is not None and (args.skew < 0 or args.scenario != "workers"):
        raise SystemExit("--skew takes 0 or more ms, for the workers scenario")
    if args.pg_restart and args.url:
        raise SystemExit("--pg-restart restarts a private server of the run's own: no --url")
    with contextlib.ExitStack() as stack:
        url, restart = args.url, None
        if args.pg_restart:
            try:
                server = stack.enter_context(private_postgres())
            except NoPrivatePostgres as error:
                raise SystemExit(f"--pg-restart: {error}") from None
            url, restart = server.url, server.restart
        target = stack.enter_context(scratch_target(args.engine, url, keep=args.keep))
        if args.scenario == "appenders":
            return run_appenders(AppendersConfig(target, workers, args.batches, seed, args.log_dir))
        if args.scenario == "coldstart":
            return run_cold_start(ColdStartConfig(target, workers, args.rounds, seed))
        if args.scenario == "control":
            return run_control(
                ControlConfig(
                    target=target,
                    workers=workers,
                    duration=args.duration,
                    seed=seed,
                    controllers=args.controllers,
                    kill_every=args.kill_every,
                    ttl_ms=args.ttl_ms,
                    drain_timeout=args.drain_timeout,
                    log_dir=args.log_dir,
                )
            )
        if args.scenario == "cancels":
            return run_cancels(
                CancelsConfig(target, args.tasks, args.duration, seed, cancels=args.cancels)
            )
        return run_workers(
            WorkersConfig(
                target=target,
                workers=workers,
                duration=args.duration,
                seed=seed,
                kill_every=args.kill_every,
                terminate_every=args.terminate_every,
                restart_server=restart,
                ttl_ms=args.ttl_ms,
                drain_timeout=args.drain_timeout,
                log_dir=args.log_dir,
                api=args.api,
                skew_ms=args.skew,
            )
        )


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    report = run(args)
    print(report.summary(), flush=True)
    if args.json:
        print(report.as_json())
    return 1 if report.anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
