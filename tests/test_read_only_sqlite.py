"""Reading a SQLite file opened read-only (``?mode=ro``): reads need no write access."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import a2sql
from a2sql import NewEvent
from a2sql.testing import FakeClock


def test_presence_read_on_a_read_only_file_filters_expired_fields(tmp_path: Path) -> None:
    """presence.read on a read-only file returns the live fields, expired ones left out,
    without sweeping (which would need to write)."""
    path = tmp_path / "a2.db"
    clock = FakeClock()
    with a2sql.create_store(f"sqlite:///{path}", clock=clock, migrate=True) as store:
        store.append("s", [NewEvent("t")])
        store.presence.set("ns", "p", {"short": 1}, at=clock.now(), seen=1, ttl_ms=1_000)
        store.presence.set("ns", "p", {"long": 2}, at=clock.now(), seen=1, ttl_ms=60_000)
    clock.advance(ms=1_000)
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"
    with a2sql.create_store(read_only, clock=clock) as store:
        [entry] = store.presence.read("ns")
        assert (entry.field, entry.value) == ("long", 2)
        assert entry.expires_at == clock.now() + timedelta(milliseconds=59_000)
        assert [event.type for event in store.read("s")] == ["t"]


def test_a_sqlite_uri_names_its_file_not_a_folder_called_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sqlite:///file:/abs/a2.db?mode=ro&uri=true`` opens /abs/a2.db: a2sql checks that
    file, and creates no folder named ``file:`` where the program runs."""
    path = tmp_path / "data" / "a2.db"
    with a2sql.create_store(f"sqlite:///{path}") as store:
        store.append("s", [NewEvent("t", id="e1")])
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    with a2sql.create_store(f"sqlite:///file:{path}?mode=ro&uri=true", migrate=False) as store:
        assert [e.id for e in store.read("s")] == ["e1"]
    assert list(workdir.iterdir()) == []
