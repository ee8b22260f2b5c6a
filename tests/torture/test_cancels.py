"""The cancellation storm, briefly: an AsyncStore's calls cancelled at random points by
the thousand, each checked against the database (bench/torture/cancels.py).

``CancelledError`` means the call committed nothing; a call that returns committed
what its result says; a call that raises wrote nothing; and once the store is closed
no connection of its is left. On PostgreSQL the calls cover both ways an AsyncStore
runs a write: sent whole from the event loop, and handed to a thread (including
waits for a session's lock). ``python -m bench.torture --scenario cancels`` runs it
for longer.
"""

from __future__ import annotations

from bench.torture.cancels import CancelsConfig, run_cancels
from bench.torture.common import Target
from tests.torture.conftest import assert_clean


def test_cancelled_calls_commit_nothing_and_returned_ones_everything(
    torture_target: Target, seed: int
) -> None:
    """Every call's outcome matches the database: no anomaly. A thousand cancellations
    (a few seconds; at most thirty on a slow machine; ``python -m bench.torture
    --scenario cancels`` runs as many as asked), landed both before the commit
    (CancelledError) and after it (the result returned)."""
    config = CancelsConfig(target=torture_target, tasks=16, duration=30.0, seed=seed, cancels=1000)
    report = run_cancels(config)
    assert_clean(report)
    figures = report.figures
    assert figures["cancels"] >= 1000 or report.seconds >= config.duration, figures
    assert figures["cancelled"] > 0 and figures["returned_though_cancelled"] > 0, figures
    # Both ways: the calls sent from the loop, and those handed to a thread.
    for op in ("append", "complete", "complete_many", "append_held"):
        assert figures.get(f"cancels_{op}", 0) > 0, figures
