"""The OpenAI Agents SDK's session on a2sql: a conversation is a session, an item an event.

Install the ``openai-agents`` extra (``pip install '.[openai-agents]'`` in a clone), then
pass ``A2Session(conversation_id, store)`` wherever the SDK takes a session
(``Runner.run(agent, text, session=...)``)::

    store = a2sql.create_store()  # A2SQL_DATABASE_URL, else sqlite:///.a2/dev.db
    session = A2Session("conversation-17", store)

Each conversation is one a2sql session (its id the conversation's, after an optional
``prefix``). What the SDK calls does not rewrite the log, it adds to it:

- ``add_items(items)`` appends one ``agents.item`` event per item (its payload the
  item's JSON, kept exactly), in one transaction: concurrent adders keep each
  batch whole and in order, and lose nothing;
- ``pop_item()`` appends an ``agents.pop`` event naming the index of the item it
  removes; its id is made from that index, so two processes popping at once can
  never both pop one item (the second append is a replay, and that caller pops
  the next item instead);
- ``clear_session()`` appends an ``agents.clear`` event: the items before it are
  gone.

Every one of them is appended settled (``NewEvent(settled=True)``): a record, never
work a worker could claim. Indexes are never reused, and ``store.stream``, the web UI
and ``a2sql copy`` see the conversation as it happened, pops and clears included.
Events of other types in the same session (work of your own for a worker, say) are
left alone by the session.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeVar, cast

try:
    from agents import TResponseInputItem
    from agents.memory import (
        SessionSettings,
        await_session_mutation,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as missing:  # said to whoever lacks the extra
    raise ImportError(
        f"a2sql.integrations.openai_agents needs {missing.name}, which the openai-agents extra "
        "installs: pip install -e '.[openai-agents]' in a clone"
    ) from missing

from a2sql.api.async_store import AsyncStore
from a2sql.api.store import Store
from a2sql.core.arguments import INT64_MAX, MAX_LIMIT, MAX_NAME_LENGTH
from a2sql.core.arguments import name as valid_name
from a2sql.core.errors import A2Error, ErrorCode
from a2sql.core.records import JSON, AppendResult, EventPage, NewEvent, StoredEvent

__all__ = ["CLEAR_TYPE", "ITEM_TYPE", "POP_TYPE", "A2Session"]

ITEM_TYPE: Final = "agents.item"
"""The type of the event that holds one item of the conversation, its payload the item."""
POP_TYPE: Final = "agents.pop"
"""The type of the event that removes one item: its payload ``{"index": <the item's index>}``."""
CLEAR_TYPE: Final = "agents.clear"
"""The type of the event that removes every item before it."""

# Reads walk back from the session's last index, a page at a time. A page asks for a
# range of indexes (after, through] no longer than this (a2sql's largest page).
_PAGE: Final = MAX_LIMIT
# With a limit of k items, the first page reads k indexes and this many more, for a
# pop or another event among the newest; without a limit, this many (the last clear
# may be near). Each later page reads twice as many as the one before. Small: a row
# read costs about as much as a round trip saved (SQLite), and pops are rare.
_SLACK: Final = 2
_FIRST_PAGE: Final = 16
# A first page after every index: no events, and its through_index the last index.
_FAR: Final = INT64_MAX

# No snapshot: a read walks back from the last index and stops as soon as it has what
# it returns (``limit`` items, or the last clear), so it already costs what it returns,
# whatever the conversation's length. A snapshot of the items would be the whole
# visible conversation in one JSON value, rewritten as it grows: it would save
# nothing on a bounded read, and cost a write of the whole history to save a walk
# that reads no more than that history. (A conversation whose newest events are
# mostly pops of earlier items is the one case a walk reads more than it returns:
# those pops and the items they removed.)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Read:
    """Read ``store.inspect.read_events(after_index, through_index, limit)``."""

    after: int
    through: int | None
    limit: int


@dataclass(frozen=True, slots=True)
class _Append:
    """Append these events."""

    events: list[NewEvent]


# The session's logic is written once, as generators that yield what they need from
# the store and are sent its answers; a Store runs one whole in a thread, an
# AsyncStore awaits each step.
_Steps: TypeAlias = Generator[_Read | _Append, EventPage | AppendResult, T]


class A2Session:
    """An OpenAI Agents SDK session (``agents.memory.Session``) kept in an a2sql store.

    :param session_id: the conversation's id, as the SDK names it.
    :param store: a ``Store`` (its calls run in a thread, ``asyncio.to_thread``) or an
        ``AsyncStore`` (awaited). The session does not close it.
    :param prefix: put before ``session_id`` to make the a2sql session id
        (``a2sql_session_id``), e.g. ``"chat/"``; the result must be a valid a2sql
        name (1 to 255 characters, no NUL).
    :param session_settings: the SDK's ``SessionSettings`` (or a dict of them): its
        ``limit`` is what ``get_items()`` returns at most when called without one.
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: Store | AsyncStore,
        *,
        prefix: str = "",
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(session_id, str):
            raise A2Error(
                ErrorCode.INVALID_ARGUMENT,
                f"session_id: must be a str, got {type(session_id).__name__}",
            )
        if not isinstance(prefix, str):
            raise A2Error(
                ErrorCode.INVALID_ARGUMENT, f"prefix: must be a str, got {type(prefix).__name__}"
            )
        if not isinstance(store, Store | AsyncStore):
            raise A2Error(
                ErrorCode.INVALID_ARGUMENT,
                f"store: must be an a2sql Store or AsyncStore, got {type(store).__name__}",
            )
        self.session_id = session_id
        self.a2sql_session_id: str = valid_name(prefix + session_id, "prefix + session_id")
        """The a2sql session that holds the conversation."""
        self.store: Store | AsyncStore = store
        """The store the conversation is kept in."""
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        # The last index this object saw: the next read starts its first page there,
        # which tells it the session's last index and reads the newest events at once.
        self._tail: int | None = None

    def __repr__(self) -> str:
        return f"A2Session({self.session_id!r}, a2sql_session_id={self.a2sql_session_id!r})"

    # --- the SDK's Session protocol ---------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation's items, oldest first: the newest ``limit`` of them, or all
        of them when ``limit`` is ``None`` (and ``session_settings.limit`` too). A limit
        of 0 or less returns none.

        It reads back from the session's last index, a page at a time, until it has
        ``limit`` items or reaches the last clear: its cost follows what it returns,
        not the length of the conversation's log.
        """
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted <= 0:
            return []
        found = await self._drive(self._latest(wanted))
        return [cast(TResponseInputItem, payload) for _, payload in found]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, in order, in one transaction (one event each, settled).

        Each item must be JSON as a2sql keeps it (``dict`` with ``str`` keys, ``list``,
        ``str``, ``int``, finite ``float``, ``bool``, ``None``); it comes back exactly as
        given. Anything else raises ``A2Error`` ``INVALID_ARGUMENT`` naming the item,
        and nothing is written.
        """
        if not items:
            return
        events = [NewEvent(ITEM_TYPE, cast(JSON, item), settled=True) for item in items]
        try:
            await await_session_mutation(self._drive(self._append(events)))
        except A2Error as error:
            raise _item_error(error) from error

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; ``None`` when there is none.

        Records an ``agents.pop`` event whose id is made from the popped item's index:
        a process that pops the same item at the same time finds its append a replay
        and pops the next item instead, so no item is ever popped twice. An item added
        while a pop reads is kept: the pop removes the item that was newest when it
        read.
        """
        popped = await await_session_mutation(self._drive(self._pop()))
        return None if popped is None else cast(TResponseInputItem, popped)

    async def clear_session(self) -> None:
        """Remove every item: records an ``agents.clear`` event (items added after it stay)."""
        await await_session_mutation(
            self._drive(self._append([NewEvent(CLEAR_TYPE, None, settled=True)]))
        )

    # --- the logic, as steps --------------------------------------------------------------

    def _latest(self, wanted: int | None) -> _Steps[list[tuple[int, JSON]]]:
        """The newest ``wanted`` live items (all since the last clear when ``None``), as
        ``(index, item)`` oldest first."""
        found: list[tuple[int, JSON]] = []  # newest first
        popped: set[int] = set()
        size = _FIRST_PAGE if wanted is None else min(_PAGE, wanted + _SLACK)

        def fold(events: Sequence[StoredEvent]) -> bool:
            """Take the page's events, newest first; ``True`` once the walk is done."""
            for event in reversed(events):
                if event.type == CLEAR_TYPE:
                    return True
                if event.type == POP_TYPE:
                    index = _popped_index(event.payload)
                    if index is not None:
                        popped.add(index)
                elif event.type == ITEM_TYPE and event.index not in popped:
                    found.append((event.index, event.payload))
                    if wanted is not None and len(found) >= wanted:
                        return True
            return False

        # The first page: from the last index this object saw, if any, up to the
        # session's last index (the page's through_index). When the session has not
        # grown past the page since, that page is the newest events: one read.
        hint = self._tail
        after = _FAR if hint is None else max(0, hint - size)
        page = yield _Read(after, None, size)
        assert isinstance(page, EventPage)
        end = page.through_index
        self._tail = end
        done = False
        if after <= end <= after + size:
            done = fold(page.events)
            end = after
        while not done and end > 0:
            after = max(0, end - size)
            page = yield _Read(after, end, end - after)
            assert isinstance(page, EventPage)
            done = fold(page.events)
            end = after
            size = min(_PAGE, size * 2)
        found.reverse()
        return found

    def _pop(self) -> _Steps[JSON | None]:
        while True:
            newest = yield from self._latest(1)
            if not newest:
                return None
            [(index, item)] = newest
            pop = NewEvent(POP_TYPE, {"index": index}, id=self._pop_id(index), settled=True)
            result = yield _Append([pop])
            assert isinstance(result, AppendResult)
            if not result.replayed:
                self._tail = result.events[-1].index
                return item
            # Another process popped this item first: pop the next one.

    def _append(self, events: list[NewEvent]) -> _Steps[None]:
        result = yield _Append(events)
        assert isinstance(result, AppendResult)
        self._tail = result.events[-1].index

    def _pop_id(self, index: int) -> str:
        """The id of the event that pops the item at ``index``: one per item, ever."""
        readable = f"{self.a2sql_session_id}/pop/{index}"
        if len(readable) <= MAX_NAME_LENGTH:
            return readable
        digest = hashlib.sha256(self.a2sql_session_id.encode("utf-8")).hexdigest()
        return f"agents-pop/{digest}/{index}"

    # --- running the steps on either facade -------------------------------------------

    async def _drive(self, steps: _Steps[T]) -> T:
        store = self.store
        if isinstance(store, Store):
            return await asyncio.to_thread(self._drive_sync, store, steps)
        try:
            step = next(steps)
            while True:
                answer: EventPage | AppendResult
                if isinstance(step, _Read):
                    answer = await store.inspect.read_events(
                        self.a2sql_session_id,
                        after_index=step.after,
                        through_index=step.through,
                        limit=step.limit,
                    )
                else:
                    answer = await store.append(self.a2sql_session_id, step.events)
                step = steps.send(answer)
        except StopIteration as stop:
            return cast(T, stop.value)

    def _drive_sync(self, store: Store, steps: _Steps[T]) -> T:
        try:
            step = next(steps)
            while True:
                answer: EventPage | AppendResult
                if isinstance(step, _Read):
                    answer = store.inspect.read_events(
                        self.a2sql_session_id,
                        after_index=step.after,
                        through_index=step.through,
                        limit=step.limit,
                    )
                else:
                    answer = store.append(self.a2sql_session_id, step.events)
                step = steps.send(answer)
        except StopIteration as stop:
            return cast(T, stop.value)


def _popped_index(payload: JSON) -> int | None:
    if isinstance(payload, dict):
        index = payload.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
    return None


def _item_error(error: A2Error) -> A2Error:
    """An append's refusal of an item, said of the item (``items[3]``, not
    ``events[3].payload``)."""
    message = error.message
    if error.code is not ErrorCode.INVALID_ARGUMENT or not message.startswith("events["):
        return error
    where, _, problem = message.partition(": ")
    position = where.removeprefix("events[").partition("]")[0]
    return A2Error(
        ErrorCode.INVALID_ARGUMENT,
        f"items[{position}]: {problem} (A2Session keeps each item as a2sql's JSON: dicts "
        "with str keys, lists, str, int, finite float, bool and None)",
    )
