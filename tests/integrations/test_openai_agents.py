"""a2sql.integrations.openai_agents.A2Session, proven against the Agents SDK itself.

On a SQLite file and on PostgreSQL (the ``url`` fixture), through ``Store`` and
``AsyncStore``:

- side by side with the SDK's own ``SQLiteSession``: the same random calls on both
  (batches of varied items, reads with and without limits, pops on empty and
  non-empty conversations, clears, two conversations at once), the same answers at
  every step, down to the JSON text of each item;
- concurrent processes adding to one conversation lose nothing and keep each
  one's order; concurrent processes popping never pop one item twice;
- end to end: the SDK's ``Runner`` with a scripted model (no network) over several
  turns on an ``A2Session``, resumed in another process for more, has the history
  and the answers of the same turns run on a ``SQLiteSession``.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import multiprocessing
import multiprocessing.process
import random
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeAlias

import pytest
from agents import SQLiteSession
from agents.memory import Session

import a2sql
from a2sql import A2Error, AsyncStore, ErrorCode, Store
from a2sql.integrations.openai_agents import CLEAR_TYPE, ITEM_TYPE, POP_TYPE, A2Session
from tests.integrations.agents_helpers import add_process, pop_process, run_turns, turns_process
from tests.page_examples import assert_prints, examples

ROOT = Path(__file__).resolve().parents[2]
AnyStore: TypeAlias = Store | AsyncStore


@pytest.fixture(params=["Store", "AsyncStore"])
def api(request: pytest.FixtureRequest) -> str:
    """Which facade the session is given."""
    return str(request.param)


@asynccontextmanager
async def opened(url: str, api: str) -> AsyncIterator[AnyStore]:
    if api == "Store":
        with a2sql.create_store(url, migrate=True) as store:
            yield store
    else:
        async with a2sql.create_async_store(url, migrate=True) as astore:
            yield astore


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def text(items: object) -> str:
    """The items as JSON text: key order, ``1`` against ``1.0``, ``-0.0`` all count."""
    return json.dumps(items, ensure_ascii=False)


# --- items of every shape --------------------------------------------------------------

ODD_TEXTS = [
    "",
    "naïve café ☕ 𝄞 עברית 中文",
    'quotes " and \\ backslashes \n\t\r',
    "\u2028\u2029 line separators",
    "nul \x00 inside",
    "x" * 3000,
]
ODD_NUMBERS: list[object] = [0, -0.0, 1, 1.0, -1, 2**62, -(2**63), 10**30, 1e-300, 0.1, 3.5e300]


def random_item(rng: random.Random, n: int) -> dict[str, Any]:
    """One of the SDK's item shapes, or a stranger JSON value of the same kind."""
    kind = rng.randrange(6)
    if kind == 0:
        return {"role": "user", "content": f"hello {n} {rng.choice(ODD_TEXTS)[:50]}"}
    if kind == 1:
        return {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": rng.choice(ODD_TEXTS), "annotations": []}],
        }
    if kind == 2:
        return {
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "lookup",
            "arguments": json.dumps({"q": n, "deep": {"x": [1, 2]}}),
        }
    if kind == 3:
        return {"type": "function_call_output", "call_id": f"call_{n}", "output": str(n)}
    if kind == 4:
        # Keys out of order, numbers of every kind, nesting, empty containers.
        return {
            "z": rng.choice(ODD_NUMBERS),
            "a": [rng.choice(ODD_NUMBERS), {}, [], None, True, False],
            "": {"nested": {"deeper": [[[n]]]}},
            "m": rng.choice(ODD_TEXTS),
        }
    return {"type": "reasoning", "id": f"rs_{n}", "summary": [], "n": n}


def long_item(rng: random.Random, n: int) -> dict[str, Any]:
    """Mostly short items, for conversations of thousands."""
    return random_item(rng, n) if n % 50 == 0 else {"role": "user", "content": f"m{n}"}


# --- side by side with the SDK's SQLiteSession ---------------------------------------------


