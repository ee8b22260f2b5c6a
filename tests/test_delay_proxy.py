"""bench/delay_proxy.py: a round trip through it costs the RTT, a pipeline does not
wait one per statement, a2sql works through it, and its process is gone after."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import URL, make_url

import a2sql
from a2sql import NewEvent
from bench import delay_proxy

RTT_MS = 20.0
RTT_S = RTT_MS / 1000


def _libpq(url: URL | str) -> str:
    """``url`` as psycopg takes it (no ``+psycopg`` driver)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen[Any]]]:
    """The proxy processes started in the test."""
    processes: list[subprocess.Popen[Any]] = []
    popen = subprocess.Popen

    def recording(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        process = popen(*args, **kwargs)
        processes.append(process)
        return process

    monkeypatch.setattr(delay_proxy.subprocess, "Popen", recording)
    yield processes


def test_a_round_trip_costs_the_rtt_and_a_pipeline_one_rtt(
    postgres_server: URL | str, spawned: list[subprocess.Popen[Any]]
) -> None:
    if isinstance(postgres_server, str):
        pytest.skip(postgres_server)
    import psycopg

    with delay_proxy.delayed(_libpq(postgres_server), RTT_MS) as url:
        assert make_url(url).port != make_url(postgres_server).port
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("select 1")
            t0 = time.perf_counter()
            assert conn.execute("select 1").fetchone() == (1,)
            one = time.perf_counter() - t0
            t0 = time.perf_counter()
            with conn.pipeline():
                cursors = [conn.execute("select %s::int", (n,)) for n in range(10)]
            ten = time.perf_counter() - t0
            assert [c.fetchone() for c in cursors] == [(n,) for n in range(10)]
        (process,) = spawned
        assert _alive(process.pid)
    assert one >= RTT_S * 0.95
    assert ten >= RTT_S * 0.95
    assert ten < 6 * RTT_S, f"10 pipelined statements took {ten * 1000:.1f} ms: serialised?"
    assert process.returncode is not None
    assert not _alive(process.pid)


def test_a2sql_works_through_it(postgres_url: str, spawned: list[subprocess.Popen[Any]]) -> None:
    with delay_proxy.delayed(postgres_url, RTT_MS) as url:
        with a2sql.create_store(url, migrate=True) as store:
            store.append("s1", [NewEvent("t", {"n": 1}), NewEvent("t", {"n": 2})])
            t0 = time.perf_counter()
            events = store.read("s1")
            took = time.perf_counter() - t0
        assert [e.payload["n"] for e in events] == [1, 2]
        assert took >= RTT_S * 0.95
    (process,) = spawned
    assert not _alive(process.pid)


def test_refuses_a_negative_rtt() -> None:
    with pytest.raises(ValueError), delay_proxy.delayed("postgresql://postgres@127.0.0.1/x", -1):
        pass
