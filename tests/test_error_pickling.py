"""An ``A2Error`` crosses a process boundary whole: multiprocessing and
concurrent.futures pickle a worker's error to send it to the parent. Before, it
could not be rebuilt there, and a ``multiprocessing.Pool`` waiting for it hung."""

from __future__ import annotations

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent


def test_an_error_pickles_with_its_code_and_message() -> None:
    error = A2Error(ErrorCode.SUPERSEDED_ATTEMPT, "attempt 1 of event 3 was superseded")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is A2Error
    assert (again.code, again.message, str(again)) == (error.code, error.message, str(error))


def _append_twice(url: str) -> None:
    with a2sql.create_store(url, migrate=False) as store:
        store.append("s", [NewEvent("t", 1, id="e1")])
        store.append("s", [NewEvent("t", 1, id="e1"), NewEvent("t", 2, id="e2")])


def test_an_error_raised_in_a_worker_process_reaches_the_parent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    a2sql.create_store(url, migrate=True).close()
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as pool, pytest.raises(A2Error) as raised:
        pool.submit(_append_twice, url).result(timeout=60)
    assert raised.value.code is ErrorCode.PARTIAL_DUPLICATE_BATCH
