"""``python -m bench.ui_data --url URL [--sessions 100000] [--events-per-session 10]
[--seed 1] [--batch 20000] [--no-analyze] [--no-check] [--json]``.

Fills an empty a2sql database (created or migrated with ``a2sql.create_store``) with
sessions as a2sql's own operations leave them, for the operator UI and its benchmark
(issue 39): ``--sessions`` sessions and exactly ``sessions * events_per_session``
events, written in bulk (SQLAlchemy Core ``insert(a2_events)``, executemany in
batches of ``--batch`` rows, one transaction each), then ``ANALYZE`` on both engines
(``--no-analyze``: not on SQLite, whose a2sql databases have no ``sqlite_stat1``
unless their owner runs it; on PostgreSQL ``VACUUM (ANALYZE)`` always, as
autovacuum would soon do), then a check through the store's own reads
(``--no-check``: skipped).

What it writes, deterministic for a seed and the time it runs at (``now``):

- Session ids under four prefixes: ``chat/u0042/000017`` (half), ``job/<kind>/…``,
  ``agent/…``, ``webhook/<provider>/…``; 1 to ``2 * events_per_session - 1`` events
  each (a few sessions 20 times longer), ``sessions * events_per_session`` in all.
- A session is a run of a worker's work: an input appended (no cause), claimed and
  completed by attempt 1, returning events caused by it (``{"index":N,"attempt":1}``,
  their ids in its ``returned_event_ids``), which are claimed and completed in turn;
  some in lanes; a few inputs appended settled; about 1% of events completed by
  attempt 2 after a failure; some sessions with a wait woken by a signal; a few with
  a dead letter skipped. Rows are written in the order the sessions ended, so
  physical order follows time as in a live database.
- The last event of most sessions ends before ``now``: spread over the last 7 days,
  a fifth of them in the last hour (the burst).
- Kinds of sessions, by their last events (counts ``max(1, round(share * sessions))``,
  the rest fully processed): ``dead`` 1% (a dead letter; half in a lane, with 1 to 3
  pending events blocked behind it), ``claimed`` 1% (1 or 2 events under a live
  claim, claimed up to a minute ago, a tenth of them hours ago, expiring 10 min to
  24 h from ``now``: a snapshot taken now stays live for a while), ``expired`` 0.3%
  (a claim expired 5 s to 6 h ago, not taken again), ``ready`` 1.5% (1 to 4 events
  appended and never claimed, lane heads ready, others waiting behind their lane;
  a fifth appended hours to days ago), ``retrying`` 0.3% (failed once, claimable
  again 30 s to 2 h from now), ``waiting`` 1% (``wake_on`` set; its claim expiry
  ``NO_TIMEOUT`` for 60%, else a timeout, a tenth of them passed already),
  ``scheduled`` 1% (``available_at`` 5 min to 30 days ahead, never claimed),
  ``cancelled`` 0.2% (``cancel_session``: pending events processed by no attempt).
- Snapshots for about 1% of sessions; presence rows (live and expired) for about
  0.5% of the ``chat/`` sessions.

Every count it wrote is printed (``Written``), with one session id of each kind.
A database that already holds events, snapshots or presence is refused.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, create_engine, func, insert, select

import a2sql
from a2sql.core.clock import from_millis, to_millis
from a2sql.core.jsontext import encode_json
from a2sql.core.records import NO_TIMEOUT, EventCause
from a2sql.execution.engines import resolve_url
from a2sql.sql.codec import encode_cause, encode_ids
from a2sql.sql.schema import events, presence, snapshots

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
SPAN_MS = 7 * DAY  # sessions end over the last 7 days …
BURST_MS = HOUR  # … a fifth of them in the last hour
BURST_SHARE = 0.2

PREFIXES = (("chat/", 0.5), ("job/", 0.25), ("agent/", 0.15), ("webhook/", 0.1))

# Kinds of session, by their last events, and the share of the sessions each gets.
SHARES = {
    "dead": 0.01,
    "claimed": 0.01,
    "expired": 0.003,
    "ready": 0.015,
    "retrying": 0.003,
    "waiting": 0.01,
    "scheduled": 0.01,
    "cancelled": 0.002,
}
KINDS = ("done", *SHARES)
# Kinds whose last events are placed from ``now`` back (a claim, a retry, appended work).
RECENT = ("claimed", "expired", "ready", "retrying")
LONG_SESSION_FACTOR = 20
LONG_SESSIONS_PER = 2000  # one session in this many is LONG_SESSION_FACTOR times longer

COLUMNS = [column.name for column in events.columns]

# --- what each prefix's sessions hold ----------------------------------------------

# type -> [(weight, [child types])]: what a handler returns for an event of that type.
FLOWS: dict[str, dict[str, list[tuple[float, list[str]]]]] = {
    "chat/": {
        "user.message": [(1, ["llm.request"])],
        "llm.request": [(6, ["llm.response"]), (3, ["tool.call"]), (1, ["tool.call", "tool.call"])],
        "llm.response": [(1, ["assistant.message"])],
        "tool.call": [(1, ["tool.result"])],
        "tool.result": [(4, ["llm.request"]), (1, [])],
        "assistant.message": [(1, [])],
    },
    "job/": {
        "job.submitted": [(2, ["job.step"]), (1, ["job.step", "job.step"])],
        "job.step": [(3, ["job.step"]), (2, ["job.finished"]), (1, [])],
        "job.finished": [(1, [])],
    },
    "agent/": {
        "task.created": [(1, ["plan"])],
        "plan": [(2, ["action"]), (1, ["action", "action"])],
        "action": [(1, ["observation"])],
        "observation": [(4, ["action"]), (3, ["report"]), (1, [])],
        "report": [(1, [])],
    },
    "webhook/": {
        "webhook.received": [(3, ["payment.recorded"]), (1, ["email.queued"]), (1, [])],
        "payment.recorded": [(2, ["email.queued"]), (1, [])],
        "email.queued": [(1, [])],
    },
}
INPUT = {"chat/": "user.message", "job/": "job.submitted", "agent/": "task.created"}
INPUT["webhook/"] = "webhook.received"
LANES = {"tool.call": "tools", "job.step": "io", "action": "browser", "email.queued": "mail"}
# The signal a waiting event of each prefix waits for, and the waiting event's type.
WAITS = {
    "chat/": ("approval", "tool.approval"),
    "job/": ("upstream:done", "job.blocked"),
    "agent/": ("user_reply", "human.input"),
    "webhook/": ("payment:settled", "payment.pending"),
}
# How long a handler of each type takes (ms, lower and upper bound of a log-uniform draw).
DURATIONS = {"llm.request": (400, 9000), "tool.call": (40, 4000), "action": (200, 6000)}
DEFAULT_DURATION = (3, 250)
JOB_KINDS = ("export", "thumbnail", "invoice", "sync", "report")
PROVIDERS = ("stripe", "github", "slack")
HOSTS = tuple(f"worker-{n}" for n in range(1, 7))
_TEXT = (
    "the quick brown fox jumps over a lazy dog while the agent plans its next step "
    "and a tool call returns results for the user who asked about invoices refunds "
    "shipping dates order status and the weather in paris tomorrow morning"
)
WORDS = tuple(_TEXT.split())
ERRORS = (
    "TimeoutError: upstream did not answer within 30 s\n  at app/tools/http.py:88 in call",
    "HTTPStatusError: Server error '503 Service Unavailable' for url "
    "'https://api.example.com/v1/charges'\n  at app/payments.py:142 in record",
    "KeyError: 'customer_id'\n  at app/handlers/webhook.py:57 in handle",
    "RateLimitError: 429 Too Many Requests: retry after 20 s\n"
    "  at app/llm/client.py:210 in complete",
    "ValueError: invalid literal for int() with base 10: 'n/a'\n"
    "  at app/jobs/export.py:33 in parse",
    "ConnectionResetError: [Errno 104] Connection reset by peer\n"
    "  at app/tools/browser.py:19 in open",
)
CANCEL_REASONS = ("cancelled by operator", "user closed the conversation", "superseded by job")
SKIP_REASONS = ("skipped: poison message", "skipped by operator after review")


@dataclass
class Written:
    """What the generator wrote, counted as it wrote it (meant as the store counts:
    ``StoreTotals`` and ``SessionSummary``)."""

    sessions: int = 0
    events: int = 0
    processed: int = 0
    pending: int = 0  # unprocessed, not dead-lettered
    claimed: int = 0  # under a live claim
    expired_claims: int = 0  # a holder whose claim expired, not taken again
    ready: int = 0  # appended, never claimed, claimable now (lane heads and lane-less)
    behind_lane: int = 0  # appended, never claimed, behind an earlier event of its lane
    retrying: int = 0  # failed, claimable again later
    dead_letters: int = 0
    blocked: int = 0  # pending behind a dead letter in its lane
    waiting: int = 0
    waiting_without_timeout: int = 0
    waiting_timeout_passed: int = 0
    scheduled: int = 0
    cancelled: int = 0  # events processed by cancel_session
    skipped: int = 0  # dead letters skipped (processed by no attempt)
    settled: int = 0  # appended settled (signals included)
    signals: int = 0
    retried: int = 0  # processed by attempt 2 after a failure
    snapshots: int = 0
    presence: int = 0
    presence_live: int = 0
    oldest_pending_at: datetime | None = None
    now: datetime | None = None
    sessions_by_prefix: dict[str, int] = field(default_factory=dict)
    sessions_by_kind: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)  # kind -> one session id
    seconds: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("oldest_pending_at", "now"):
            out[key] = None if out[key] is None else out[key].isoformat()
        return out


@dataclass
class _Event:
    """One event being built, times in epoch ms."""

    idx: int
    type: str
    payload: str
    event_id: str
    created: int
    lane: str | None = None
    cause: EventCause | None = None
    children: list[str] | None = None
    row: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Planned:
    number: int
    session_id: str
    prefix: str
    kind: str
    length: int
    end: int  # epoch ms: when the session's last event happened (free kinds), for ordering


class Generator:
    def __init__(self, *, sessions: int, events_per_session: int, seed: int, now_ms: int):
        if sessions < 1 or events_per_session < 1:
            raise SystemExit("ui_data: --sessions and --events-per-session must be at least 1")
        self.rng = random.Random(seed)
        self.sessions = sessions
        self.per = events_per_session
        self.now = now_ms
        self.written = Written(now=from_millis(now_ms))

    # --- the plan: each session's id, kind, length and place in time ----------------

    def plan(self) -> list[_Planned]:
        rng = self.rng
        n = self.sessions
        kinds: list[str] = []
        for kind, share in SHARES.items():
            kinds += [kind] * max(1, round(share * n))
        if len(kinds) > n:
            kinds = kinds[:n]
        kinds += ["done"] * (n - len(kinds))
        rng.shuffle(kinds)
        lengths = self._lengths()
        prefix_names = [p for p, _ in PREFIXES]
        weights = [w for _, w in PREFIXES]
        planned = []
        for number in range(n):
            kind = kinds[number]
            prefix = rng.choices(prefix_names, weights)[0]
            length = lengths[number]
            length = max(length, _minimum(kind))  # the total is made exact below
            if kind in RECENT:
                end = self.now
            elif rng.random() < BURST_SHARE:
                end = self.now - rng.randint(SECOND, BURST_MS)
            else:
                end = self.now - rng.randint(BURST_MS, SPAN_MS)
            planned.append(
                _Planned(number, self._session_id(prefix, number), prefix, kind, length, end)
            )
        planned = self._exact_total(planned)
        planned.sort(key=lambda p: p.end)
        return planned

    def _lengths(self) -> list[int]:
        """1 to 2 * per - 1 events per session (pairs summing to 2 * per), a few long."""
        rng = self.rng
        per = self.per
        lengths = []
        for _ in range(0, self.sessions, 2):
            d = rng.randint(0, per - 1)
            lengths += [per + d, per - d]
        lengths = lengths[: self.sessions]
        for number in range(0, self.sessions, LONG_SESSIONS_PER):
            lengths[number] = per * LONG_SESSION_FACTOR
        return lengths

    def _exact_total(self, planned: list[_Planned]) -> list[_Planned]:
        """Take or give events one at a time, from random sessions, until the total is
        exactly sessions * events_per_session (each session keeps its minimum)."""
        rng = self.rng
        lengths = [p.length for p in planned]
        minimum = [_minimum(p.kind) for p in planned]
        surplus = sum(lengths) - self.sessions * self.per
        while surplus > 0:
            k = rng.randrange(len(lengths))
            if lengths[k] > minimum[k]:
                lengths[k] -= 1
                surplus -= 1
            elif all(length <= low for length, low in zip(lengths, minimum, strict=True)):
                break  # too few events for the tails: keep the minimum
        while surplus < 0:
            lengths[rng.randrange(len(lengths))] += 1
            surplus += 1
        return [
            _Planned(p.number, p.session_id, p.prefix, p.kind, length, p.end)
            for p, length in zip(planned, lengths, strict=True)
        ]

    def _session_id(self, prefix: str, number: int) -> str:
        rng = self.rng
        if prefix == "chat/":
            return f"chat/u{rng.randrange(2000):04d}/{number:06d}"
        if prefix == "job/":
            return f"job/{rng.choice(JOB_KINDS)}/{number:06d}"
        if prefix == "webhook/":
            return f"webhook/{rng.choice(PROVIDERS)}/{number:06d}"
        return f"agent/{number:06d}"

    # --- small draws -----------------------------------------------------------------

    def _log_uniform(self, low: int, high: int) -> int:
        return round(math.exp(self.rng.uniform(math.log(low), math.log(high))))

    def _event_id(self, millis: int) -> str:
        """A version-7 UUID of ``millis``, as the store's default ids (a2sql.core.clock)."""
        rand = self.rng.getrandbits(74)
        value = (
            (millis & 0xFFFF_FFFF_FFFF) << 80
            | 0x7 << 76
            | ((rand >> 62) & 0xFFF) << 64
            | 0b10 << 62
            | rand & 0x3FFF_FFFF_FFFF_FFFF
        )
        h = f"{value:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def _words(self, low: int, high: int) -> str:
        return " ".join(self.rng.choices(WORDS, k=self.rng.randint(low, high)))

    def _payload(self, kind: str, session_id: str, n: int) -> str:
        rng = self.rng
        value: Any
        if kind in ("user.message", "assistant.message"):
            value = {"text": self._words(3, 30), "turn": n}
        elif kind == "llm.request":
            value = {"model": rng.choice(("small", "large")), "messages": n, "max_tokens": 1024}
        elif kind == "llm.response":
            value = {"text": self._words(5, 60), "tokens": {"in": rng.randint(50, 4000)}}
            value["tokens"]["out"] = rng.randint(5, 800)
            if rng.random() < 0.01:  # now and then a long one
                value["text"] = self._words(300, 600)
        elif kind in ("tool.call", "action"):
            value = {"tool": rng.choice(("search", "fetch", "calc", "browse")), "args": {"q": n}}
        elif kind in ("tool.result", "observation"):
            value = {"ok": rng.random() > 0.05, "result": self._words(2, 15)}
        elif kind.startswith("job."):
            value = {"job": session_id.split("/")[1], "step": n, "rows": rng.randint(0, 10**5)}
        elif kind.startswith(("webhook.", "payment.")):
            value = {"id": f"evt_{rng.getrandbits(48):012x}", "amount": rng.randint(100, 99_900)}
            value["currency"] = "eur"
        else:
            value = {"n": n}
        return encode_json(value)

    def _holder(self) -> str:
        rng = self.rng
        return f"{rng.choice(HOSTS)}:{rng.randint(100, 40_000)}:{rng.getrandbits(24):06x}"

    # --- one session -------------------------------------------------------------------

    def _new(self, evs: list[_Event], session_id: str, kind: str, created: int) -> _Event:
        idx = len(evs) + 1
        ev = _Event(
            idx=idx,
            type=kind,
            payload=self._payload(kind, session_id, idx),
            event_id=self._event_id(created),
            created=created,
            lane=LANES.get(kind),
        )
        evs.append(ev)
        return ev

    def _body(self, p: _Planned, count: int, allow_extras: bool) -> tuple[list[_Event], int]:
        """``count`` events, every one processed, times from 0; and the time the last
        was processed (the session's last time). ``allow_extras``: waits woken by a
        signal, settled inputs, a skipped dead letter."""
        rng = self.rng
        flow = FLOWS[p.prefix]
        evs: list[_Event] = []
        queue: list[_Event] = []
        t = 0
        gap = (5 * SECOND, 10 * MINUTE) if p.prefix in ("chat/", "agent/") else (SECOND, HOUR)
        woken = allow_extras and rng.random() < 0.03
        while len(evs) < count:
            if not queue:
                if evs:
                    t += self._log_uniform(*gap)
                if allow_extras and evs and rng.random() < 0.03 and len(evs) < count - 1:
                    note = self._new(evs, p.session_id, "note", t)
                    note.row = {"processed_at": t, "lane_ready": True}
                    self.written.settled += 1
                    continue
                queue.append(self._new(evs, p.session_id, INPUT[p.prefix], t))
                continue
            parent = queue.pop(0)
            room = count - len(evs)
            if woken and room >= 3 and len(evs) >= 1:
                # The handler returns a wait; a signal arrives; the wait is claimed.
                woken = False
                t = self._process(parent, t, attempt=1)
                signal_name, wait_type = WAITS[p.prefix]
                waiter = self._new(evs, p.session_id, wait_type, t)
                waiter.cause = EventCause(parent.idx, parent.row["processed_by_attempt"])
                parent.children = [waiter.event_id]
                t += self._log_uniform(SECOND, HOUR)
                signal = self._new(evs, p.session_id, signal_name, t)
                signal.lane = None
                signal.payload = encode_json({"by": f"user{rng.randrange(100)}"})
                signal.row = {"processed_at": t, "lane_ready": True, "wake_on": signal_name}
                self.written.settled += 1
                self.written.signals += 1
                queue.append(waiter)
                continue
            kinds = self._children_of(flow, parent.type, room)
            if (
                allow_extras
                and not kinds
                and rng.random() < 0.002
                and all(ev.row for ev in evs if ev is not parent)
            ):
                t = self._skip_dead_letter(parent, t)
                continue
            t = self._process(parent, t, attempt=2 if rng.random() < 0.01 else 1)
            children = [self._new(evs, p.session_id, kind, t) for kind in kinds]
            for child in children:
                child.cause = EventCause(parent.idx, parent.row["processed_by_attempt"])
            parent.children = [child.event_id for child in children]
            queue.extend(children)
        for parent in queue:  # the last ones return nothing
            t = self._process(parent, t, attempt=1)
            parent.children = []
        return evs, t

    def _children_of(
        self, flow: dict[str, list[tuple[float, list[str]]]], kind: str, room: int
    ) -> list[str]:
        choices = flow.get(kind, [(1, [])])
        picked = self.rng.choices([c for _, c in choices], [w for w, _ in choices])[0]
        return picked[:room]

    def _duration(self, kind: str) -> int:
        return self._log_uniform(*DURATIONS.get(kind, DEFAULT_DURATION))

    def _process(self, ev: _Event, t: int, *, attempt: int) -> int:
        """Claimed and completed by ``attempt`` (2: after attempt 1 failed); the time after."""
        rng = self.rng
        first = t + self._log_uniform(2, 300)
        row: dict[str, Any] = {"first_claimed_at": first, "attempt_count": attempt}
        t = first + self._duration(ev.type)
        if attempt == 2:
            row["failure_count"] = 1
            row["last_failed_at"] = t
            row["last_failed_attempt"] = 1
            row["last_error"] = rng.choice(ERRORS)
            t += self._log_uniform(200, 30 * SECOND)  # the backoff
            self.written.retried += 1
        row["last_claimed_at"] = t if attempt == 2 else first
        if attempt == 2:
            t += self._duration(ev.type)
        row["processed_at"] = t
        row["processed_by_attempt"] = attempt
        ev.row = row
        return t

    def _fail_until_dead(self, ev: _Event, t: int) -> int:
        """Claimed and failed until dead-lettered (max_failures 3 or 5); the time after."""
        rng = self.rng
        attempts = rng.choice((3, 5, 5))
        first = t + self._log_uniform(2, 300)
        claimed = first
        for n in range(1, attempts + 1):
            if n > 1:
                claimed = t + self._log_uniform(SECOND, 2**n * SECOND)  # the backoff
            t = claimed + self._duration(ev.type)
        ev.row = {
            "first_claimed_at": first,
            "last_claimed_at": claimed,
            "attempt_count": attempts,
            "failure_count": attempts,
            "last_failed_at": t,
            "last_failed_attempt": attempts,
            "last_error": rng.choice(ERRORS),
            "failed_at": t,
            "lane_ready": True,
        }
        return t

    def _skip_dead_letter(self, ev: _Event, t: int) -> int:
        t = self._fail_until_dead(ev, t)
        t += self._log_uniform(MINUTE, DAY)
        ev.row.update(
            processed_at=t,
            last_error=self.rng.choice(SKIP_REASONS),
            failed_at=None,
            lane_ready=False,
        )
        ev.children = None
        self.written.skipped += 1
        return t

    def session(self, p: _Planned) -> tuple[list[dict[str, Any]], list[_Event]]:
        """The rows of one session, and its events."""
        rng = self.rng
        w = self.written
        now = self.now
        tail_size = {
            "done": 0,
            "dead": 1,
            "claimed": rng.choice((1, 1, 2)),
            "expired": 1,
            "ready": rng.randint(1, 4),
            "retrying": 1,
            "waiting": 1,
            "scheduled": 1,
            "cancelled": rng.randint(1, 3),
        }[p.kind]
        blocked = 0
        if p.kind == "dead" and rng.random() < 0.5:
            blocked = rng.randint(1, 3)
        tail_size = min(tail_size, p.length - 1)
        blocked = min(blocked, p.length - 1 - tail_size)
        body_size = p.length - tail_size - blocked
        evs, body_end = self._body(p, body_size, allow_extras=p.kind == "done")
        tail: list[_Event] = []
        if p.kind == "done":
            return self._placed(p, evs, blocked=0), evs
        # The tail's events are returned by the body's last completion.
        last = max((ev for ev in evs if ev.row.get("processed_by_attempt")), key=_processed)

        # Sessions whose tail happened lately are placed from ``now`` back, by the
        # tail's times; the others after their tail is built (_placed).
        claimed_at = expiry = 0
        created = body_end
        if p.kind == "claimed":
            held_long = rng.random() < 0.1
            back = rng.randint(10 * MINUTE, 3 * HOUR) if held_long else rng.randint(100, MINUTE)
            claimed_at = now - back
            created = claimed_at - self._log_uniform(2, 300)
        elif p.kind == "expired":
            expiry = now - rng.randint(5 * SECOND, 6 * HOUR)
            claimed_at = expiry - rng.randint(30 * SECOND, 5 * MINUTE)
            created = claimed_at - self._log_uniform(2, 300)
        elif p.kind == "retrying":
            claimed_at = now - rng.randint(SECOND, 30 * MINUTE)
            created = claimed_at - self._log_uniform(2, 300)
        elif p.kind == "ready":
            old = rng.random() < 0.2
            created = now - (rng.randint(2 * HOUR, 2 * DAY) if old else rng.randint(50, MINUTE))
        for ev in evs:
            _shift(ev, created - body_end)

        def child(kind: str, at: int) -> _Event:
            ev = self._new(evs, p.session_id, kind, at)
            ev.cause = EventCause(last.idx, last.row["processed_by_attempt"])
            tail.append(ev)
            return ev

        flow_kinds = [k for k in FLOWS[p.prefix] if k != INPUT[p.prefix]]
        if p.kind == "claimed":
            holder = self._holder()
            expiry = now + rng.randint(10 * MINUTE, DAY)
            for _ in range(tail_size):
                ev = child(rng.choice(flow_kinds), created)
                ev.lane = None  # claimed together: both claimable, so no shared lane
                ev.row = {
                    "lane_ready": True,
                    "first_claimed_at": claimed_at,
                    "last_claimed_at": claimed_at,
                    "attempt_count": 1,
                    "claim_holder": holder,
                    "claim_expires_at": expiry,
                }
                w.claimed += 1
        elif p.kind == "expired":
            ev = child(rng.choice(flow_kinds), created)
            ev.row = {
                "lane_ready": True,
                "first_claimed_at": claimed_at,
                "last_claimed_at": claimed_at,
                "attempt_count": 1,
                "claim_holder": self._holder(),
                "claim_expires_at": expiry,
            }
            w.expired_claims += 1
        elif p.kind == "retrying":
            ev = child(rng.choice(flow_kinds), created)
            failed = min(claimed_at + self._duration(ev.type), now - 1)
            ev.row = {
                "lane_ready": True,
                "first_claimed_at": claimed_at,
                "last_claimed_at": claimed_at,
                "attempt_count": 1,
                "failure_count": 1,
                "last_failed_at": failed,
                "last_failed_attempt": 1,
                "last_error": rng.choice(ERRORS),
                "claim_expires_at": now + rng.randint(30 * SECOND, 2 * HOUR),
            }
            w.retrying += 1
        elif p.kind == "ready":
            busy: set[str] = set()
            for _ in range(tail_size):
                ev = child(rng.choice(flow_kinds), created)
                head = ev.lane is None or ev.lane not in busy
                if ev.lane is not None:
                    busy.add(ev.lane)
                ev.row = {"lane_ready": head}
                if head:
                    w.ready += 1
                else:
                    w.behind_lane += 1
        elif p.kind == "dead":
            ev = child(rng.choice(flow_kinds), created)
            if blocked:
                ev.lane = rng.choice(tuple(LANES.values()))
            t = self._fail_until_dead(ev, created)
            w.dead_letters += 1
            for _ in range(blocked):
                t += self._log_uniform(SECOND, HOUR)
                behind = self._new(evs, p.session_id, INPUT[p.prefix], t)
                behind.lane = ev.lane
                behind.row = {"lane_ready": False}
                tail.append(behind)
                w.blocked += 1
        elif p.kind == "waiting":
            signal_name, wait_type = WAITS[p.prefix]
            ev = child(wait_type, created)
            ev.lane = None
            draw = rng.random()
            if draw < 0.6:
                expiry = to_millis(NO_TIMEOUT)
                w.waiting_without_timeout += 1
            elif draw < 0.64:
                expiry = -1  # a timeout passed already: set once the session is placed
                w.waiting_timeout_passed += 1
            else:
                expiry = now + rng.randint(HOUR, 7 * DAY)
            ev.row = {"lane_ready": True, "wake_on": signal_name, "claim_expires_at": expiry}
            w.waiting += 1
        elif p.kind == "scheduled":
            ev = child(rng.choice(("reminder", "job.scheduled", "followup")), created)
            ev.lane = None
            due = now + rng.randint(5 * MINUTE, 30 * DAY)
            ev.event_id = f"{ev.type}-{p.number}@{from_millis(due).strftime('%Y-%m-%dT%H:%M:%SZ')}"
            ev.row = {"lane_ready": True, "claim_expires_at": due}
            w.scheduled += 1
        elif p.kind == "cancelled":
            at = created + self._log_uniform(SECOND, HOUR)
            for _ in range(tail_size):
                ev = child(rng.choice(flow_kinds), created)
                ev.row = {
                    "lane_ready": False,
                    "processed_at": at,
                    "last_error": rng.choice(CANCEL_REASONS),
                }
                w.cancelled += 1
        if tail:
            last.children = (last.children or []) + [ev.event_id for ev in tail if ev.cause]
        return self._placed(p, evs, blocked=blocked), evs

    def _placed(self, p: _Planned, evs: list[_Event], *, blocked: int) -> list[dict[str, Any]]:
        """The session's rows, its times moved to its planned end (unless placed from
        ``now`` already), and counted."""
        rng = self.rng
        w = self.written
        now = self.now
        if p.kind not in RECENT:
            final = max(_latest(ev) for ev in evs)
            move = min(p.end, now - 1) - final
            for ev in evs:
                _shift(ev, move)
        for ev in evs:
            if ev.row.get("claim_expires_at") == -1:  # a wait whose timeout passed
                ev.row["claim_expires_at"] = max(now - rng.randint(1, 10 * SECOND), ev.created + 1)
            if ev.row.get("processed_at") is None and ev.row.get("failed_at") is None:
                w.pending += 1
                at = from_millis(ev.created)
                if w.oldest_pending_at is None or at < w.oldest_pending_at:
                    w.oldest_pending_at = at
            elif ev.row.get("processed_at") is not None:
                w.processed += 1
        w.sessions += 1
        w.events += len(evs)
        w.sessions_by_prefix[p.prefix] = w.sessions_by_prefix.get(p.prefix, 0) + 1
        w.sessions_by_kind[p.kind] = w.sessions_by_kind.get(p.kind, 0) + 1
        w.examples.setdefault(p.kind, p.session_id)
        if blocked:
            w.examples.setdefault("blocked", p.session_id)
        if p.length >= self.per * LONG_SESSION_FACTOR // 2:
            w.examples.setdefault("long", p.session_id)
        return [self._row(p.session_id, ev) for ev in evs]

    def _row(self, session_id: str, ev: _Event) -> dict[str, Any]:
        r = ev.row
        ms = from_millis

        def t(key: str) -> datetime | None:
            value = r.get(key)
            return None if value is None else ms(value)

        return {
            "session_id": session_id,
            "idx": ev.idx,
            "event_type": ev.type,
            "payload": ev.payload,
            "event_id": ev.event_id,
            "created_at": ms(ev.created),
            "cause": encode_cause(ev.cause),
            "lane": ev.lane,
            "lane_ready": bool(r.get("lane_ready", False)),
            "processed_at": t("processed_at"),
            "processed_by_attempt": r.get("processed_by_attempt"),
            "returned_event_ids": (
                None
                if ev.children is None or r.get("processed_by_attempt") is None
                else encode_ids(ev.children)
            ),
            "first_claimed_at": t("first_claimed_at"),
            "last_claimed_at": t("last_claimed_at"),
            "attempt_count": r.get("attempt_count", 0),
            "failure_count": r.get("failure_count", 0),
            "last_failed_at": t("last_failed_at"),
            "last_failed_attempt": r.get("last_failed_attempt"),
            "last_error": r.get("last_error"),
            "failed_at": t("failed_at"),
            "claim_holder": r.get("claim_holder"),
            "claim_expires_at": t("claim_expires_at"),
            "wake_on": r.get("wake_on"),
        }

    # --- snapshots and presence ------------------------------------------------------

    def snapshot_rows(self, session_id: str, evs: list[_Event]) -> list[dict[str, Any]]:
        rng = self.rng
        done = [ev for ev in evs if ev.row.get("processed_at") is not None]
        if not done or rng.random() >= 0.01:
            return []
        rows = []
        for reducer in ("summary", "usage") if rng.random() < 0.2 else ("summary",):
            upto = rng.choice(done)
            rows.append(
                {
                    "session_id": session_id,
                    "reducer_name": reducer,
                    "up_to_index": upto.idx,
                    "state": encode_json({"events": upto.idx, "tokens": rng.randint(0, 10**5)}),
                    "updated_at": from_millis(upto.row["processed_at"] + rng.randint(1, 500)),
                }
            )
        self.written.snapshots += len(rows)
        return rows

    def presence_rows(self, session_id: str) -> list[dict[str, Any]]:
        rng = self.rng
        if not session_id.startswith("chat/") or rng.random() >= 0.005:
            return []
        now = self.now
        user = session_id.split("/")[1]
        rows = []
        live = rng.random() < 0.5
        for participant in (f"user:{user}", f"agent:{rng.choice(HOSTS)}"):
            for name, value in (("typing", rng.random() < 0.3), ("seen_index", rng.randint(1, 50))):
                if live:
                    at = now - rng.randint(0, 30 * SECOND)
                    expires = now + rng.randint(10 * MINUTE, HOUR)
                else:
                    at = now - rng.randint(2 * MINUTE, 2 * DAY)
                    expires = at + rng.randint(30 * SECOND, MINUTE)
                rows.append(
                    {
                        "ns": session_id,
                        "participant": participant,
                        "field": name,
                        "value": encode_json(value),
                        "seen": at,
                        "at": from_millis(at),
                        "expires_at": from_millis(expires),
                    }
                )
        self.written.presence += len(rows)
        if live:
            self.written.presence_live += len(rows)
            self.written.examples.setdefault("presence", session_id)
        return rows

    def batches(
        self, batch: int
    ) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]]:
        """Rows of events, snapshots and presence, about ``batch`` events at a time."""
        rows: list[dict[str, Any]] = []
        snaps: list[dict[str, Any]] = []
        present: list[dict[str, Any]] = []
        for planned in self.plan():
            session_rows, evs = self.session(planned)
            rows += session_rows
            snaps += self.snapshot_rows(planned.session_id, evs)
            present += self.presence_rows(planned.session_id)
            if len(rows) >= batch:
                yield rows, snaps, present
                rows, snaps, present = [], [], []
        if rows or snaps or present:
            yield rows, snaps, present


