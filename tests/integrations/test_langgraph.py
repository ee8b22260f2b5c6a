"""a2sql.integrations.langgraph: A2Saver and AsyncA2Saver, proven by LangGraph's own
conformance suite (langgraph-checkpoint-conformance) on SQLite and PostgreSQL, by a
graph with a human in the loop resumed in another process, and by what the suite does
not look at: odd and long ids, isolation, deletion, paging, nothing claimable."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport
from langgraph.checkpoint.serde.types import INTERRUPT, RESUME
from langgraph.types import Command
from sqlalchemy import event

import a2sql
from a2sql.integrations.langgraph import A2Saver, AsyncA2Saver
from tests.integrations.langgraph_app import build
from tests.page_examples import assert_prints, examples

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrations" / "langgraph.md"

# What each saver claims, and must pass; delete_for_runs raises NotImplementedError
# (a2sql keeps no index of run ids), so the suite is told to skip it.
CLAIMED = {"put", "put_writes", "get_tuple", "list", "delete_thread", "copy_thread", "prune"}
NOT_CLAIMED = {"delete_for_runs"}


def open_store(url: str) -> a2sql.Store:
    return a2sql.create_store(url, migrate=True)


# --- LangGraph's conformance suite ----------------------------------------------------


def conformance(url: str, kind: str) -> CapabilityReport:
    """``validate()`` on a fresh saver per capability (each under a prefix of its own)."""
    opened: dict[str, Any] = {}
    made = iter(range(1, 100))

    async def lifespan() -> AsyncGenerator[None, None]:
        if kind == "A2Saver":
            opened["store"] = open_store(url)
        else:
            opened["store"] = a2sql.create_async_store(url, migrate=True)
            await opened["store"].ensure_schema()
        try:
            yield
        finally:
            closed = opened["store"].close()
            if asyncio.iscoroutine(closed):
                await closed

    async def saver() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        prefix = f"suite{next(made)}/"
        if kind == "A2Saver":
            yield A2Saver(opened["store"], prefix=prefix)
        else:
            yield AsyncA2Saver(opened["store"], prefix=prefix)

    registered = checkpointer_test(
        name=f"{kind} on {url.split(':')[0]}", lifespan=lifespan, skip_capabilities=NOT_CLAIMED
    )(saver)
    return asyncio.run(validate(registered))


@pytest.mark.parametrize("kind", ["A2Saver", "AsyncA2Saver"])
def test_the_conformance_suite_passes(url: str, kind: str) -> None:
    """Every base capability passes, and every extended one the saver claims; the one it
    does not claim is reported as not implemented."""
    started = time.monotonic()
    report = conformance(url, kind)
    report.print_report()
    print(f"  {kind}: the suite took {time.monotonic() - started:.1f} s")
    results = report.to_dict()["results"]
    failures = {name: r["failures"] for name, r in results.items() if r["failures"]}
    assert not failures, json.dumps(failures, indent=2)
    assert report.passed_all_base()
    assert {cap.value for cap in BASE_CAPABILITIES} <= CLAIMED
    for name in CLAIMED:
        assert results[name]["detected"] and results[name]["passed"] is True, name
    for name in NOT_CLAIMED:
        assert results[name]["detected"] is False and results[name]["passed"] is None
    assert report.conformance_level() == "FULL"


# --- a human in the loop, resumed in another process -----------------------------------


def resume_elsewhere(url: str, thread_id: str, verdict: str) -> dict[str, Any]:
    """``python -m tests.integrations.langgraph_app``: resumes the thread, prints its
    final state. Stopped by its pid if it outlives the timeout."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.integrations.langgraph_app", url, thread_id, verdict],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 0, err
    return dict(json.loads(out.splitlines()[-1]))


