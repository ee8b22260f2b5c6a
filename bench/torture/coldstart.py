"""The cold-start race: processes open a store on the same fresh database at the same moment.

Every process migrates on open (SQLite's default; ``migrate=True`` on
PostgreSQL). All must succeed, none may see ``database is locked``, and the
schema must be there once, at the newest revision.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import tempfile
import time
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path

from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

import a2sql
from a2sql import NewEvent
from a2sql.execution.engines import resolve_url
from a2sql.migrate import VERSION_TABLE, head_revision
from a2sql.sql.schema import TABLE_NAMES
from bench.torture.common import Report, Target
from bench.torture.faults import SPAWN


@dataclass(frozen=True)
class ColdStartConfig:
    """``target`` names the engine and, for PostgreSQL, the server to make schemas in."""

    target: Target
    processes: int
    rounds: int
    seed: int


def opener_main(name: str, urls: list[str], barrier: Barrier, result_path: str) -> None:
    """For each round: wait for the others, open the store (migrating), append, read back."""
    with open(result_path, "a") as out:
        for round_number, url in enumerate(urls):
            try:
                barrier.wait(timeout=120)
            except Exception as error:
                out.write(
                    json.dumps({"round": round_number, "ok": False, "err": repr(error)}) + "\n"
                )
                return
            started = time.monotonic()
            try:
                migrate = None if url.startswith("sqlite") else True
                with a2sql.create_store(url, migrate=migrate) as store:
                    store.append(
                        name,
                        [NewEvent("hello", {"round": round_number}, id=f"{name}-{round_number}")],
                    )
                    read = [e.id for e in store.read(name)]
                ok, err = read == [f"{name}-{round_number}"], None if read else "nothing read back"
            except BaseException as error:
                ok, err = False, f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
            out.write(
                json.dumps(
                    {
                        "round": round_number,
                        "name": name,
                        "ok": ok,
                        "err": err,
                        "seconds": time.monotonic() - started,
                    }
                )
                + "\n"
            )
            out.flush()


@contextlib.contextmanager
def _fresh_databases(target: Target, rounds: int) -> Iterator[list[str]]:
    if target.engine == "sqlite":
        folder = Path(tempfile.mkdtemp(prefix="a2-coldstart-"))
        yield [f"sqlite:///{folder}/round{n}.db" for n in range(rounds)]
        return
    server = make_url(target.url)
    admin = create_engine(server, poolclass=NullPool)
    schemas = [f"coldstart_{uuid.uuid4().hex[:10]}" for _ in range(rounds)]
    with admin.begin() as connection:
        for schema in schemas:
            connection.execute(text(f'create schema "{schema}"'))
    try:
        yield [
            server.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
                hide_password=False
            )
            for schema in schemas
        ]
    finally:
        with admin.begin() as connection:
            for schema in schemas:
                connection.execute(text(f'drop schema if exists "{schema}" cascade'))
        admin.dispose()


def run_cold_start(config: ColdStartConfig) -> Report:
    started = time.monotonic()
    report = Report("coldstart", config.target.engine, config.seed)
    print(f"[torture coldstart] seed={config.seed} engine={config.target.engine}", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="a2-coldstart-logs-"))
    report.log_dir = str(folder)
    with _fresh_databases(config.target, config.rounds) as urls:
        barrier = SPAWN.Barrier(config.processes)
        processes = [
            SPAWN.Process(
                target=opener_main,
                args=(f"p{n}", urls, barrier, str(folder / f"p{n}.jsonl")),
            )
            for n in range(config.processes)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=300)
            if process.is_alive():
                process.kill()
                process.join()
                report.anomalies.append("an opener did not finish")
        results = [
            json.loads(line)
            for path in sorted(folder.glob("*.jsonl"))
            for line in path.read_text().splitlines()
        ]
        for result in results:
            if not result["ok"]:
                report.anomalies.append(
                    f"round {result['round']} {result.get('name')}: {result['err']}"
                )
        if len(results) != config.processes * config.rounds:
            report.anomalies.append(
                f"{len(results)} results for {config.processes * config.rounds} opens"
            )
        for round_number, url in enumerate(urls):
            report.anomalies += schema_problems(url, config.processes, round_number)
        report.add("opens", sum(1 for r in results if r["ok"]))
        report.add("rounds", config.rounds)
        report.figures["slowest_open_ms"] = int(
            1000 * max((r.get("seconds", 0) for r in results), default=0)
        )
    report.seconds = time.monotonic() - started
    return report


def schema_problems(url: str, processes: int, round_number: int) -> list[str]:
    """The schema exists once, at head, and holds each opener's event."""
    problems = []
    engine = create_engine(resolve_url(url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            versions = connection.execute(text(f"select version_num from {VERSION_TABLE}")).all()
            if [tuple(v) for v in versions] != [(head_revision(),)]:
                problems.append(f"round {round_number}: version table holds {versions}")
            counts = connection.execute(text("select count(*) from a2_events")).scalar()
            if counts != processes:
                problems.append(f"round {round_number}: {counts} events for {processes} openers")
    finally:
        engine.dispose()
    if url.startswith("sqlite"):
        path = make_url(url).database
        assert path
        problems += _sqlite_file_problems(path, round_number)
    return problems


def _sqlite_file_problems(path: str, round_number: int) -> list[str]:
    problems = []
    raw = sqlite3.connect(path)
    try:
        tables = {
            row[0] for row in raw.execute("select name from sqlite_master where type = 'table'")
        }
        missing = set(TABLE_NAMES) - tables
        if missing:
            problems.append(f"round {round_number}: tables missing: {missing}")
        journal = raw.execute("pragma journal_mode").fetchone()[0]
        if journal != "wal":
            problems.append(f"round {round_number}: journal_mode is {journal}, not wal")
        if raw.execute("pragma integrity_check").fetchall() != [("ok",)]:
            problems.append(f"round {round_number}: integrity_check failed")
    finally:
        raw.close()
    return problems
