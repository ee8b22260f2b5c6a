"""examples/orders, run as its README says, on SQLite and PostgreSQL: `alembic upgrade
head` from empty, the app (twice), `alembic check` clean."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import a2sql
from a2sql.execution.engines import resolve_url

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "orders"
ALEMBIC = str(Path(sys.executable).with_name("alembic"))


def test_the_orders_example_runs_as_documented(url: str, tmp_path: Path) -> None:
    """Both schemas from one `alembic upgrade head`; each order paid once, also after a
    second run; `alembic check` finds nothing to do."""
    app = tmp_path / "orders"
    shutil.copytree(EXAMPLE, app)
    driver_url = resolve_url(url).render_as_string(hide_password=False)
    env = {**os.environ, "ORDERS_DATABASE_URL": driver_url}

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            list(command), cwd=app, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    run(ALEMBIC, "upgrade", "head")
    first = run(sys.executable, "app.py").stdout.splitlines()
    assert first == ["order-1 paid 12.50", "order-2 paid 7.00", "order-3 paid 30.25"]
    assert run(sys.executable, "app.py").stdout.splitlines() == first
    checked = run(ALEMBIC, "check")
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr
    with a2sql.create_store(url, migrate=False) as store:
        for n in (1, 2, 3):
            events = store.read(f"order-{n}")
            assert [e.type for e in events] == [
                "order.placed",
                "order.paid",
                "order.placed.handled",
                "order.paid.handled",
            ]
            assert all(e.processed_at is not None for e in events)
