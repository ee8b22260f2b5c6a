"""The contract's bad-input cases marked ``a2sql_before_the_database`` are refused before
the store sends anything, on every engine: the repository runs them on one engine
(tests/plugin.py), and this keeps that choice true as cases are added."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

import a2sql
from a2sql.testing import FakeClock
from a2sql.testing.conformance import test_bad_input as bad_input
from a2sql.testing.plugin import BEFORE_THE_DATABASE


def _marked(param: Any) -> bool:
    return any(mark.name == BEFORE_THE_DATABASE for mark in param.marks)


def test_marked_cases_send_nothing_and_the_others_something(url: str) -> None:
    store = a2sql.create_store(url, migrate=True, clock=FakeClock())
    sent: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    try:
        bad_input._seed(store)
        for param in bad_input.CASE_PARAMS:
            case = param.values[0]
            reached = False
            for bad in case.bad:
                sent.clear()
                with pytest.raises(a2sql.A2Error):
                    case.call(store, bad)
                reached = reached or bool(sent)
            assert reached != _marked(param), (param.id, sent)
    finally:
        store.close()
