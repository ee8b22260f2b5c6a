"""Every command run as a user runs it, a process of its own, on SQLite and PostgreSQL;
the demo on a fresh folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import a2sql
from a2sql import NewEvent, Store
from a2sql.core.escaping import command_line
from tests.cli.conftest import run_a2sql


def test_every_command_as_a_process(populated: tuple[Store, str], tmp_path: Path) -> None:
    """Each command once, --json parsed where it reads; plain output where it acts."""
    store, url = populated
    assert run_a2sql("migrate", "--check", "--url", url, "--json").json()["current"] is True
    assert run_a2sql("status", "--url", url, "--json").json()["sessions"] == 3
    assert len(run_a2sql("sessions", "--url", url, "--json").json()["sessions"]) == 3
    assert (
        run_a2sql("session", "order-17", "--url", url, "--json").json()["session"]["event_count"]
        == 1
    )
    assert len(run_a2sql("events", "order-1", "--url", url, "--json").json()["events"]) == 7
    assert len(run_a2sql("dead-letters", "--url", url, "--json").json()["dead_letters"]) == 1
    assert run_a2sql("retry", "order-1", "4", "--url", url, "--json").json()["outcome"] == (
        "requeued"
    )
    assert (
        run_a2sql("skip", "order-1", "4", "--reason", "r", "--url", url, "--json").json()["outcome"]
        == "skipped"
    )
    # The worker, until there is nothing left it could claim now or later.
    (tmp_path / "app.py").write_text("def handle(attempt):\n    return None\n")
    served = run_a2sql(
        "worker", "app:handle", "--url", url, "--until-idle", "--prefix", "order-17", cwd=tmp_path
    )
    assert served.code == 0, served.err
    assert [e.processed_by_attempt for e in store.read("order-17")] == [1]
    assert run_a2sql("delete", "order-17", "--yes", "--url", url, "--json").json()["events"] == 1
    demo = run_a2sql("demo", "--url", url, cwd=tmp_path)
    assert demo.code == 0, demo.err
    assert "dead-letters --prefix demo-" in demo.out
    assert command_line("--url", url) in demo.out
    pruned = run_a2sql("prune", "--older-than", "1d", "--yes", "--url", url, "--json")
    assert pruned.json()["sessions"] == 1
    copy_url = f"sqlite:///{tmp_path / 'copy.db'}"
    a2sql.create_store(copy_url).close()
    assert run_a2sql("copy", url, copy_url, "--json").json()["copied"] == 2  # order-1, demo


def _ctrl_c_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_tail_follows_until_ctrl_c(populated: tuple[Store, str]) -> None:
    """tail ID --from N --json: the events after N, then new ones live; Ctrl-C ends it, 0."""
    store, url = populated
    process = subprocess.Popen(
        [sys.executable, "-m", "a2sql.cli", "tail", "order-17", "--url", url, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # As a terminal's foreground job: Ctrl-C's default disposition, even when
        # pytest runs as a background job of a shell, whose SIGINT is ignored and
        # would be inherited (a command ignores what its shell told it to).
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    try:
        assert process.stdout is not None
        first = json.loads(process.stdout.readline())
        assert (first["index"], first["type"]) == (1, "placed")
        store.append("order-17", [NewEvent("paid", {"amount": 3})])
        second = json.loads(process.stdout.readline())
        assert (second["index"], second["payload"]) == (2, {"amount": 3})
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_demo_on_a_fresh_folder(tmp_path: Path) -> None:
    """demo: creates .a2/dev.db, and leaves a session in which every event is processed
    but one dead letter and the event behind it, with a snapshot, in under 10 seconds;
    a second run makes a second session."""
    started = time.monotonic()
    ran = run_a2sql("demo", cwd=tmp_path)
    took = time.monotonic() - started
    assert ran.code == 0, ran.err
    assert took < 10, f"the demo took {took:.1f} s"
    assert (tmp_path / ".a2" / "dev.db").exists()
    # Run as `python -m a2sql.cli` here: the commands it prints say so, to be runnable.
    assert f"{sys.executable} -m a2sql.cli dead-letters --prefix demo-" in ran.out
    assert run_a2sql("demo", cwd=tmp_path).code == 0
    with a2sql.create_store(f"sqlite:///{tmp_path / '.a2' / 'dev.db'}") as store:
        sessions = store.inspect.list_sessions(prefix="demo-").sessions
        assert len(sessions) == 2
        for summary in sessions:
            events = store.read(summary.session_id)
            unprocessed = [e for e in events if e.processed_at is None]
            [dead, blocked] = unprocessed
            assert dead.failed_at is not None and blocked.failed_at is None
            assert blocked.lane == dead.lane and blocked.index > dead.index
            [snapshot] = store.inspect.list_snapshots(summary.session_id)
            assert snapshot.index == events[-1].index
            # The charge failed once, then succeeded after the backoff.
            charge = next(e for e in events if e.type == "payment.charge")
            assert (charge.failure_count, charge.processed_by_attempt) == (1, 2)


def test_errors_are_one_line_on_stderr(tmp_path: Path) -> None:
    """A usage error or a store error: one line on stderr, nothing on stdout, exit non-zero."""
    for args in (
        ["nosuch"],
        ["events"],
        ["prune", "--older-than", "soon"],
        ["status", "--url", "mysql://nobody@localhost/x"],
    ):
        ran = run_a2sql(*args, cwd=tmp_path)
        assert ran.code != 0, args
        assert ran.out == "", args
        lines = ran.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("a2sql: "), (args, ran.err)


def test_an_engine_without_a_backend_is_one_line_naming_those_with_one(tmp_path: Path) -> None:
    """``a2sql migrate`` (and any command) given a MariaDB URL: one line saying which
    engines a2sql runs on, exit 2 (the arguments are wrong), and nothing written anywhere."""
    for args in (
        ["migrate", "--url", "mariadb://root@127.0.0.1/test"],
        ["migrate", "--check", "--url", "mysql+pymysql://root@127.0.0.1/test"],
        ["--url", "mariadb://root@127.0.0.1/test", "status"],
    ):
        ran = run_a2sql(*args, cwd=tmp_path)
        assert ran.code == 2, (args, ran.err)
        assert ran.err.strip().startswith("a2sql: INVALID_ARGUMENT: url: a2sql supports sqlite ")
        assert "and postgresql, not 'm" in ran.err, ran.err
        assert ran.out == ""
    assert list(tmp_path.iterdir()) == []