async def side_by_side(store: AnyStore, seed: int, steps: int) -> dict[str, int]:
    """Random calls on two conversations, each on an A2Session and a SQLiteSession at
    once; every answer compared. Returns how many calls of each kind it made."""
    rng = random.Random(seed)
    ids = [f"conv-{seed}-a", f"conv-{seed}-b"]
    references = {sid: SQLiteSession(sid) for sid in ids}
    kept = {sid: A2Session(sid, store) for sid in ids}
    counts = dict.fromkeys(["add", "get", "get_limit", "pop", "pop_empty", "clear"], 0)
    made = 0
    try:
        for step in range(steps):
            sid = rng.choice(ids)
            reference = references[sid]
            # A session kept between calls, or one made for the call (as a server
            # handling one request makes it): both must answer the same.
            ours = kept[sid] if rng.random() < 0.5 else A2Session(sid, store)
            length = len(await reference.get_items())
            where = f"seed {seed}, step {step}, {sid}"
            roll = rng.random()
            if roll < 0.35:
                batch = [random_item(rng, made + k) for k in range(rng.choice([0, 1, 1, 2, 3, 7]))]
                made += len(batch)
                await reference.add_items(batch)
                await ours.add_items(batch)
                counts["add"] += 1
            elif roll < 0.5:
                mine, theirs = await ours.get_items(), await reference.get_items()
                assert text(mine) == text(theirs), where
                assert mine == theirs, where
                counts["get"] += 1
            elif roll < 0.75:
                limit = rng.choice([0, 1, 2, 3, length - 1, length, length + 1, 50, 1000])
                limit = max(limit, 0)
                mine, theirs = await ours.get_items(limit), await reference.get_items(limit)
                assert text(mine) == text(theirs), f"{where}, limit {limit}"
                counts["get_limit"] += 1
            elif roll < 0.95:
                mine_popped, theirs_popped = await ours.pop_item(), await reference.pop_item()
                assert text(mine_popped) == text(theirs_popped), where
                counts["pop_empty" if theirs_popped is None else "pop"] += 1
            else:
                await ours.clear_session()
                await reference.clear_session()
                counts["clear"] += 1
        for sid in ids:
            fresh = A2Session(sid, store)
            assert text(await fresh.get_items()) == text(await references[sid].get_items())
    finally:
        for reference in references.values():
            reference.close()
    return counts


def test_random_calls_answer_as_the_sdks_sqlite_session(url: str, api: str) -> None:
    async def scenario() -> None:
        totals: dict[str, int] = {}
        async with opened(url, api) as store:
            for seed in range(3):
                for kind, count in (await side_by_side(store, seed, 120)).items():
                    totals[kind] = totals.get(kind, 0) + count
        # Every kind of call was made, pops on empty conversations included.
        assert all(totals.values()), totals

    run(scenario)


def test_a_long_conversation_reads_as_the_sdks_sqlite_session(url: str, api: str) -> None:
    """Past a2sql's page of 1,000 events: reads walk back over several pages, past
    pops and up to the last clear."""

    async def scenario() -> None:
        rng = random.Random(7)
        reference = SQLiteSession("long")
        async with opened(url, api) as store:
            ours = A2Session("long", store)

            async def same() -> None:
                for limit in (None, 0, 1, 5, 999, 1000, 1001, 2400, 5000):
                    mine, theirs = await ours.get_items(limit), await reference.get_items(limit)
                    assert text(mine) == text(theirs), limit
                fresh = A2Session("long", store)
                assert text(await fresh.get_items(3)) == text(await reference.get_items(3))

            for start in range(0, 2500, 500):
                batch = [long_item(rng, start + k) for k in range(500)]
                await ours.add_items(batch)
                await reference.add_items(batch)
            await same()
            for _ in range(150):  # the walk reads past pops and the items they removed
                assert text(await ours.pop_item()) == text(await reference.pop_item())
            await same()
            await ours.clear_session()
            await reference.clear_session()
            await same()
            batch = [long_item(rng, 3000 + k) for k in range(1100)]
            await ours.add_items(batch)
            await reference.add_items(batch)
            await same()
        reference.close()

    run(scenario)


def test_session_settings_limit_as_the_sdks(url: str, api: str) -> None:
    async def scenario() -> None:
        reference = SQLiteSession("limited", session_settings={"limit": 2})
        async with opened(url, api) as store:
            ours = A2Session("limited", store, session_settings={"limit": 2})
            items = [{"role": "user", "content": str(n)} for n in range(5)]
            await ours.add_items(items)
            await reference.add_items(items)
            for limit in (None, 1, 4, 10):
                assert await ours.get_items(limit) == await reference.get_items(limit)
            assert await ours.get_items() == items[-2:]
        reference.close()

    run(scenario)


