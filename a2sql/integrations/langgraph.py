"""LangGraph checkpoints on a2sql: ``A2Saver`` (on a ``Store``) and ``AsyncA2Saver`` (on an
``AsyncStore``), ``pip install '.[langgraph]'`` in a clone.

How LangGraph's records map onto a2sql's log:

- a thread's checkpoint namespace is a **session**, ``langgraph/<thread>/<namespace>``
  (each part percent-encoded, or ``~`` and its SHA-256 when long), so that every
  namespace of a thread is found by the prefix ``langgraph/<thread>/``;
- a checkpoint, a channel's value at one version (a blob), and the writes of one
  ``put_writes`` call are each an **event**, appended ``settled=True``: records, never
  work a worker claims;
- every event has a deterministic id (a digest of its session, then the checkpoint
  id, the channel and version, or the checkpoint id and a sequence number), so a
  checkpoint, a blob, or a checkpoint's writes are each found by one seek of the
  index of event ids (``inspect.event``), and a retried call is an idempotent replay.

Values go through LangGraph's serializer (``serde.dumps_typed``), base64 in the
payload. A checkpoint and its metadata are kept as plain JSON when they are (so the
web UI shows them), else through the serializer too.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import heapq
import json
import math
import random
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast
from urllib.parse import quote

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        PendingWrite,
        get_checkpoint_id,
        get_serializable_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as missing:  # said to whoever lacks the extra
    raise ImportError(
        f"a2sql.integrations.langgraph needs {missing.name}, which the langgraph extra "
        "installs: pip install -e '.[langgraph]' in a clone"
    ) from missing

from a2sql.api.async_store import AsyncOperations, AsyncStore
from a2sql.api.store import Operations, Store
from a2sql.core.errors import A2Error, ErrorCode
from a2sql.core.records import AppendResult, DeleteResult, NewEvent, SessionPage, StoredEvent

__all__ = ["A2Saver", "AsyncA2Saver"]

T = TypeVar("T")

CHECKPOINT = "langgraph.checkpoint"
BLOB = "langgraph.blob"
WRITES = "langgraph.writes"

DEFAULT_PREFIX = "langgraph/"
_LONGEST_PREFIX = 32
# Session id: prefix (<= 32) + thread (<= 110) + "/" + namespace (<= 110) <= 253.
_THREAD_CHARS = 110
# Event id: "langgraph/" + 32 hex + "/c/" + checkpoint (<= 150) <= 195;
# "/b/" + channel (<= 90) + "/" + version (<= 90) <= 226; "/w/" + checkpoint + "/" + n <= 215.
_CHECKPOINT_CHARS = 150
_CHANNEL_CHARS = 90
# Characters a part keeps as they are, besides ASCII letters, digits and "_.-"; every
# other one is percent-encoded ("/" and "%" among them, and "~", which marks a digest).
_KEPT = ":@+=,!$'()*;|"
# Pages of a backward walk: small first (the latest checkpoint is a few events from
# the end), larger as a long list goes on.
_FIRST_PAGE = 16
_LARGEST_PAGE = 256
_COPY_BATCH = 200
_SESSION_PAGE = 500
_INT64_MAX = 2**63 - 1
_ATOMIC_TRIES = 3
# a2sql refuses payload integers past this many bits (docs/python-api.md).
_JSON_INT_BITS = 13_000
_JSON_DEPTH = 200


# --- what the logic asks of a store -------------------------------------------------
#
# The savers' logic is written once, as generators that yield these requests and are
# sent the answers; A2Saver runs them on a Store, AsyncA2Saver awaits them on an
# AsyncStore.


@dataclass(frozen=True, slots=True)
class _Event:
    """``inspect.event(event_id)``: a ``StoredEvent`` or ``None``."""

    event_id: str


@dataclass(frozen=True, slots=True)
class _Read:
    """``read(session_id, after_index=..., through_index=...)``: a list of events."""

    session_id: str
    after: int
    through: int


@dataclass(frozen=True, slots=True)
class _Frontier:
    """The session's last index (0 when it has no events)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class _Append:
    """``append(session_id, events)``: an ``AppendResult``; its ``A2Error`` is thrown in."""

    session_id: str
    events: list[NewEvent]


@dataclass(frozen=True, slots=True)
class _Sessions:
    """``inspect.list_sessions(prefix=..., cursor=...)``: a ``SessionPage``."""

    prefix: str
    cursor: str | None


@dataclass(frozen=True, slots=True)
class _Delete:
    """``delete_session(session_id)``: a ``DeleteResult``."""

    session_id: str


@dataclass(frozen=True, slots=True)
class _Emit:
    """A checkpoint tuple ``list`` yields to its caller."""

    value: CheckpointTuple


@dataclass(frozen=True, slots=True)
class _Atomic:
    """Run ``job()`` in one transaction (``store.begin()`` and ``store.using``); tried again
    from the start, up to three times, when it raises ``_Changed``."""

    job: Callable[[], Generator[Any, Any, None]]


_Op = _Event | _Read | _Frontier | _Append | _Sessions | _Delete | _Emit | _Atomic
_Steps = Generator[_Op, Any, T]