def test_a_graph_stopped_for_a_human_resumes_in_another_process(url: str) -> None:
    """Run to the interrupt here, resume from the checkpoint in a subprocess, see the end
    here; then time travel: replay from a checkpoint of the history, a branch of its own."""
    with open_store(url) as store:
        graph = build(A2Saver(store))
        config: Any = {"configurable": {"thread_id": "post/1"}}
        paused = graph.invoke({"topic": "tea", "steps": []}, config)
        assert paused["__interrupt__"][0].value == {"draft": "a post on tea"}
        assert graph.get_state(config).next == ("review",)

        final = resume_elsewhere(url, "post/1", "approved")
        assert final == {
            "topic": "tea",
            "draft": "a post on tea",
            "verdict": "approved",
            "steps": ["write", "review", "publish:approved"],
        }
        state = graph.get_state(config)
        assert state.next == ()
        assert state.values == final

        # Time travel: the history, newest first; replay from before `write`.
        history = list(graph.get_state_history(config))
        assert [s.next for s in history] == [
            (),
            ("publish",),
            ("review",),
            ("write",),
            ("__start__",),
        ]
        before_write = history[3]
        again = graph.invoke(None, before_write.config)
        assert again["__interrupt__"][0].value == {"draft": "a post on tea"}
        branch = graph.invoke(Command(resume="rejected"), config)
        assert branch["verdict"] == "rejected"
        assert branch["steps"] == ["write", "review", "publish:rejected"]
        # The first branch is still there, one step back from its end.
        assert graph.get_state(history[0].config).values == final
        # Both branches are in the thread's history.
        ends = [s.values["verdict"] for s in graph.get_state_history(config) if not s.next]
        assert ends == ["rejected", "approved"]

        # Records, not work: nothing for a worker to claim.
        assert store.claim_next(holder="w", ttl_ms=1000).outcome == "idle"


def test_an_async_graph_resumes_what_a_sync_saver_left(url: str) -> None:
    """AsyncA2Saver reads what A2Saver wrote, and ainvoke resumes it."""
    with open_store(url) as store:
        graph = build(A2Saver(store))
        config: Any = {"configurable": {"thread_id": "post-async"}}
        graph.invoke({"topic": "tea", "steps": []}, config)

    async def resume() -> dict[str, Any]:
        async with a2sql.create_async_store(url) as astore:
            agraph = build(AsyncA2Saver(astore))
            final = await agraph.ainvoke(Command(resume="ok"), config)
            return dict(final)

    assert asyncio.run(resume())["steps"] == ["write", "review", "publish:ok"]


# --- what the suite does not look at -----------------------------------------------------


def checkpoint(
    checkpoint_id: str | None = None, versions: dict[str, Any] | None = None, **values: Any
) -> Checkpoint:
    return {
        "v": 1,
        "id": checkpoint_id or str(uuid4()),
        "ts": "2026-12-07T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": dict.fromkeys(values, 1) if versions is None else versions,
        "versions_seen": {},
        "updated_channels": None,
    }


META: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}