# --- the session's own rules -------------------------------------------------------------


def test_it_is_the_sdks_session_protocol(tmp_path: Path) -> None:
    with a2sql.create_store(f"sqlite:///{tmp_path / 'a2.db'}", migrate=True) as store:
        session = A2Session("c-1", store, prefix="chat/")
        assert isinstance(session, Session)
        assert session.session_id == "c-1"
        assert session.a2sql_session_id == "chat/c-1"
        for method in ("get_items", "add_items", "pop_item", "clear_session"):
            assert inspect.iscoroutinefunction(getattr(session, method)), method
        with pytest.raises(A2Error) as refused:
            A2Session("x" * 251, store, prefix="chat/")
        assert refused.value.code is ErrorCode.INVALID_ARGUMENT
        assert "at most 255 characters" in refused.value.message
        with pytest.raises(A2Error):
            A2Session("c-1", object())  # type: ignore[arg-type]


def test_a_limit_below_one_returns_no_items(tmp_path: Path) -> None:
    """As the SDK's protocol says (``resolve_session_limit``: "a session implementation
    should return no items for those values"). SQLiteSession gives every item for a
    negative limit (SQLite's ``LIMIT -1``): the protocol is followed, not that."""

    async def scenario() -> None:
        with a2sql.create_store(f"sqlite:///{tmp_path / 'a2.db'}", migrate=True) as store:
            session = A2Session("c", store)
            await session.add_items([{"role": "user", "content": "hi"}])
            assert await session.get_items(0) == []
            assert await session.get_items(-1) == []

    run(scenario)


def test_the_log_is_append_only_settled_and_folded(url: str) -> None:
    """Pops and clears are events; nothing is rewritten; no worker has anything to claim."""

    async def scenario() -> None:
        async with opened(url, "Store") as store:
            assert isinstance(store, Store)
            session = A2Session("c", store)
            await session.add_items([{"n": 1}, {"n": 2}, {"n": 3}])
            assert await session.pop_item() == {"n": 3}
            await session.clear_session()
            await session.add_items([{"n": 4}])
            assert await session.pop_item() == {"n": 4}
            assert await session.pop_item() is None
            assert await session.get_items() == []
            events = store.read("c")
            assert [(e.index, e.type, e.payload) for e in events] == [
                (1, ITEM_TYPE, {"n": 1}),
                (2, ITEM_TYPE, {"n": 2}),
                (3, ITEM_TYPE, {"n": 3}),
                (4, POP_TYPE, {"index": 3}),
                (5, CLEAR_TYPE, None),
                (6, ITEM_TYPE, {"n": 4}),
                (7, POP_TYPE, {"index": 6}),
            ]
            assert events[3].id == "c/pop/3"
            assert all(e.processed_at is not None for e in events)
            claim = store.claim_available("c", holder="w", ttl_ms=1000)
            assert claim.outcome == "settled"
            assert store.claim_next(holder="w", ttl_ms=1000).outcome == "idle"

    run(scenario)


def test_a_very_long_session_id_pops_under_a_hashed_id(tmp_path: Path) -> None:
    async def scenario() -> None:
        with a2sql.create_store(f"sqlite:///{tmp_path / 'a2.db'}", migrate=True) as store:
            sid = "s" * 255
            session = A2Session(sid, store)
            await session.add_items([{"n": 1}, {"n": 2}])
            assert await session.pop_item() == {"n": 2}
            assert await A2Session(sid, store).get_items() == [{"n": 1}]
            pop = store.read(sid)[-1]
            assert pop.type == POP_TYPE and pop.id.startswith("agents-pop/") and len(pop.id) < 100

    run(scenario)