def _minimum(kind: str) -> int:
    """The fewest events a session of ``kind`` has: a processed one before its tail."""
    return 1 if kind == "done" else 2


def _processed(ev: _Event) -> int:
    return int(ev.row["processed_at"])


def _latest(ev: _Event) -> int:
    r = ev.row
    times = [ev.created]
    for key in ("processed_at", "first_claimed_at", "last_claimed_at", "last_failed_at"):
        if r.get(key) is not None:
            times.append(r[key])
    return max(times)


_TIMES = ("processed_at", "first_claimed_at", "last_claimed_at", "last_failed_at", "failed_at")


def _shift(ev: _Event, by: int) -> None:
    """Move an event's past times (not its expiries, placed from ``now``) by ``by`` ms."""
    ev.created += by
    for key in _TIMES:
        if ev.row.get(key) is not None:
            ev.row[key] += by


# --- loading -------------------------------------------------------------------------


def _engine(url: str) -> Engine:
    return create_engine(resolve_url(url))


def _refuse_non_empty(engine: Engine) -> None:
    with engine.connect() as conn:
        for table in (events, snapshots, presence):
            if conn.execute(select(table).limit(1)).first() is not None:
                raise SystemExit(
                    f"ui_data: {table.name} already has rows: this fills an empty a2sql "
                    "database only (drop and create it, or give another URL)"
                )


