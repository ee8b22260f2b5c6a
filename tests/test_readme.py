"""The README's one-screen example runs as written, twice in a row (its appends replay)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_one_screen_example_runs_twice(tmp_path: Path) -> None:
    """The example on the embedded default, in a fresh folder, then again: both succeed,
    and the session holds its two events and one settled receipt per completion."""
    match = re.search(r"## The API on one screen\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert match, "README has no one-screen example"
    for _ in range(2):
        ran = subprocess.run(
            [sys.executable, "-c", match.group(1)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split() == ["completed"]
    import a2sql

    with a2sql.create_store(f"sqlite:///{tmp_path / '.a2' / 'dev.db'}") as store:
        events = store.read("order-17")
    assert [e.type for e in events] == [
        "order.placed",
        "order.paid",
        "receipt.sent",
        "receipt.sent",
    ]
    assert all(e.processed_at is not None for e in events)