def test_other_events_in_the_session_are_left_alone(tmp_path: Path) -> None:
    """The conversation's session can carry work of the application's own."""

    async def scenario() -> None:
        with a2sql.create_store(f"sqlite:///{tmp_path / 'a2.db'}", migrate=True) as store:
            session = A2Session("c", store)
            await session.add_items([{"n": 1}])
            store.append("c", [a2sql.NewEvent("summarize", {"upto": 1})])
            await session.add_items([{"n": 2}])
            assert await session.get_items() == [{"n": 1}, {"n": 2}]
            assert await session.pop_item() == {"n": 2}
            assert await session.get_items(5) == [{"n": 1}]
            claim = store.claim_available("c", holder="w", ttl_ms=1000)
            assert [e.type for e in claim.events] == ["summarize"]

    run(scenario)


def test_what_a2sql_cannot_store_is_refused_naming_the_item(url: str, api: str) -> None:
    async def scenario() -> None:
        async with opened(url, api) as store:
            session = A2Session("c", store)
            for bad in (
                {"a": (1, 2)},
                {1: "int key"},
                {"x": float("nan")},
                {"x": "lone \ud800 surrogate"},
                {"x": object()},
            ):
                with pytest.raises(A2Error) as refused:
                    await session.add_items([{"fine": True}, bad])  # type: ignore[list-item]
                assert refused.value.code is ErrorCode.INVALID_ARGUMENT
                assert refused.value.message.startswith("items[1]: "), refused.value.message
            assert await session.get_items() == []  # nothing was written
            read = store.read("c") if isinstance(store, Store) else await store.read("c")
            assert read == []

    run(scenario)