def load(
    url: str,
    *,
    sessions: int = 100_000,
    events_per_session: int = 10,
    seed: int = 1,
    batch: int = 20_000,
    analyze: bool = True,
    progress: bool = False,
) -> Written:
    """Create (PostgreSQL) and migrate the database at ``url``, refuse it unless empty,
    and fill it; what it wrote."""
    started = time.perf_counter()
    resolved = resolve_url(url)
    if resolved.get_backend_name() == "postgresql":
        from bench.databases import ensure_postgres_database

        plain = resolved.set(drivername="postgresql").render_as_string(hide_password=False)
        ensure_postgres_database(plain)
    with a2sql.create_store(url, migrate=True) as store:
        now_ms = to_millis(store.clock.now())
    generator = Generator(
        sessions=sessions, events_per_session=events_per_session, seed=seed, now_ms=now_ms
    )
    written = generator.written
    engine = _engine(url)
    try:
        _refuse_non_empty(engine)
        sqlite = engine.dialect.name == "sqlite"
        with engine.connect() as conn:
            if sqlite:
                conn.exec_driver_sql("pragma journal_mode = wal")
                conn.exec_driver_sql("pragma cache_size = -262144")  # 256 MiB for the load
                conn.commit()
            generating = 0.0
            t0 = time.perf_counter()
            rows_iter = generator.batches(batch)
            while True:
                g0 = time.perf_counter()
                try:
                    rows, snaps, present = next(rows_iter)
                except StopIteration:
                    break
                generating += time.perf_counter() - g0
                with conn.begin():
                    if rows:
                        conn.execute(insert(events), rows)
                    if snaps:
                        conn.execute(insert(snapshots), snaps)
                    if present:
                        conn.execute(insert(presence), present)
                if progress:
                    print(
                        f"\r{written.events:>10,} events, {written.sessions:>8,} sessions "
                        f"({time.perf_counter() - t0:.0f} s)",
                        end="",
                        file=sys.stderr,
                        flush=True,
                    )
            if progress:
                print(file=sys.stderr)
            written.seconds["generate"] = round(generating, 2)
            written.seconds["insert"] = round(time.perf_counter() - t0 - generating, 2)
            if analyze or not sqlite:
                t1 = time.perf_counter()
                if sqlite:
                    conn.exec_driver_sql("analyze")
                    conn.commit()
                else:
                    # VACUUM too: the visibility map autovacuum would soon set, without
                    # which an index-only scan reads the table's pages as well.
                    auto = conn.execution_options(isolation_level="AUTOCOMMIT")
                    for table in ("a2_events", "a2_snapshots", "a2_presence"):
                        auto.exec_driver_sql(f"vacuum (analyze) {table}")
                written.seconds["analyze"] = round(time.perf_counter() - t1, 2)
    finally:
        engine.dispose()
    written.seconds["total"] = round(time.perf_counter() - started, 2)
    return written