class _Changed(Exception):
    """A session changed under a rewrite (``prune``): roll it back and try again."""


def _call(store: Store, ops: Operations, op: _Op) -> Any:
    if isinstance(op, _Event):
        return ops.inspect.event(op.event_id)
    if isinstance(op, _Read):
        return ops.read(op.session_id, after_index=op.after, through_index=op.through)
    if isinstance(op, _Frontier):
        page = ops.inspect.read_events(op.session_id, after_index=_INT64_MAX, limit=1)
        return page.through_index
    if isinstance(op, _Append):
        return ops.append(op.session_id, op.events)
    if isinstance(op, _Sessions):
        return ops.inspect.list_sessions(prefix=op.prefix, cursor=op.cursor, limit=_SESSION_PAGE)
    if isinstance(op, _Delete):
        return ops.delete_session(op.session_id)
    if isinstance(op, _Atomic):
        for _ in range(_ATOMIC_TRIES):
            try:
                with store.begin() as connection:
                    return _finish(_drive(store, store.using(connection), op.job()))
            except _Changed:
                continue
        raise RuntimeError("the thread kept changing while it was pruned: try again")
    raise AssertionError(f"not a request: {op!r}")


def _drive(store: Store, ops: Operations, steps: _Steps[T]) -> Generator[CheckpointTuple, None, T]:
    """Run ``steps`` on ``ops``: yield what it emits, return what it returns."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = steps.throw(error) if error is not None else steps.send(answer)
        except StopIteration as stop:
            return cast(T, stop.value)
        answer, error = None, None
        if isinstance(op, _Emit):
            yield op.value
            continue
        try:
            answer = _call(store, ops, op)
        except Exception as raised:
            error = raised


def _finish(driven: Generator[CheckpointTuple, None, T]) -> T:
    try:
        next(driven)
    except StopIteration as stop:
        return cast(T, stop.value)
    raise AssertionError("only list emits checkpoint tuples")


async def _acall(store: AsyncStore, ops: AsyncOperations, op: _Op) -> Any:
    if isinstance(op, _Event):
        return await ops.inspect.event(op.event_id)
    if isinstance(op, _Read):
        return await ops.read(op.session_id, after_index=op.after, through_index=op.through)
    if isinstance(op, _Frontier):
        page = await ops.inspect.read_events(op.session_id, after_index=_INT64_MAX, limit=1)
        return page.through_index
    if isinstance(op, _Append):
        return await ops.append(op.session_id, op.events)
    if isinstance(op, _Sessions):
        return await ops.inspect.list_sessions(
            prefix=op.prefix, cursor=op.cursor, limit=_SESSION_PAGE
        )
    if isinstance(op, _Delete):
        return await ops.delete_session(op.session_id)
    if isinstance(op, _Atomic):
        for _ in range(_ATOMIC_TRIES):
            try:
                async with store.begin() as connection:
                    return await _arun(store, store.using(connection), op.job())
            except _Changed:
                continue
        raise RuntimeError("the thread kept changing while it was pruned: try again")
    raise AssertionError(f"not a request: {op!r}")


async def _arun(store: AsyncStore, ops: AsyncOperations, steps: _Steps[T]) -> T:
    """Run ``steps`` on ``ops`` to its result (it emits nothing)."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = steps.throw(error) if error is not None else steps.send(answer)
        except StopIteration as stop:
            return cast(T, stop.value)
        answer, error = None, None
        if isinstance(op, _Emit):
            raise AssertionError("only list emits checkpoint tuples")
        try:
            answer = await _acall(store, ops, op)
        except Exception as raised:
            error = raised


async def _aiterate(store: AsyncStore, steps: _Steps[None]) -> AsyncIterator[CheckpointTuple]:
    """Run ``steps`` on ``store``, yielding what it emits."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = steps.throw(error) if error is not None else steps.send(answer)
        except StopIteration:
            return
        answer, error = None, None
        if isinstance(op, _Emit):
            yield op.value
            continue
        try:
            answer = await _acall(store, store, op)
        except Exception as raised:
            error = raised


async def _next(items: AsyncIterator[CheckpointTuple]) -> CheckpointTuple:
    """``anext`` as a coroutine (``run_coroutine_threadsafe`` takes nothing else)."""
    return await anext(items)


def _collect(steps: _Steps[None]) -> _Steps[list[tuple[Any, str, CheckpointTuple]]]:
    """Run ``steps``, keeping what it emits (with its checkpoint's time and id) instead
    of emitting it."""
    kept: list[tuple[Any, str, CheckpointTuple]] = []
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = steps.throw(error) if error is not None else steps.send(answer)
        except StopIteration:
            return kept
        answer, error = None, None
        if isinstance(op, _Emit):
            item = op.value
            kept.append((item.checkpoint.get("ts", ""), item.checkpoint["id"], item))
            continue
        try:
            answer = yield op
        except Exception as raised:
            error = raised


# --- names ---------------------------------------------------------------------------


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _part(text: str, longest: int) -> str:
    """``text`` percent-encoded (no ``/``, no ``~``), or ``~`` and its SHA-256 when longer
    than ``longest``: unambiguous either way, and never empty-looking for a prefix."""
    encoded = quote(text, safe=_KEPT, errors="surrogatepass").replace("~", "%7E")
    return encoded if len(encoded) <= longest else "~" + _digest(text)


def _version_part(version: object) -> str:
    # JSON tells 1, 1.0 and "1" apart, as the stored channel_versions do.
    return _part(json.dumps(version), _CHANNEL_CHARS)


def _is_text(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: a2sql stores none
        return False
    return True


def _plain(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is JSON that a2sql stores and gives back as the same value and
    types (exact dicts, lists, str, int, finite float, bool, None)."""
    kind = type(value)
    if value is None or kind is bool:
        return True
    if kind is str:
        return _is_text(cast(str, value))
    if kind is int:
        return cast(int, value).bit_length() <= _JSON_INT_BITS
    if kind is float:
        return math.isfinite(cast(float, value))
    if depth >= _JSON_DEPTH:
        return False
    if kind is list:
        return all(_plain(item, depth + 1) for item in cast(list[object], value))
    if kind is dict:
        return all(
            type(key) is str and _is_text(key) and _plain(item, depth + 1)
            for key, item in cast(dict[object, object], value).items()
        )
    return False


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    return config.get("configurable") or {}


def _thread_of(config: RunnableConfig) -> str:
    thread_id = _configurable(config).get("thread_id")
    if thread_id is None:
        raise ValueError('a checkpoint needs config["configurable"]["thread_id"]')
    return str(thread_id)


def _namespace_of(config: RunnableConfig) -> str:
    return str(_configurable(config).get("checkpoint_ns") or "")


def _config(thread_id: str, namespace: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": namespace,
            "checkpoint_id": checkpoint_id,
        }
    }