def test_reads_cost_what_they_return(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a conversation of 3,000 items, a read of 5 reads a few events, and a read after
    a late clear reads from the clear on: not the conversation's length."""

    async def scenario() -> None:
        async with opened(url, "Store") as store:
            assert isinstance(store, Store)
            session = A2Session("c", store)
            for start in range(0, 3000, 1000):
                await session.add_items([{"n": start + k} for k in range(1000)])
            read_events = store.inspect.read_events
            rows: list[int] = []

            def counted(*args: Any, **kwargs: Any) -> Any:
                page = read_events(*args, **kwargs)
                rows.append(len(page.events))
                return page

            monkeypatch.setattr(store.inspect, "read_events", counted)
            for fresh in (False, True):
                rows.clear()
                reader = A2Session("c", store) if fresh else session
                assert await reader.get_items(5) == [{"n": n} for n in range(2995, 3000)]
                assert len(rows) <= 2 and sum(rows) <= 5 + 2, rows
            await session.clear_session()
            await session.add_items([{"n": "after"}])
            rows.clear()
            assert await A2Session("c", store).get_items() == [{"n": "after"}]
            assert sum(rows) <= 16, rows  # one first page: the item and the clear in it

    run(scenario)


# --- several processes at once ---------------------------------------------------------------


# Other processes: forked from multiprocessing's forkserver, a fresh interpreter that
# imported the SDK and the helpers once and opened nothing, so each starts in
# milliseconds rather than the seconds an import of the SDK takes, and shares no
# store, connection or memory with this one.
CONTEXT = multiprocessing.get_context("forkserver")
CONTEXT.set_forkserver_preload(["tests.integrations.agents_helpers"])


def run_processes(processes: list[multiprocessing.process.BaseProcess]) -> None:
    """Start them, wait for each to exit well; any still running at the end is killed."""
    try:
        for process in processes:
            process.start()
    finally:
        run_processes_done(processes)


def test_concurrent_adders_lose_nothing_and_keep_order(url: str) -> None:
    writers, batches = 4, 25
    with a2sql.create_store(url, migrate=True) as store:
        start = CONTEXT.Barrier(writers)
        run_processes(
            [
                CONTEXT.Process(target=add_process, args=(url, "shared", f"w{w}", batches, start))
                for w in range(writers)
            ]
        )

        async def history() -> list[Any]:
            return await A2Session("shared", store).get_items()

        contents = [item["content"] for item in asyncio.run(history())]
    assert len(contents) == writers * batches * 2
    assert len(set(contents)) == len(contents)
    for w in range(writers):
        mine = [c for c in contents if c.startswith(f"w{w}:")]
        assert mine == [f"w{w}:{n}:{part}" for n in range(batches) for part in (0, 1)]
    # A batch is one transaction: its two items are never apart.
    for position in range(0, len(contents), 2):
        assert contents[position].endswith(":0")
        assert contents[position + 1] == contents[position][:-1] + "1"
    # They did run at once: one after the other would switch writers writers - 1 times.
    batch_writers = [content.split(":")[0] for content in contents[::2]]
    switches = sum(1 for a, b in itertools.pairwise(batch_writers) if a != b)
    assert switches >= writers, batch_writers


def test_concurrent_poppers_never_pop_one_item_twice(url: str) -> None:
    poppers, count = 4, 80
    with a2sql.create_store(url, migrate=True) as store:

        async def fill() -> None:
            await A2Session("shared", store).add_items([{"n": n} for n in range(count)])

        asyncio.run(fill())
        start, results = CONTEXT.Barrier(poppers), CONTEXT.Queue()
        processes = [
            CONTEXT.Process(target=pop_process, args=(url, "shared", start, results))
            for _ in range(poppers)
        ]
        popped: list[list[int]] = []
        try:
            for process in processes:
                process.start()
            # Read before joining: a process exits once its queue is drained.
            popped = [[item["n"] for item in results.get(timeout=120)] for _ in processes]
        finally:
            run_processes_done(processes)
        pops = [e for e in store.read("shared") if e.type == POP_TYPE]
    everything = [n for one in popped for n in one]
    assert sorted(everything) == list(range(count)), popped
    for one in popped:  # each process popped newest first
        assert one == sorted(one, reverse=True)
    assert sorted(e.payload["index"] for e in pops) == list(range(1, count + 1))  # type: ignore[index]
    assert sum(1 for one in popped if one) >= 2, popped  # they did run at once


def run_processes_done(processes: list[multiprocessing.process.BaseProcess]) -> None:
    """Wait for started processes to exit well; kill any still running at the end."""
    try:
        for process in processes:
            process.join(120)
            assert process.exitcode == 0, process
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()


# --- end to end: the SDK's Runner, resumed in another process ----------------------------

TURNS = ["hello", "add 2 and 3", "what did I ask?", "add 40 and 2", "add -7 and 7", "bye"]


def test_a_runner_resumed_in_another_process_has_the_sqlite_sessions_history(url: str) -> None:
    """Turns on a Store, resumed on an AsyncStore in another process (SQLite); the other
    way round on PostgreSQL."""
    first, then = TURNS[:3], TURNS[3:]
    api, other = ("Store", "async") if url.startswith("sqlite") else ("AsyncStore", "sync")

    async def scenario() -> None:
        reference = SQLiteSession("run")
        expected = await run_turns(reference, TURNS)
        async with opened(url, api) as store:
            outputs = await run_turns(A2Session("run", store), first)
            results = CONTEXT.Queue()
            resumed = CONTEXT.Process(target=turns_process, args=(url, "run", other, then, results))
            try:
                resumed.start()
                outputs += results.get(timeout=120)
            finally:
                run_processes_done([resumed])
            assert outputs == expected
            history = await A2Session("run", store).get_items()
            assert text(history) == text(await reference.get_items())
            assert text(await A2Session("run", store).get_items(4)) == text(
                await reference.get_items(4)
            )
            # The tool ran: its calls and outputs are in the history, in the SDK's shapes.
            kinds = [item.get("type", "message") for item in history]
            assert kinds.count("function_call") == 3
            assert kinds.count("function_call_output") == 3
            assert len(history) == len(TURNS) * 2 + 3 * 2
        reference.close()

    run(scenario)


def test_the_core_never_imports_the_sdk() -> None:
    """``import a2sql, a2sql.worker, a2sql.integrations`` in a fresh process loads no
    module of the Agents SDK (nor of openai)."""
    code = (
        "import sys, a2sql, a2sql.worker, a2sql.integrations\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('agents', 'openai'))\n"
        "print(loaded)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert ran.stdout.strip() == "[]", ran.stdout


# --- the documentation's example -----------------------------------------------------------

PAGE = ROOT / "docs" / "integrations" / "openai-agents.md"


def test_the_pages_example_prints_what_the_page_says(tmp_path: Path) -> None:
    """docs/integrations/openai-agents.md: the example runs as written, in a fresh folder
    (on the development database it makes there), and prints what the page says."""
    [(code, prints)] = examples(PAGE)
    assert_prints(code, prints, tmp_path)