def config(thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


ODD = [
    "a",
    "a/b",
    "a%2Fb",
    "~a",
    "%7Ea",
    "ab",
    "",
    " spaced out ",
    "ünïcødé/💬",
    "nul\x00inside",
    "x" * 110,
    "x" * 111,
    "y" * 1000,
]


@pytest.fixture
def saver(url: str) -> Iterator[A2Saver]:
    with open_store(url) as store:
        yield A2Saver(store)


def test_odd_and_long_ids_each_have_a_session_of_their_own(saver: A2Saver) -> None:
    """Thread ids, namespaces and checkpoint ids with slashes, percent signs, tildes,
    non-ASCII, NUL, and far past 255 characters: each keeps its own checkpoints, and
    every session id is at most 255 characters (a lone surrogate, which no a2sql
    payload holds, still names a session of its own)."""
    names = [*ODD, "lone \ud800 surrogate"]
    sessions = {saver.session_id(t, ns) for t in names for ns in names}
    assert len(sessions) == len(names) ** 2
    assert max(map(len, sessions)) <= 255
    for n, thread_id in enumerate(ODD):
        namespace = ODD[-1 - n]
        stored = saver.put(
            config(thread_id, namespace),
            checkpoint(f"{thread_id}|{n}" * 3, **{thread_id or "empty": n}),
            META,
            {thread_id or "empty": 1},
        )
        saver.put_writes(stored, [(namespace or "ch", thread_id)], task_id=thread_id or "t")
    for n, thread_id in enumerate(ODD):
        namespace = ODD[-1 - n]
        got = saver.get_tuple(config(thread_id, namespace))
        assert got is not None
        assert got.checkpoint["id"] == f"{thread_id}|{n}" * 3
        assert got.checkpoint["channel_values"] == {thread_id or "empty": n}
        assert got.config["configurable"]["thread_id"] == thread_id
        assert got.config["configurable"]["checkpoint_ns"] == namespace
        assert got.pending_writes == [(thread_id or "t", namespace or "ch", thread_id)]
        by_id = saver.get_tuple(config(thread_id, namespace, got.checkpoint["id"]))
        assert by_id is not None and by_id.checkpoint == got.checkpoint
        assert [t.checkpoint["id"] for t in saver.list(config(thread_id, namespace))] == [
            got.checkpoint["id"]
        ]
        # The other namespaces of the same thread hold nothing.
        assert saver.get_tuple(config(thread_id, namespace + "-other")) is None
    # Every thread, listed across sessions.
    assert len(list(saver.list(None))) == len(ODD)


def test_delete_thread_removes_the_thread_and_nothing_else(saver: A2Saver) -> None:
    """Every namespace of the thread goes; threads whose ids start the same way stay."""
    store = saver.store
    namespaces = ("", "child:1", "child:1|grand:2")
    for thread_id in ("a", "a/b", "ab", "a%2F"):
        for namespace in namespaces:
            stored = saver.put(config(thread_id, namespace), checkpoint(v=1), META, {"v": 1})
            saver.put_writes(stored, [("ch", 1)], task_id="t")
    before = {s.session_id for s in store.inspect.list_sessions(prefix="langgraph/").sessions}
    assert len(before) == 12
    saver.delete_thread("a")
    after = {s.session_id for s in store.inspect.list_sessions(prefix="langgraph/").sessions}
    assert after == before - {
        saver.session_id("a", ns) for ns in ("", "child:1", "child:1|grand:2")
    }
    for namespace in ("", "child:1"):
        assert saver.get_tuple(config("a", namespace)) is None
        assert saver.get_tuple(config("a/b", namespace)) is not None
        assert saver.get_tuple(config("ab", namespace)) is not None
    assert list(saver.list(config("a", None))) == []
    saver.delete_thread("not there")


def test_nothing_it_appends_is_claimable(saver: A2Saver) -> None:
    """Checkpoints, values and writes are settled events: no worker ever claims them."""
    store = saver.store
    stored = saver.put(config("t"), checkpoint(a=[1, 2]), META, {"a": 1})
    saver.put_writes(stored, [("a", 3), (INTERRUPT, "stop")], task_id="task")
    saver.copy_thread("t", "u")
    assert store.claim_next(holder="worker", ttl_ms=1000).outcome == "idle"
    for session in store.inspect.list_sessions(prefix="langgraph/").sessions:
        assert session.pending_count == 0
        for stored_event in store.read(session.session_id):
            assert stored_event.processed_at is not None
            assert stored_event.type.startswith("langgraph.")


def test_writes_keep_the_first_regular_value_and_the_last_special_one(saver: A2Saver) -> None:
    """As LangGraph's savers: a task's regular write (task, idx) is kept as first written;
    an interrupt or resume written again replaces the one before."""
    stored = saver.put(config("w"), checkpoint(), META, {})
    saver.put_writes(stored, [("a", "first"), (RESUME, "yes")], task_id="t1", task_path="p")
    saver.put_writes(stored, [("a", "second"), (RESUME, "no")], task_id="t1", task_path="p")
    saver.put_writes(stored, [("a", "other")], task_id="t0", task_path="p")
    got = saver.get_tuple(stored)
    assert got is not None
    # In writes_sort_key order: (task_path, task_id, idx); a resume's idx is negative.
    assert got.pending_writes == [("t0", "a", "other"), ("t1", RESUME, "no"), ("t1", "a", "first")]


def test_concurrent_writes_on_one_checkpoint_are_all_kept(saver: A2Saver) -> None:
    """Parallel tasks writing to one checkpoint at once (as a superstep's tasks do) each
    find a number of their own: none is lost."""
    stored = saver.put(config("fan-out"), checkpoint(), META, {})
    barrier = threading.Barrier(8)

    def task(n: int) -> None:
        barrier.wait()
        saver.put_writes(stored, [("results", n)], task_id=f"task-{n}")

    threads = [threading.Thread(target=task, args=(n,)) for n in range(8)]
    for each in threads:
        each.start()
    for each in threads:
        each.join()
    got = saver.get_tuple(stored)
    assert got is not None
    assert sorted(value for _, _, value in got.pending_writes or []) == list(range(8))


def statements(store: a2sql.Store) -> list[int]:
    """A counter of the statements the store's engine runs from now on."""
    count = [0]

    def counted(*_: Any) -> None:
        count[0] += 1

    event.listen(store.engine, "before_cursor_execute", counted)
    return count


def test_the_latest_and_a_short_list_do_not_read_the_whole_thread(saver: A2Saver) -> None:
    """get_tuple() and list(limit=2) cost the same on a thread of 20 checkpoints and one
    of 200: they read back from the end, and look values up by id."""
    count = statements(saver.store)
    costs = []
    for length in (20, 200):
        thread = f"long-{length}"
        parent = None
        for step in range(length):
            versions = {"step": 1 + step, "log": 1}
            stored = saver.put(
                config(thread, checkpoint_id=parent),
                checkpoint(versions=versions, step=step, log=["x"] * 50),
                {**META, "step": step},
                versions if step == 0 else {"step": 1 + step},
            )
            saver.put_writes(stored, [("step", step)], task_id="t")
            parent = stored["configurable"]["checkpoint_id"]
        saver.get_tuple(config(thread))  # the connection warmed up
        before = count[0]
        latest = saver.get_tuple(config(thread))
        listed = list(saver.list(config(thread), limit=2))
        costs.append(count[0] - before)
        assert latest is not None and latest.metadata["step"] == length - 1
        assert latest.checkpoint["channel_values"] == {"step": length - 1, "log": ["x"] * 50}
        assert latest.pending_writes == [("t", "step", length - 1)]
        assert [t.metadata["step"] for t in listed] == [length - 1, length - 2]
    assert abs(costs[1] - costs[0]) <= 2 and costs[0] < 60, costs


def test_copy_and_prune(saver: A2Saver) -> None:
    """copy_thread copies every namespace; prune keeps each namespace's latest checkpoint,
    its values and its writes; prune "delete" deletes."""
    for namespace in ("", "child:1"):
        parent = None
        for step in range(3):
            stored = saver.put(
                config("src", namespace, parent), checkpoint(n=step), {**META, "step": step}, {}
            )
            parent = stored["configurable"]["checkpoint_id"]
        saver.put_writes(stored, [("n", "w")], task_id="t")
    saver.copy_thread("src", "dst")
    saver.copy_thread("src", "dst")  # again: a replay
    for namespace in ("", "child:1"):
        source = [t.checkpoint["id"] for t in saver.list(config("src", namespace))]
        copied = [t.checkpoint["id"] for t in saver.list(config("dst", namespace))]
        assert copied == source and len(source) == 3
    saver.prune(["dst"])
    for namespace in ("", "child:1"):
        kept = list(saver.list(config("dst", namespace)))
        assert [t.metadata["step"] for t in kept] == [2]
        assert kept[0].pending_writes == [("t", "n", "w")]
        assert len(saver.store.read(saver.session_id("dst", namespace))) == 2
    saver.prune(["dst"], strategy="delete")
    assert list(saver.list(config("dst", None))) == []
    assert len(list(saver.list(config("src", None)))) == 6
    with pytest.raises(ValueError, match="strategy"):
        saver.prune(["src"], strategy="keep_some")


def test_delete_for_runs_says_why_it_is_not_supported(saver: A2Saver) -> None:
    with pytest.raises(NotImplementedError, match="no index of run ids"):
        saver.delete_for_runs(["run-1"])
    with pytest.raises(NotImplementedError, match="no index of run ids"):
        asyncio.run(saver.adelete_for_runs(["run-1"]))


def test_the_async_saver_blocks_only_off_its_loop(tmp_path: Path) -> None:
    """As LangGraph's own async savers: a sync call on the saver's loop is refused, one
    from another thread waits for the loop to run it."""
    url = f"sqlite:///{tmp_path / 'a2.db'}"

    async def main() -> None:
        async with a2sql.create_async_store(url, migrate=True) as store:
            with pytest.raises(TypeError, match="use AsyncA2Saver"):
                A2Saver(store)  # type: ignore[arg-type]
            saver = AsyncA2Saver(store)
            stored = await saver.aput(config("t"), checkpoint(a=1), META, {"a": 1})
            with pytest.raises(asyncio.InvalidStateError, match="another thread"):
                saver.get_tuple(stored)
            got = await asyncio.to_thread(saver.get_tuple, stored)
            assert got is not None and got.checkpoint["channel_values"] == {"a": 1}
            listed = await asyncio.to_thread(lambda: list(saver.list(config("t"))))
            assert len(listed) == 1

    asyncio.run(main())


# --- the core does not import LangGraph ---------------------------------------------------


def test_the_core_imports_no_langgraph() -> None:
    ran = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, a2sql, a2sql.worker, a2sql.integrations; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('langgraph', 'langchain_core')))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert ran.stdout.strip() == "[]"


# --- docs/integrations/langgraph.md ----------------------------------------------------------


def test_the_page_examples_print_what_the_page_says(tmp_path: Path) -> None:
    found = examples(PAGE)
    assert found, "the page has examples, each with what it prints"
    for number, (code, prints) in enumerate(found, 1):
        assert_prints(code, prints, tmp_path, f"example {number}")