class _Seen:
    """What one call has read of one session: its events by id, and whether it read all
    of them (then an id it did not see is not stored, and needs no seek)."""

    __slots__ = ("by_id", "complete", "frontier", "session_id")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.by_id: dict[str, StoredEvent] = {}
        self.complete = False
        self.frontier = 0

    def keep(self, events: Sequence[StoredEvent]) -> None:
        for event in events:
            self.by_id[event.id] = event


class _A2Checkpoints(BaseCheckpointSaver[str]):
    """What ``A2Saver`` and ``AsyncA2Saver`` share: the mapping, as steps on a store."""

    def __init__(self, *, prefix: str, serde: SerializerProtocol | None) -> None:
        super().__init__(serde=serde)
        if (
            not isinstance(prefix, str)
            or not prefix
            or len(prefix) > _LONGEST_PREFIX
            or "\x00" in prefix
            or not _is_text(prefix)
        ):
            raise ValueError(f"prefix must be a str of 1 to {_LONGEST_PREFIX} characters")
        self._prefix = prefix

    @property
    def prefix(self) -> str:
        """The start of every session id this saver writes (``"langgraph/"`` by default)."""
        return self._prefix

    # --- names ---------------------------------------------------------------------

    def session_id(self, thread_id: str, checkpoint_ns: str = "") -> str:
        """The a2sql session that holds a thread's checkpoints in one namespace.

        ``<prefix><thread>/<namespace>``, each part percent-encoded (``/``, ``%`` and
        ``~`` included), or ``~`` and its SHA-256 when it would be longer than 110
        characters: unambiguous, at most 255 characters, and every namespace of a
        thread starts with ``<prefix><thread>/``.
        """
        return f"{self._thread_prefix(str(thread_id))}{_part(checkpoint_ns, _THREAD_CHARS)}"

    def _thread_prefix(self, thread_id: str) -> str:
        return f"{self._prefix}{_part(thread_id, _THREAD_CHARS)}/"

    @staticmethod
    def _base(session_id: str) -> str:
        return f"langgraph/{_digest(session_id)[:32]}"

    def _checkpoint_id(self, session_id: str, checkpoint_id: str) -> str:
        return f"{self._base(session_id)}/c/{_part(checkpoint_id, _CHECKPOINT_CHARS)}"

    def _blob_id(self, session_id: str, channel: str, version: object) -> str:
        channel_part = _part(channel, _CHANNEL_CHARS)
        return f"{self._base(session_id)}/b/{channel_part}/{_version_part(version)}"

    def _writes_id(self, session_id: str, checkpoint_id: str, number: int) -> str:
        return f"{self._base(session_id)}/w/{_part(checkpoint_id, _CHECKPOINT_CHARS)}/{number}"

    # --- values --------------------------------------------------------------------

    def _dump(self, value: Any) -> list[str]:
        kind, data = self.serde.dumps_typed(value)
        return [kind, base64.b64encode(data).decode("ascii")]

    def _load(self, stored: Any) -> Any:
        kind, data = stored
        return self.serde.loads_typed((str(kind), base64.b64decode(data)))

    def _keep(self, payload: dict[str, Any], key: str, value: Any) -> None:
        """Plain JSON under ``key`` when it is, else the serializer's under ``key_typed``."""
        if _plain(value):
            payload[key] = value
        else:
            payload[f"{key}_typed"] = self._dump(value)

    def _kept(self, payload: dict[str, Any], key: str) -> Any:
        if key in payload:
            return payload[key]
        return self._load(payload[f"{key}_typed"])

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next version of a channel: its number, zero-padded, and a random part.

        Random, as LangGraph's own savers make them, so that a graph resumed from an
        older checkpoint (time travel) writes a version no other checkpoint of the
        thread holds: a blob is stored once per version, under an id made of it.
        """
        if current is None:
            number = 0
        elif isinstance(current, int | float):
            number = int(current)
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.getrandbits(64):016x}"

    # --- steps ---------------------------------------------------------------------

    def _append_new(self, session_id: str, events: list[NewEvent]) -> _Steps[None]:
        """Append the events not stored yet: a blob stored before keeps its value (as
        LangGraph's SQL savers keep the first row of a version); a checkpoint stored
        before with other content cannot be replaced in an append-only log."""
        try:
            yield _Append(session_id, events)
            return
        except A2Error as error:
            if error.code not in (
                ErrorCode.PARTIAL_DUPLICATE_BATCH,
                ErrorCode.IDEMPOTENCY_CONFLICT,
            ):
                raise
        missing: list[NewEvent] = []
        for event in events:
            assert event.id is not None
            stored: StoredEvent | None = yield _Event(event.id)
            if stored is None:
                missing.append(event)
            elif stored.session_id != session_id:
                raise ValueError(f"event id {event.id!r} is stored in another session")
            elif event.type == CHECKPOINT and stored.payload != event.payload:
                raise ValueError(
                    f"checkpoint {cast(dict[str, Any], event.payload)['checkpoint_id']!r} "
                    f"is stored already in session {session_id!r}, with other content; "
                    "a2sql's log is append-only: a checkpoint is never replaced"
                )
        if missing:
            yield _Append(session_id, missing)

    def _put_steps(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> _Steps[RunnableConfig]:
        thread_id, namespace = _thread_of(config), _namespace_of(config)
        session_id = self.session_id(thread_id, namespace)
        body = cast(dict[str, Any], dict(checkpoint))
        values = cast(dict[str, Any], body.pop("channel_values", None) or {})
        # A channel's value is stored once per version (the channels of new_versions),
        # and a checkpoint is rebuilt from its channel_versions by the blobs' ids. The
        # conformance suite accepts full values in every checkpoint too (its checkpoints
        # carry them whole), but a growing channel (a conversation's messages) would
        # then be stored again at every step, its history quadratic in its length.
        events: list[NewEvent] = []
        for channel, version in new_versions.items():
            payload: dict[str, Any] = {"channel": channel, "version": version}
            payload["value"] = self._dump(values[channel]) if channel in values else ["empty", ""]
            events.append(
                NewEvent(
                    BLOB,
                    payload,
                    id=self._blob_id(session_id, channel, version),
                    settled=True,
                )
            )
        record: dict[str, Any] = {
            "thread_id": thread_id,
            "checkpoint_ns": namespace,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": _configurable(config).get("checkpoint_id"),
        }
        self._keep(record, "checkpoint", body)
        self._keep(record, "metadata", get_serializable_checkpoint_metadata(config, metadata))
        events.append(
            NewEvent(
                CHECKPOINT,
                record,
                id=self._checkpoint_id(session_id, checkpoint["id"]),
                settled=True,
            )
        )
        yield from self._append_new(session_id, events)
        return _config(thread_id, namespace, checkpoint["id"])

    def _taken(self, session_id: str, checkpoint_id: str, number: int) -> _Steps[bool]:
        found = yield _Event(self._writes_id(session_id, checkpoint_id, number))
        return found is not None

    def _first_free(self, session_id: str, checkpoint_id: str, start: int) -> _Steps[int]:
        """The first free number of a checkpoint's writes at or after ``start``.

        The numbers taken are always 1 to n (each is appended only once the one
        before it is seen taken), so a galloping search finds n + 1 in about
        2 log n seeks.
        """
        taken, probe, step = start - 1, start, 1
        while (yield from self._taken(session_id, checkpoint_id, probe)):
            taken, probe, step = probe, probe + step, step * 2
        free = probe
        while free - taken > 1:
            middle = (taken + free) // 2
            if (yield from self._taken(session_id, checkpoint_id, middle)):
                taken = middle
            else:
                free = middle
        return free

    def _put_writes_steps(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> _Steps[None]:
        if not writes:
            return
        thread_id, namespace = _thread_of(config), _namespace_of(config)
        checkpoint_id = _configurable(config).get("checkpoint_id")
        if not checkpoint_id:
            raise ValueError('writes need config["configurable"]["checkpoint_id"]')
        session_id = self.session_id(thread_id, namespace)
        stored = [
            [WRITES_IDX_MAP.get(channel, idx), channel, *self._dump(value)]
            for idx, (channel, value) in enumerate(writes)
        ]
        number = yield from self._first_free(session_id, checkpoint_id, 1)
        while True:
            payload = {
                "checkpoint_ns": namespace,
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "task_path": task_path,
                "n": number,
                "writes": stored,
            }
            event_id = self._writes_id(session_id, checkpoint_id, number)
            try:
                yield _Append(session_id, [NewEvent(WRITES, payload, id=event_id, settled=True)])
                return
            except A2Error as error:
                # Another call took this number first: the next free one.
                if error.code != ErrorCode.IDEMPOTENCY_CONFLICT:
                    raise
            number = yield from self._first_free(session_id, checkpoint_id, number + 1)

    def _writes_of(self, seen: _Seen, checkpoint_id: str) -> _Steps[list[PendingWrite]]:
        """A checkpoint's pending writes, in ``writes_sort_key`` order. A regular write
        (task, idx) keeps its first value, a special one (errors, interrupts, resumes:
        ``WRITES_IDX_MAP``) its last, as LangGraph's savers keep them."""
        found: dict[tuple[str, int], tuple[str, str, str, Any]] = {}
        number = 1
        while True:
            event_id = self._writes_id(seen.session_id, checkpoint_id, number)
            event = seen.by_id.get(event_id)
            if event is None and not seen.complete:
                event = yield _Event(event_id)
            if event is None or event.session_id != seen.session_id:
                break
            payload = cast(dict[str, Any], event.payload)
            task_id, task_path = str(payload["task_id"]), str(payload["task_path"])
            for idx, channel, kind, data in payload["writes"]:
                key = (task_id, int(idx))
                if key in found and int(idx) >= 0:
                    continue
                found[key] = (task_path, task_id, channel, [kind, data])
            number += 1
        ordered = sorted(found.items(), key=lambda item: writes_sort_key(item[1][0], *item[0]))
        return [
            (task_id, channel, self._load(value)) for _, (_, task_id, channel, value) in ordered
        ]

    def _values_of(self, seen: _Seen, versions: ChannelVersions) -> _Steps[dict[str, Any]]:
        values: dict[str, Any] = {}
        for channel, version in versions.items():
            event_id = self._blob_id(seen.session_id, channel, version)
            event = seen.by_id.get(event_id)
            if event is None and not seen.complete:
                event = yield _Event(event_id)
            if event is None or event.session_id != seen.session_id:
                continue
            stored = cast(dict[str, Any], event.payload)["value"]
            if stored[0] != "empty":
                values[channel] = self._load(stored)
        return values

    def _tuple(self, seen: _Seen, event: StoredEvent) -> _Steps[CheckpointTuple]:
        record = cast(dict[str, Any], event.payload)
        thread_id, namespace = str(record["thread_id"]), str(record["checkpoint_ns"])
        body = cast(dict[str, Any], dict(self._kept(record, "checkpoint")))
        values = yield from self._values_of(seen, body.get("channel_versions") or {})
        writes = yield from self._writes_of(seen, record["checkpoint_id"])
        parent = record.get("parent_checkpoint_id")
        return CheckpointTuple(
            config=_config(thread_id, namespace, record["checkpoint_id"]),
            checkpoint=cast(Checkpoint, {**body, "channel_values": values}),
            metadata=cast(CheckpointMetadata, self._kept(record, "metadata")),
            parent_config=_config(thread_id, namespace, parent) if parent else None,
            pending_writes=writes,
        )

    def _latest(self, seen: _Seen) -> _Steps[StoredEvent | None]:
        """The session's last checkpoint, read back from its end page by page."""
        through: int = yield _Frontier(seen.session_id)
        seen.frontier = through
        size = _FIRST_PAGE
        while through > 0:
            after = max(0, through - size)
            page: list[StoredEvent] = yield _Read(seen.session_id, after, through)
            seen.keep(page)
            seen.complete = after == 0
            for event in reversed(page):
                if event.type == CHECKPOINT:
                    return event
            through, size = after, min(size * 2, _LARGEST_PAGE)
        return None

    def _get_tuple_steps(self, config: RunnableConfig) -> _Steps[CheckpointTuple | None]:
        seen = _Seen(self.session_id(_thread_of(config), _namespace_of(config)))
        checkpoint_id = get_checkpoint_id(config)
        event: StoredEvent | None
        if checkpoint_id:
            event = yield _Event(self._checkpoint_id(seen.session_id, checkpoint_id))
            if event is not None and event.session_id != seen.session_id:
                event = None
        else:
            event = yield from self._latest(seen)
        if event is None:
            return None
        return (yield from self._tuple(seen, event))

    def _session_steps(
        self,
        session_id: str,
        *,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before: str | None,
        limit: int | None,
    ) -> _Steps[None]:
        """Emit the session's matching checkpoints, newest first (by index: the order
        they were put in)."""
        seen = _Seen(session_id)
        if limit is not None and limit <= 0:
            return
        if checkpoint_id is not None:
            event = yield _Event(self._checkpoint_id(session_id, checkpoint_id))
            if event is None or event.session_id != session_id:
                return
            if before is not None and not str(checkpoint_id) < before:
                return
            if self._matches(event, filter):
                yield _Emit((yield from self._tuple(seen, event)))
            return
        frontier: int = yield _Frontier(session_id)
        through, compare_ids = frontier, before is not None
        if before is not None:
            # Where the checkpoint `before` names is in this session, the walk starts
            # just before it; otherwise checkpoint ids are compared, as LangGraph's own
            # savers compare them.
            marker = yield _Event(self._checkpoint_id(session_id, before))
            if marker is not None and marker.session_id == session_id:
                through, compare_ids = marker.index - 1, False
        size, left = _FIRST_PAGE, limit
        from_the_end = through == frontier
        while through > 0:
            after = max(0, through - size)
            page: list[StoredEvent] = yield _Read(session_id, after, through)
            seen.keep(page)
            # Read from the end down to index 1: an id not seen is not stored.
            seen.complete = after == 0 and from_the_end
            for event in reversed(page):
                if event.type != CHECKPOINT:
                    continue
                record = cast(dict[str, Any], event.payload)
                if compare_ids and not str(record["checkpoint_id"]) < cast(str, before):
                    continue
                if not self._matches(event, filter):
                    continue
                yield _Emit((yield from self._tuple(seen, event)))
                if left is not None:
                    left -= 1
                    if left <= 0:
                        return
            through, size = after, min(size * 2, _LARGEST_PAGE)

    def _matches(self, event: StoredEvent, filter: dict[str, Any] | None) -> bool:
        """Each key of ``filter`` equal to the metadata's (as LangGraph's InMemorySaver
        compares them)."""
        if not filter:
            return True
        metadata = cast(dict[str, Any], self._kept(cast(dict[str, Any], event.payload), "metadata"))
        return all(key in metadata and metadata[key] == value for key, value in filter.items())

    def _sessions_under(self, prefix: str) -> _Steps[list[str]]:
        """The ids of the sessions under ``prefix`` that this saver's names can be: the
        rest of the id is ``<thread>/<namespace>``, with no other ``/``."""
        found: list[str] = []
        cursor: str | None = None
        while True:
            page: SessionPage = yield _Sessions(prefix, cursor)
            found.extend(
                summary.session_id
                for summary in page.sessions
                if summary.session_id[len(self._prefix) :].count("/") == 1
            )
            if page.cursor is None:
                return found
            cursor = page.cursor

    def _list_steps(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> _Steps[None]:
        if limit is not None and limit <= 0:
            return
        before_id = get_checkpoint_id(before) if before else None
        checkpoint_id = get_checkpoint_id(config) if config else None
        if config is not None:
            namespace = _configurable(config).get("checkpoint_ns")
            if namespace is not None:
                yield from self._session_steps(
                    self.session_id(_thread_of(config), str(namespace)),
                    checkpoint_id=checkpoint_id,
                    filter=filter,
                    before=before_id,
                    limit=limit,
                )
                return
            sessions = yield from self._sessions_under(self._thread_prefix(_thread_of(config)))
        else:
            sessions = yield from self._sessions_under(self._prefix)
        if config is None:
            # Every thread: session after session, by session id, each newest first.
            left = limit
            for session_id in sessions:
                emitted = yield from _collect(
                    self._session_steps(
                        session_id,
                        checkpoint_id=None,
                        filter=filter,
                        before=before_id,
                        limit=left,
                    )
                )
                for item in emitted:
                    yield _Emit(item[2])
                if left is not None:
                    left -= len(emitted)
                    if left <= 0:
                        return
            return
        # One thread, every namespace: merged newest first by the time they were put.
        runs: list[list[tuple[Any, str, CheckpointTuple]]] = []
        for session_id in sessions:
            emitted = yield from _collect(
                self._session_steps(
                    session_id,
                    checkpoint_id=checkpoint_id,
                    filter=filter,
                    before=before_id,
                    limit=limit,
                )
            )
            runs.append(emitted)
        merged = heapq.merge(*runs, key=lambda item: (item[0], item[1]), reverse=True)
        for count, item in enumerate(merged):
            if limit is not None and count >= limit:
                return
            yield _Emit(item[2])

    def _delete_thread_steps(self, thread_id: str) -> _Steps[None]:
        for session_id in (yield from self._sessions_under(self._thread_prefix(str(thread_id)))):
            yield _Delete(session_id)

    def _copy_thread_steps(self, source_thread_id: str, target_thread_id: str) -> _Steps[None]:
        source = self._thread_prefix(str(source_thread_id))
        target = self._thread_prefix(str(target_thread_id))
        for session_id in (yield from self._sessions_under(source)):
            # The same namespace part, under the target thread.
            target_session = target + session_id[len(source) :]
            through: int = yield _Frontier(session_id)
            after = 0
            while after < through:
                page: list[StoredEvent] = yield _Read(
                    session_id, after, min(through, after + _COPY_BATCH)
                )
                if not page:
                    break
                after = page[-1].index
                batch = [
                    copied
                    for event in page
                    if (copied := self._copied(event, target_session, str(target_thread_id)))
                ]
                if batch:
                    yield from self._append_new(target_session, batch)

    def _copied(self, event: StoredEvent, session_id: str, thread_id: str) -> NewEvent | None:
        """``event`` as the target thread's session holds it: its id made from that
        session, a checkpoint naming the target thread."""
        payload = cast(dict[str, Any], event.payload)
        if event.type == CHECKPOINT:
            payload = {**payload, "thread_id": thread_id}
            event_id = self._checkpoint_id(session_id, str(payload["checkpoint_id"]))
        elif event.type == BLOB:
            event_id = self._blob_id(session_id, str(payload["channel"]), payload["version"])
        elif event.type == WRITES:
            event_id = self._writes_id(session_id, str(payload["checkpoint_id"]), int(payload["n"]))
        else:
            return None
        return NewEvent(event.type, payload, id=event_id, settled=True)

    def _prune_steps(self, thread_ids: Sequence[str], strategy: str) -> _Steps[None]:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f'strategy must be "keep_latest" or "delete", got {strategy!r}')
        for thread_id in thread_ids:
            sessions = yield from self._sessions_under(self._thread_prefix(str(thread_id)))
            for session_id in sessions:
                if strategy == "delete":
                    yield _Delete(session_id)
                else:
                    yield _Atomic(partial(self._keep_latest, session_id))

    def _keep_latest(self, session_id: str) -> _Steps[None]:
        """In one transaction: the session deleted and appended again with its latest
        checkpoint alone, that checkpoint's blobs and its pending writes (same ids, same
        payloads). A session appended to meanwhile is tried again (``_Changed``)."""
        seen = _Seen(session_id)
        latest = yield from self._latest(seen)
        if latest is None:
            return
        record = cast(dict[str, Any], latest.payload)
        metadata = cast(dict[str, Any], self._kept(record, "metadata"))
        if "counters_since_delta_snapshot" in metadata:
            # A DeltaChannel rebuilds its value from the writes of earlier checkpoints
            # (LangGraph's warning on prune): such a namespace is kept whole.
            return
        body = cast(dict[str, Any], self._kept(record, "checkpoint"))
        kept: dict[str, StoredEvent] = {latest.id: latest}
        for channel, version in (body.get("channel_versions") or {}).items():
            event_id = self._blob_id(session_id, channel, version)
            blob = seen.by_id.get(event_id)
            if blob is None and not seen.complete:
                blob = yield _Event(event_id)
            if blob is not None:
                kept[blob.id] = blob
        number = 1
        while True:
            event_id = self._writes_id(session_id, str(record["checkpoint_id"]), number)
            written = seen.by_id.get(event_id)
            if written is None and not seen.complete:
                written = yield _Event(event_id)
            if written is None:
                break
            kept[written.id] = written
            number += 1
        if len(kept) == seen.frontier:
            return
        deleted: DeleteResult = yield _Delete(session_id)
        if deleted.events != seen.frontier:
            raise _Changed
        again = [
            NewEvent(event.type, event.payload, id=event.id, settled=True)
            for event in sorted(kept.values(), key=lambda event: event.index)
        ]
        result: AppendResult = yield _Append(session_id, again)
        assert not result.replayed

    @staticmethod
    def _no_delete_for_runs() -> NotImplementedError:
        return NotImplementedError(
            "a2sql's LangGraph savers do not delete_for_runs: a2sql keeps no index of run "
            "ids, so finding a run's checkpoints would read every thread in the store, and "
            "removing them from the middle of a thread would rewrite its log. Delete whole "
            "threads (delete_thread), or prune them (prune)."
        )


class A2Saver(_A2Checkpoints):
    """A LangGraph checkpointer on an a2sql ``Store`` (SQLite or PostgreSQL).

    ``graph = builder.compile(checkpointer=A2Saver(store))``. Each thread's checkpoint
    namespace is one session (``A2Saver.session_id``); checkpoints, channel values and
    pending writes are settled events in it. ``prefix`` starts every session id (one
    saver's prefix should not start another's). ``serde`` is LangGraph's serializer
    (its ``JsonPlusSerializer`` by default).

    The async methods run the sync ones in a thread (``asyncio.to_thread``); an
    asyncio application uses ``AsyncA2Saver`` on an ``AsyncStore``.
    """

    def __init__(
        self,
        store: Store,
        *,
        prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
    ) -> None:
        if not isinstance(store, Store):
            raise TypeError(
                f"A2Saver takes an a2sql Store, got {type(store).__name__}"
                + (": use AsyncA2Saver" if isinstance(store, AsyncStore) else "")
            )
        super().__init__(prefix=prefix, serde=serde)
        self.store = store

    def _run(self, steps: _Steps[T]) -> T:
        return _finish(_drive(self.store, self.store, steps))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (``checkpoint_id``), else the thread's latest in
        its namespace, with its channel values and pending writes; ``None`` if none.

        By id: one seek for the checkpoint, one per channel value, and one per
        ``put_writes`` call made on it (plus one). The latest: the session's end read
        back page by page to its last checkpoint, and the same seeks for what those
        pages did not hold.
        """
        return self._run(self._get_tuple_steps(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, in the order they were put (for LangGraph's
        time-ordered ids, descending id order).

        ``config``: a thread and namespace (one session, read back from its end, page
        by page, no further than ``limit`` needs); a thread without
        ``checkpoint_ns``: its namespaces merged by time; ``None``: every thread,
        session after session in session-id order, which lists and reads every session
        under the prefix until ``limit`` is reached (an operator's call, not a hot
        path). ``filter``: metadata keys that must be equal. ``before``: only
        checkpoints put before that one.
        """
        return _drive(self.store, self.store, self._list_steps(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint, and the values of the channels in ``new_versions``, in one
        append (one transaction); returns the config naming it. A retry replays."""
        return self._run(self._put_steps(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes on the checkpoint ``config`` names, as one event."""
        self._run(self._put_writes_steps(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread: every namespace's session (``store.delete_session``)."""
        self._run(self._delete_thread_steps(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, value and pending write of a thread to another thread, in
        the order they were put. Each batch is one append; a copy interrupted halfway is
        completed by calling it again (the copies' ids are deterministic)."""
        self._run(self._copy_thread_steps(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"delete"``: delete the threads. ``"keep_latest"``: keep each namespace's latest
        checkpoint, its values and pending writes; in one transaction per namespace, its
        session is deleted and those events appended again (their ids and payloads as
        they were, their indexes from 1). A namespace whose graph uses LangGraph's
        ``DeltaChannel`` (its metadata counts ``counters_since_delta_snapshot``) is kept
        whole: its values are rebuilt from earlier checkpoints' writes."""
        self._run(self._prune_steps(thread_ids, strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Not supported (``NotImplementedError``): a2sql keeps no index of run ids."""
        raise self._no_delete_for_runs()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``get_tuple`` in a thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """``list``, each step in a thread."""
        listed = self.list(config, filter=filter, before=before, limit=limit)
        done = object()
        while (item := await asyncio.to_thread(next, listed, done)) is not done:
            yield cast(CheckpointTuple, item)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``put`` in a thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """``put_writes`` in a thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """``delete_thread`` in a thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """``copy_thread`` in a thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``prune`` in a thread."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Not supported, as ``delete_for_runs``."""
        raise self._no_delete_for_runs()


class AsyncA2Saver(_A2Checkpoints):
    """A LangGraph checkpointer on an a2sql ``AsyncStore``, for ``graph.ainvoke`` and
    ``astream``: the same records as ``A2Saver``, so either reads what the other wrote.

    Create it on the event loop it will serve. Its sync methods, as LangGraph's own
    async savers', work only from another thread than that loop's (they wait for the
    loop to run the call) and raise ``asyncio.InvalidStateError`` on it.
    """

    def __init__(
        self,
        store: AsyncStore,
        *,
        prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
    ) -> None:
        if not isinstance(store, AsyncStore):
            raise TypeError(
                f"AsyncA2Saver takes an a2sql AsyncStore, got {type(store).__name__}"
                + (": use A2Saver" if isinstance(store, Store) else "")
            )
        super().__init__(prefix=prefix, serde=serde)
        self.store = store
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    def _noting_loop(self) -> None:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()

    async def _arun_steps(self, steps: _Steps[T]) -> T:
        self._noting_loop()
        return await _arun(self.store, self.store, steps)

    def _blocking(self, name: str) -> asyncio.AbstractEventLoop:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self.loop is None:
            raise asyncio.InvalidStateError(
                f"AsyncA2Saver.{name} needs the event loop the saver serves: create the "
                "saver on that loop (or make an async call first), or use A2Saver"
            )
        if running is self.loop:
            raise asyncio.InvalidStateError(
                f"synchronous calls to AsyncA2Saver ({name}) are only allowed from another "
                f"thread than its event loop's: use a{name}(...), or await graph.ainvoke(...)"
            )
        return self.loop

    def _wait(self, name: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        loop = self._blocking(name)
        return asyncio.run_coroutine_threadsafe(call(), loop).result()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As ``A2Saver.get_tuple``."""
        return await self._arun_steps(self._get_tuple_steps(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """As ``A2Saver.list``."""
        self._noting_loop()
        async for item in _aiterate(self.store, self._list_steps(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """As ``A2Saver.put``."""
        return await self._arun_steps(self._put_steps(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """As ``A2Saver.put_writes``."""
        await self._arun_steps(self._put_writes_steps(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """As ``A2Saver.delete_thread``."""
        await self._arun_steps(self._delete_thread_steps(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """As ``A2Saver.copy_thread``."""
        await self._arun_steps(self._copy_thread_steps(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """As ``A2Saver.prune``."""
        await self._arun_steps(self._prune_steps(thread_ids, strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Not supported (``NotImplementedError``): a2sql keeps no index of run ids."""
        raise self._no_delete_for_runs()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``aget_tuple`` on the saver's loop, from another thread."""
        return self._wait("get_tuple", partial(self.aget_tuple, config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """``alist`` on the saver's loop, from another thread."""
        loop = self._blocking("list")
        listed = self.alist(config, filter=filter, before=before, limit=limit)
        while True:
            try:
                yield asyncio.run_coroutine_threadsafe(_next(listed), loop).result()
            except StopAsyncIteration:
                return

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``aput`` on the saver's loop, from another thread."""
        return self._wait("put", partial(self.aput, config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """``aput_writes`` on the saver's loop, from another thread."""
        self._wait("put_writes", partial(self.aput_writes, config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """``adelete_thread`` on the saver's loop, from another thread."""
        self._wait("delete_thread", partial(self.adelete_thread, thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """``acopy_thread`` on the saver's loop, from another thread."""
        self._wait("copy_thread", partial(self.acopy_thread, source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``aprune`` on the saver's loop, from another thread."""
        self._wait("prune", partial(self.aprune, thread_ids, strategy=strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Not supported (``NotImplementedError``): a2sql keeps no index of run ids."""
        raise self._no_delete_for_runs()