# --- the check -----------------------------------------------------------------------


def check(url: str, written: Written, *, integrity: bool = True) -> dict[str, Any]:
    """Read the database back through the store and compare with ``written``; raise
    ``AssertionError`` naming what differs. Returns what it read."""
    found: dict[str, Any] = {}
    t0 = time.perf_counter()
    with a2sql.create_store(url, migrate=False) as store:
        totals = store.inspect.totals()
        found["totals"] = {
            "sessions": totals.sessions,
            "events": totals.events,
            "pending": totals.pending,
            "claimed": totals.claimed,
            "dead_letters": totals.dead_letters,
            "waiting": totals.waiting,
            "scheduled": totals.scheduled,
        }
        expected = {
            "sessions": written.sessions,
            "events": written.events,
            "pending": written.pending,
            "claimed": written.claimed,
            "dead_letters": written.dead_letters,
            "waiting": written.waiting,
            "scheduled": written.scheduled,
        }
        problems = [
            f"totals.{key}: the store reads {found['totals'][key]}, {value} were written"
            for key, value in expected.items()
            if found["totals"][key] != value
        ]
        if totals.oldest_pending_at != written.oldest_pending_at:
            problems.append(
                f"oldest pending: {totals.oldest_pending_at} read, {written.oldest_pending_at}"
            )
        dead = blocking = 0
        cursor = None
        while True:
            page = store.inspect.list_dead_letters(cursor=cursor, limit=500)
            dead += len(page.events)
            blocking += sum(page.blocking)
            cursor = page.cursor
            if cursor is None:
                break
        found["dead_letters"] = dead
        found["blocked"] = blocking
        if (dead, blocking) != (written.dead_letters, written.blocked):
            problems.append(
                f"dead letters and what they block: {dead}, {blocking} read; "
                f"{written.dead_letters}, {written.blocked} written"
            )
        # One session of each kind, read and summarised.
        for kind, session_id in written.examples.items():
            summary = store.inspect.session(session_id)
            evs = store.read(session_id)
            if summary is None or summary.event_count != len(evs) or not evs:
                problems.append(f"{kind} session {session_id}: {summary} for {len(evs)} events")
                continue
            if [ev.index for ev in evs] != list(range(1, len(evs) + 1)):
                problems.append(f"{kind} session {session_id}: indexes not gapless")
            times = [ev.created_at for ev in evs]
            if times != sorted(times):
                problems.append(f"{kind} session {session_id}: created_at goes backwards")
            by_id = {ev.id: ev for ev in evs}
            for ev in evs:
                if ev.cause is not None:
                    parent = evs[ev.cause.index - 1]
                    if ev.id not in (parent.returned_event_ids or []) or (
                        parent.processed_by_attempt != ev.cause.attempt
                    ):
                        problems.append(f"{session_id} event {ev.index}: its cause disagrees")
                for child in ev.returned_event_ids or []:
                    if child not in by_id:
                        problems.append(f"{session_id} event {ev.index}: returned {child} missing")
            wanted = {
                "dead": summary.failed_count >= 1,
                "blocked": summary.blocked_count >= 1,
                "claimed": summary.claimed_count >= 1,
                "waiting": summary.waiting_count == 1,
                "scheduled": summary.scheduled_count == 1,
                "done": summary.pending_count == 0 and summary.failed_count == 0,
                "cancelled": summary.pending_count == 0,
                "ready": summary.pending_count >= 1 and summary.claimed_count == 0,
                "expired": summary.pending_count == 1 and summary.claimed_count == 0,
                "retrying": summary.pending_count == 1 and summary.failure_count >= 1,
            }.get(kind, True)
            if not wanted:
                problems.append(f"{kind} session {session_id}: its summary says {summary}")
        if "presence" in written.examples:
            live = store.presence.read(written.examples["presence"])
            found["presence_fields"] = len(live)
            if len(live) != 4:
                problems.append(f"presence: {live}")
        if store.engine.dialect.name == "sqlite" and integrity:
            with store.engine.connect() as conn:
                result = conn.exec_driver_sql("pragma integrity_check").scalar()
            found["integrity_check"] = result
            if result != "ok":
                problems.append(f"pragma integrity_check: {result}")
        with store.engine.connect() as conn:
            found["snapshots"] = conn.execute(select(func.count()).select_from(snapshots)).scalar()
            found["presence"] = conn.execute(select(func.count()).select_from(presence)).scalar()
        if (found["snapshots"], found["presence"]) != (written.snapshots, written.presence):
            problems.append(
                f"snapshots and presence rows: {found['snapshots']}, {found['presence']} read; "
                f"{written.snapshots}, {written.presence} written"
            )
    found["seconds"] = round(time.perf_counter() - t0, 2)
    if problems:
        raise AssertionError("ui_data: the store reads otherwise:\n  " + "\n  ".join(problems))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ui_data",
        description="Fill an empty a2sql database with sessions for the operator UI.",
    )
    parser.add_argument("--url", required=True, help="the database (created and migrated)")
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--events-per-session", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=20_000, help="events per transaction")
    parser.add_argument("--no-analyze", action="store_true", help="no ANALYZE on SQLite")
    parser.add_argument("--no-check", action="store_true", help="skip reading it back")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    written = load(
        args.url,
        sessions=args.sessions,
        events_per_session=args.events_per_session,
        seed=args.seed,
        batch=args.batch,
        analyze=not args.no_analyze,
        progress=not args.json and sys.stderr.isatty(),
    )
    out = written.as_json()
    if not args.no_check:
        out["check"] = check(args.url, written)
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key:>24}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
