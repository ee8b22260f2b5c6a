"""memory: peak RSS while reading a long session page by page, each reader in its own process.

Sessions of 10k and of 100k events are loaded set-based. A child process
opens the store, reads one page (imports, engine, caches: the "before"
figure), then reads every event of the session, and reports its peak RSS
(``resource.getrusage``). Bounded means the growth does not follow the
session's length: the 100k read grows about as much as the 10k read.

Readers: ``inspect.read_events`` pages of 100; ``stream`` from the start
(closed after the last event); the baseline's pages of 100; and, for
reference, ``read`` of the whole session at once (which holds it all).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from typing import Any

from bench import databases
from bench.workloads import Params

SIZES = (("k/", 10_000), ("m/", 100_000))
MODES = ("read_events", "stream", "baseline_pages", "read_whole")
PAGE = 100


def _rss_kb() -> int:
    """Peak RSS of this process so far (``getrusage``), in KiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> int | None:
    """Reset the kernel's peak-RSS mark (Linux: VmHWM); the RSS now, or None if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return None
    return _status_kb("VmRSS")


def _read(
    mode: str, engine: str, url: str, dsn: str, session_id: str, events: int
) -> dict[str, Any]:
    """In the child: read the session in ``mode``; report RSS before and at peak."""
    seen = 0
    if mode == "baseline_pages":
        from bench.impl import open_baseline

        impl = open_baseline(engine, dsn)
        impl.read_events(session_id, 0, PAGE)
        before, reset = _rss_kb(), _reset_peak()
        t0 = time.perf_counter()
        while True:
            n = impl.read_events(session_id, seen, PAGE)
            if n == 0:
                break
            seen += n
        impl.close()
    else:
        import a2sql

        store = a2sql.create_store(url, migrate=False)
        store.inspect.read_events(session_id, limit=PAGE)
        before, reset = _rss_kb(), _reset_peak()
        t0 = time.perf_counter()
        if mode == "read_events":
            while True:
                page = store.inspect.read_events(session_id, after_index=seen, limit=PAGE)
                if not page.events:
                    break
                seen = page.events[-1].index
        elif mode == "stream":
            stream = store.stream(session_id)
            for event in stream:
                seen = event.index
                if seen == events:
                    break
            stream.close()
        else:
            seen = len(store.read(session_id))
        store.close()
    seconds = time.perf_counter() - t0
    peak = _rss_kb()
    hwm = _status_kb("VmHWM") if reset is not None else None
    return {
        "case": mode,
        "events": seen,
        "rss_before_mb": round(before / 1024, 1),
        "rss_peak_mb": round(peak / 1024, 1),
        # The read's own peak over the RSS it started from (the kernel's
        # high-water mark, reset before reading); else the getrusage growth.
        "growth_mb": round(
            ((hwm - reset) if hwm is not None and reset is not None else (peak - before)) / 1024, 1
        ),
        "events_per_s": round(seen / seconds, 1),
    }


def memory(p: Params) -> dict[str, Any]:
    """Each reader on each session size, one process per measurement."""
    started = time.perf_counter()
    target = databases.prepare(p.engine)
    cases = []
    try:
        with databases.connect(target) as conn:
            for prefix, size in SIZES:
                databases.load_events(
                    conn,
                    p.engine,
                    prefix=prefix,
                    sessions=1,
                    per_session=size,
                    unprocessed_every=size + 1,
                )
            conn.commit()
            databases.analyze(conn, p.engine)
            conn.commit()
        for mode in MODES:
            for prefix, size in SIZES:
                out = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "bench.memory",
                        "--mode",
                        mode,
                        "--engine",
                        p.engine,
                        "--url",
                        target.a2sql_url,
                        "--dsn",
                        target.driver_dsn,
                        "--session",
                        f"{prefix}00000",
                        "--events",
                        str(size),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                case = json.loads(out.stdout.strip().splitlines()[-1])
                if case["events"] != size:
                    raise AssertionError(f"{mode} read {case['events']} of {size} events")
                cases.append({**case, "size": size})
    finally:
        if target.folder is not None:
            shutil.rmtree(target.folder, ignore_errors=True)
    growth = []
    for mode in MODES:
        small, large = (c for c in cases if c["case"] == mode)
        growth.append(
            {
                "case": mode,
                "growth_10k_mb": small["growth_mb"],
                "growth_100k_mb": large["growth_mb"],
                "bounded": large["growth_mb"]
                <= max(2 * small["growth_mb"], small["growth_mb"] + 5),
                **(
                    {"reference": "holds the whole session by design"}
                    if mode == "read_whole"
                    else {}
                ),
            }
        )
    return {
        "workload": "memory",
        "engine": p.engine,
        "ops": None,
        "rounds": 1,
        "seconds": round(time.perf_counter() - started, 2),
        "notes": [
            "rss_peak: getrusage ru_maxrss at the end; growth: the read's own peak RSS "
            "(VmHWM, reset after the first page) minus the RSS it started from",
        ],
        "cases": cases,
        "checks": growth,
    }


def _child() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--session", required=True)
    parser.add_argument("--events", type=int, required=True)
    a = parser.parse_args()
    print(json.dumps(_read(a.mode, a.engine, a.url, a.dsn, a.session, a.events)))


if __name__ == "__main__":
    _child()
