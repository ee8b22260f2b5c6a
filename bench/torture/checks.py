"""The invariants of a workers run, checked from the database and the processes' logs alone."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from a2sql import SessionSummary, Store, StoredEvent
from bench.torture.common import Report, ms
from bench.torture.workers import child_id, generation, is_doomed

Key = tuple[str, int]
AttemptKey = tuple[str, int, int]


@dataclass(frozen=True)
class RunFacts:
    """What the checks need to know about the run besides the database and the logs."""

    prefix: str
    max_failures: int
    max_gen: int
    # No process was killed and no fault injected: every committed claim and
    # failure was logged, so the counts must match exactly.
    exact_counts: bool
    # How far apart the workers' clocks are (--skew). The times a session's
    # writes record never go back (docs/contract.md), whatever the skew: they
    # are compared exactly.
    clock_skew_ms: float = 0.0


def all_sessions(store: Store, prefix: str) -> dict[str, SessionSummary]:
    found: dict[str, SessionSummary] = {}
    cursor = None
    while True:
        page = store.inspect.list_sessions(prefix=prefix, cursor=cursor, limit=1000)
        found.update((s.session_id, s) for s in page.sessions)
        cursor = page.cursor
        if cursor is None:
            return found


# --- checks every scenario's sessions pass ---------------------------------------


def logged_anomalies(records: list[dict[str, Any]]) -> list[str]:
    """What the processes logged as anomalies (what each could tell was wrong by itself)."""
    found = []
    for r in records:
        if r["k"] == "anomaly":
            details = {k: v for k, v in r.items() if k not in ("k", "src", "t", "what")}
            found.append(f"{r['src']}: {r['what']} {details}")
    return found


def index_and_id_problems(events: dict[str, list[StoredEvent]]) -> list[str]:
    """Each session's indexes are 1..n without a gap; no event id is stored twice."""
    found = []
    ids: Counter[str] = Counter()
    for sid, session in events.items():
        indexes = [e.index for e in session]
        if indexes != list(range(1, len(session) + 1)):
            found.append(f"{sid}: indexes are not gapless 1..n: {indexes[:20]}...")
        ids.update(e.id for e in session)
    for event_id, count in ids.items():
        if count > 1:
            found.append(f"event id {event_id!r} stored {count} times")
    return found


def created_at_problems(sid: str, events: list[StoredEvent]) -> list[str]:
    """A session's times never go back along its indexes (docs/contract.md)."""
    return [
        f"{sid}#{later.index}: created at {later.created_at}, before "
        f"#{earlier.index} at {earlier.created_at}"
        for earlier, later in pairwise(events)
        if later.created_at < earlier.created_at
    ]


def summary_problems(
    summaries: dict[str, SessionSummary], events: dict[str, list[StoredEvent]]
) -> list[str]:
    """inspect.list_sessions agrees with the events read."""
    found = []
    for sid, summary in summaries.items():
        session = events[sid]
        expected = (
            len(session),
            sum(1 for e in session if e.processed_at is None and e.failed_at is None),
            sum(1 for e in session if e.failed_at is not None),
            sum(e.attempt_count for e in session),
            sum(e.failure_count for e in session),
        )
        found_counts = (
            summary.event_count,
            summary.pending_count,
            summary.failed_count,
            summary.attempt_count,
            summary.failure_count,
        )
        if found_counts != expected:
            found.append(f"{sid}: inspect counts {found_counts}, events read say {expected}")
    return found


def is_settled(event: StoredEvent) -> bool:
    """Appended already processed (a last-generation child): never work."""
    return event.processed_at is not None and event.processed_by_attempt is None


def fate(event: StoredEvent) -> str:
    if is_settled(event):
        return "settled"
    if event.processed_at is not None:
        return "processed"
    if event.failed_at is not None:
        return "dead"
    return "open"


