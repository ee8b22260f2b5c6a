"""Timing, statistics and the shape of a result: what every workload reports."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar


class Counted(Protocol):
    """Anything that counts the statements it sends to the database, when asked to."""

    name: str
    statements: int
    round_trips: int | None

    def counting(self, on: bool) -> None:
        """Count statements from now on, or stop (counting may cost time: not timed)."""
        ...


@dataclass
class Sample:
    """What one implementation did over the measured rounds of one case."""

    name: str
    round_rates: list[float] = field(default_factory=list)  # ops/s of each round
    latencies_ns: list[int] = field(default_factory=list)  # one per op, every round
    ops: int = 0
    # Counted over the warm-up, untimed: listeners that count cost time.
    counted_ops: int = 0
    statements: int = 0
    round_trips: int | None = None

    def summary(self, items_per_op: int = 1) -> dict[str, Any]:
        lat = sorted(self.latencies_ns)
        rate = statistics.median(self.round_rates) if self.round_rates else 0.0
        return {
            "ops_per_s": round(rate, 1),
            "items_per_s": round(rate * items_per_op, 1),
            "p50_ms": round(percentile(lat, 50) / 1e6, 3),
            "p99_ms": round(percentile(lat, 99) / 1e6, 3),
            "statements_per_op": (
                round(self.statements / self.counted_ops, 2) if self.counted_ops else 0.0
            ),
            "round_trips_per_op": (
                round(self.round_trips / self.counted_ops, 2)
                if self.counted_ops and self.round_trips is not None
                else None
            ),
            "round_ops_per_s": [round(r, 1) for r in self.round_rates],
        }


def percentile(sorted_values: Sequence[int], pct: float) -> float:
    """Nearest-rank percentile of already sorted values (0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), round(pct / 100 * len(sorted_values) + 0.5)))
    return float(sorted_values[rank - 1])


def run_round(
    impl: Counted, op: Callable[[int], object], ops: int, sample: Sample, start: int = 0
) -> None:
    """Run ``op(i)`` for ``i`` in ``start .. start+ops-1``, timing each; add to ``sample``."""
    clock = time.perf_counter_ns
    latencies = sample.latencies_ns
    began = clock()
    for i in range(start, start + ops):
        t0 = clock()
        op(i)
        latencies.append(clock() - t0)
    elapsed = clock() - began
    sample.round_rates.append(ops / (elapsed / 1e9))
    sample.ops += ops


def count_statements(
    impl: Counted, op: Callable[[int], object], ops: int
) -> tuple[int, int | None, int]:
    """Run ``op(0 .. ops-1)`` untimed, counting: (statements, round trips, ops)."""
    impl.counting(True)
    before, trips_before = impl.statements, impl.round_trips
    try:
        for i in range(ops):
            op(i)
    finally:
        impl.counting(False)
    trips = None
    if trips_before is not None and impl.round_trips is not None:
        trips = impl.round_trips - trips_before
    return impl.statements - before, trips, ops


C = TypeVar("C", bound=Counted)


def interleaved(
    impls: Sequence[C],
    make_op: Callable[[C], Callable[[int], object]],
    *,
    ops: int,
    rounds: int,
    warmup: int,
) -> list[Sample]:
    """Measure every implementation over ``rounds`` rounds, alternating their order.

    Round r runs the implementations in order, then reversed on the next
    round, so that neither always runs on a warmer (or more bloated) table.
    ``make_op(impl)`` gives the operation; it receives a running op number.
    Statements are counted over the warm-up, which is not timed.
    """
    ops_of = {impl.name: make_op(impl) for impl in impls}
    samples = {impl.name: Sample(impl.name) for impl in impls}
    counters = dict.fromkeys(ops_of, 0)
    for impl in impls:
        sample = samples[impl.name]
        sample.statements, sample.round_trips, sample.counted_ops = count_statements(
            impl, ops_of[impl.name], warmup
        )
        counters[impl.name] += warmup
    for r in range(rounds):
        order = list(impls) if r % 2 == 0 else list(reversed(impls))
        for impl in order:
            run_round(impl, ops_of[impl.name], ops, samples[impl.name], counters[impl.name])
            counters[impl.name] += ops
    return [samples[impl.name] for impl in impls]


def compare(
    case: str,
    a2: Sample,
    base: Sample,
    *,
    floor: Sample | None = None,
    items_per_op: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    """One case's result: both implementations and the ratio a2sql/baseline of ops/s;
    with ``floor``, the floor too and the ratio a2sql/floor."""
    a2s = a2.summary(items_per_op)
    bs = base.summary(items_per_op)
    ratio = a2s["ops_per_s"] / bs["ops_per_s"] if bs["ops_per_s"] else 0.0
    result = {"case": case, "a2sql": a2s, "baseline": bs, "ratio": round(ratio, 3), **extra}
    if floor is not None:
        fs = floor.summary(items_per_op)
        result["floor"] = fs
        result["floor_ratio"] = (
            round(a2s["ops_per_s"] / fs["ops_per_s"], 3) if fs["ops_per_s"] else 0.0
        )
    return result


class Stopwatch:
    """Wall time since creation, in seconds."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    def seconds(self) -> float:
        return round(time.perf_counter() - self._t0, 2)