class WorkerRunCheck:
    """Checks one workers run; every violation is appended to ``report.anomalies``."""

    def __init__(
        self, store: Store, facts: RunFacts, records: list[dict[str, Any]], report: Report
    ) -> None:
        self.facts = facts
        self.records = records
        self.report = report
        self.summaries = all_sessions(store, facts.prefix)
        self.events = {sid: store.read(sid) for sid in sorted(self.summaries)}
        self.at: dict[Key, StoredEvent] = {
            (sid, e.index): e for sid, events in self.events.items() for e in events
        }
        self.blocked: set[Key] = set()
        # The previous unsettled event of the same lane, by event.
        self.lane_previous: dict[Key, StoredEvent] = {}

    def bad(self, message: str) -> None:
        self.report.anomalies.append(message)

    def run(self) -> None:
        self.check_logged_anomalies()
        self.check_indexes_and_ids()
        self.check_batches()
        for sid, events in self.events.items():
            self.check_session(sid, events)
        self.check_claim_logs()
        self.check_outcome_logs()
        self.check_summaries()
        self.count()

    # --- the database alone ------------------------------------------------------

    def check_logged_anomalies(self) -> None:
        self.report.anomalies += logged_anomalies(self.records)

    def check_indexes_and_ids(self) -> None:
        self.report.anomalies += index_and_id_problems(self.events)

    def check_batches(self) -> None:
        """Every batch the feeder appended is stored exactly once, contiguously, in order."""
        fed: set[str] = set()
        for batch in (r for r in self.records if r["k"] == "batch"):
            sid, ids, indexes = batch["s"], batch["ids"], batch["idx"]
            fed.update(ids)
            stored = [self.at.get((sid, i)) for i in indexes]
            if [e.id if e else None for e in stored] != ids:
                self.bad(f"{sid}: batch {ids} not stored at indexes {indexes}")
            if indexes != list(range(indexes[0], indexes[0] + len(indexes))):
                self.bad(f"{sid}: batch {ids} got non-contiguous indexes {indexes}")
        for (sid, index), event in self.at.items():
            if event.cause is None and event.id not in fed:
                self.bad(f"{sid}#{index}: event {event.id!r} was never appended by the feeder")

    def check_session(self, sid: str, events: list[StoredEvent]) -> None:
        children: dict[int, list[StoredEvent]] = defaultdict(list)
        for event in events:
            if event.cause is not None:
                children[event.cause.index].append(event)
                self.check_child(sid, event)
        lanes: dict[str, list[StoredEvent]] = defaultdict(list)
        for event in events:
            if event.lane is not None and not is_settled(event):
                lanes[event.lane].append(event)
        for lane, members in lanes.items():
            self.check_lane(sid, lane, members)
        for event in events:
            self.check_fate(sid, event, children.get(event.index, []))
        self.report.anomalies += created_at_problems(sid, events)

    def check_child(self, sid: str, child: StoredEvent) -> None:
        cause = child.cause
        assert cause is not None
        where = f"{sid}#{child.index} ({child.id!r})"
        parent = self.at.get((sid, cause.index))
        if parent is None or cause.index >= child.index:
            self.bad(f"{where}: cause {cause} names no earlier event")
            return
        if child.id != child_id(parent.id, cause.attempt):
            self.bad(f"{where}: not the child id attempt {cause.attempt} of {parent.id!r} returns")
        if parent.processed_by_attempt != cause.attempt:
            self.bad(
                f"{where}: child of attempt {cause.attempt}, but the parent was processed "
                f"by attempt {parent.processed_by_attempt} (a superseded attempt's child)"
            )
        if parent.returned_event_ids != [child.id]:
            self.bad(f"{where}: parent remembers {parent.returned_event_ids}")
        if child.lane != parent.lane or cause.batch_size is not None:
            self.bad(f"{where}: lane {child.lane!r} or cause {cause} differs from the parent's")
        gen = generation(child)
        payload = child.payload if isinstance(child.payload, dict) else {}
        if (
            gen != generation(parent) + 1
            or payload.get("parent") != parent.id
            or payload.get("attempt") != cause.attempt
        ):
            self.bad(f"{where}: payload {child.payload!r} does not match its parent")
        if is_settled(child) != (gen >= self.facts.max_gen):
            self.bad(f"{where}: generation {gen} stored settled={is_settled(child)}")

    def check_lane(self, sid: str, lane: str, members: list[StoredEvent]) -> None:
        """FIFO: processed events first, in index order and time; then at most one dead
        event, then events never claimed (blocked behind it)."""
        where = f"{sid} lane {lane!r}"
        fates = "".join({"processed": "P", "dead": "D", "open": "O"}[fate(e)] for e in members)
        dead_at = fates.find("D")
        if dead_at >= 0:
            if "P" in fates[dead_at:] or "D" in fates[dead_at + 1 :]:
                self.bad(f"{where}: events after a dead-lettered head progressed: {fates}")
            self.blocked.update((sid, e.index) for e in members[dead_at + 1 :])
        previous: StoredEvent | None = None
        for event in members:
            if previous is not None:
                self.lane_previous[(sid, event.index)] = previous
            if previous is not None and previous.processed_at is not None:
                done = previous.processed_at
                if event.processed_at is not None and event.processed_at < done:
                    self.bad(
                        f"{where}: #{event.index} processed at {event.processed_at} before "
                        f"#{previous.index} at {done}"
                    )
                if event.first_claimed_at is not None and event.first_claimed_at < done:
                    self.bad(
                        f"{where}: #{event.index} claimed at {event.first_claimed_at} while "
                        f"#{previous.index} was unprocessed (processed at {done})"
                    )
            elif previous is not None and event.attempt_count:
                self.bad(f"{where}: #{event.index} claimed while #{previous.index} unprocessed")
            previous = event

    def check_fate(self, sid: str, event: StoredEvent, children: list[StoredEvent]) -> None:
        where = f"{sid}#{event.index} ({event.id!r})"
        kind = fate(event)
        if kind == "settled":
            if event.attempt_count or event.first_claimed_at or event.claim_holder:
                self.bad(f"{where}: a settled event was claimed")
            if children:
                self.bad(f"{where}: a settled event has children")
            return
        if is_doomed(event) != (kind == "dead"):
            # Only doomed events (every handler fails) may reach max_failures.
            self.bad(f"{where}: doomed={is_doomed(event)}, but {kind}")
        if kind == "processed":
            attempt = event.processed_by_attempt or 0
            if not 1 <= attempt <= event.attempt_count:
                self.bad(f"{where}: processed by attempt {attempt} of {event.attempt_count}")
            if event.claim_holder is not None or event.claim_expires_at is not None:
                self.bad(f"{where}: processed but still claimed by {event.claim_holder!r}")
            if [c.id for c in children] != [child_id(event.id, attempt)]:
                self.bad(f"{where}: processed once, but has children {[c.id for c in children]}")
            if event.failure_count >= self.facts.max_failures:
                self.bad(f"{where}: processed after {event.failure_count} failures")
            last = event.last_claimed_at
            if last is None or event.processed_at is None or last > event.processed_at:
                self.bad(f"{where}: last claimed at {last}, processed at {event.processed_at}")
            return
        if kind == "dead":
            if event.failure_count != self.facts.max_failures:
                self.bad(f"{where}: dead-lettered with {event.failure_count} failures")
            if event.last_failed_attempt != event.attempt_count:
                self.bad(f"{where}: dead-lettered, yet claimed after its last failure")
            if event.failed_at != event.last_failed_at or event.claim_holder is not None:
                self.bad(f"{where}: dead-lettered in an inconsistent state")
            if children:
                self.bad(f"{where}: dead-lettered, yet has children {[c.id for c in children]}")
            return
        if (sid, event.index) in self.blocked:
            if event.attempt_count or event.first_claimed_at or children:
                self.bad(f"{where}: blocked behind a dead-lettered head, yet claimed")
            return
        self.bad(
            f"{where}: neither processed, dead-lettered nor blocked "
            f"(attempts={event.attempt_count}, failures={event.failure_count}, "
            f"holder={event.claim_holder!r})"
        )

    # --- the logs against the database ----------------------------------------

    def check_claim_logs(self) -> None:
        """Attempt numbers are handed out once; leases never overlap; lanes claim in order."""
        claims: dict[AttemptKey, list[dict[str, Any]]] = defaultdict(list)
        lease: dict[AttemptKey, int] = {}
        may_release: set[AttemptKey] = set()
        for r in self.records:
            if r["k"] == "claim":
                key = (r["s"], r["i"], r["a"])
                claims[key].append(r)
                lease[key] = r["exp"]
            elif r["k"] == "renew" and r["r"] == "renewed":
                lease[(r["s"], r["i"], r["a"])] = r["exp"]
            elif r["k"] == "handle" and r["kind"] == "fail":
                may_release.add((r["s"], r["i"], r["a"]))
        by_event: dict[Key, list[int]] = defaultdict(list)
        for (sid, index, attempt), seen in claims.items():
            if len(seen) > 1:
                holders = [r["src"] for r in seen]
                self.bad(f"{sid}#{index}: attempt {attempt} handed out to {holders}")
            by_event[(sid, index)].append(attempt)
        for (sid, index), attempts in by_event.items():
            event = self.at.get((sid, index))
            if event is None:
                self.bad(f"{sid}#{index}: claimed, but not stored")
                continue
            attempts.sort()
            if attempts[-1] > event.attempt_count:
                self.bad(
                    f"{sid}#{index}: attempt {attempts[-1]} logged, {event.attempt_count} stored"
                )
            if self.facts.exact_counts and attempts != list(range(1, event.attempt_count + 1)):
                self.bad(f"{sid}#{index}: attempts logged {attempts}, {event.attempt_count} stored")
            for earlier, later in pairwise(attempts):
                first, second = (sid, index, earlier), (sid, index, later)
                taken_at = claims[second][0]["at"]
                if first not in may_release and taken_at < lease[first]:
                    self.bad(
                        f"{sid}#{index}: attempt {later} claimed at {taken_at}, before the lease "
                        f"of attempt {earlier} ended at {lease[first]}"
                    )
            for attempt in attempts:
                self.check_claim_after_lane_head(event, claims[(sid, index, attempt)][0])

    def check_claim_after_lane_head(self, event: StoredEvent, claim: dict[str, Any]) -> None:
        sid = event.session_id
        head = self.lane_previous.get((sid, event.index))
        if head is None:
            return
        done = ms(head.processed_at)
        if done is None or claim["at"] < done:
            self.bad(
                f"{sid}#{event.index}: attempt {claim['a']} claimed at {claim['at']} while lane "
                f"{event.lane!r} head #{head.index} was unprocessed (processed at {done})"
            )

    def check_outcome_logs(self) -> None:
        completed: dict[Key, set[int]] = defaultdict(set)
        failures: dict[Key, set[int]] = defaultdict(set)
        for r in self.records:
            key = (r.get("s", ""), r.get("i", 0))
            if r["k"] == "complete" and r["r"] == "completed":
                completed[key].add(r["a"])
            elif r["k"] == "fail" and r["r"] in ("failed", "dead_lettered"):
                failures[key].add(r["fc"])
                event = self.at.get(key)
                if r["r"] == "dead_lettered" and (event is None or event.failed_at is None):
                    self.bad(f"{key}: reported dead-lettered, not stored so")
        for key, event in self.at.items():
            done = completed.get(key, set())
            if done - {event.processed_by_attempt}:
                self.bad(
                    f"{key}: completions logged for attempts {sorted(done)}, "
                    f"stored as processed by {event.processed_by_attempt}"
                )
            if (
                self.facts.exact_counts
                and fate(event) == "processed"
                and done != {event.processed_by_attempt}
            ):
                self.bad(f"{key}: processed by {event.processed_by_attempt}, no completion logged")
            counted = failures.get(key, set())
            if counted - set(range(1, event.failure_count + 1)):
                self.bad(
                    f"{key}: failure counts logged {sorted(counted)}, {event.failure_count} stored"
                )
            if self.facts.exact_counts and counted != set(range(1, event.failure_count + 1)):
                self.bad(
                    f"{key}: failure counts logged {sorted(counted)}, {event.failure_count} stored"
                )

    def check_summaries(self) -> None:
        """inspect.list_sessions agrees with the events read."""
        self.report.anomalies += summary_problems(self.summaries, self.events)

    def count(self) -> None:
        report = self.report
        fates = Counter(fate(e) for e in self.at.values())
        report.add("sessions", len(self.events))
        report.add("events", len(self.at))
        report.add("seeded", sum(1 for e in self.at.values() if e.cause is None))
        report.add("processed", fates["processed"])
        report.add("dead_lettered", fates["dead"])
        report.add("blocked", len(self.blocked))
        report.add("claims", sum(e.attempt_count for e in self.at.values()))
        report.add("failures", sum(e.failure_count for e in self.at.values()))
        kinds = Counter(
            (r["k"], r.get("r") or r.get("kind")) for r in self.records if r["k"] != "claim"
        )
        report.add("superseded", kinds[("complete", "superseded")] + kinds[("fail", "superseded")])
        report.add("stalls", kinds[("handle", "stall")])
        report.add("renewed", kinds[("renew", "renewed")])
        report.add("abandoned", sum(v for (k, _), v in kinds.items() if k == "abandon"))
