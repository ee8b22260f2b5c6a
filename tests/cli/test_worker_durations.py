"""The worker's durations are bounded where they are given: the command and the constructors."""

from __future__ import annotations

import pytest

from a2sql import A2Error, ErrorCode, Store
from a2sql.worker import AsyncWorker, Worker
from tests.cli.conftest import Cli


@pytest.mark.parametrize(
    "option, value",
    [
        ("--poll-interval", "inf"),
        ("--poll-interval", "nan"),
        ("--poll-interval", "-1"),
        ("--poll-interval", "0"),
        ("--poll-interval", "1e9"),
        ("--ttl-ms", "-1"),
        ("--ttl-ms", "0"),
        ("--timeout", "0"),
        ("--timeout", "-1"),
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--concurrency", "0"),
        ("--concurrency", "1025"),
    ],
)
def test_the_command_refuses_a_duration_out_of_range(cli: Cli, option: str, value: str) -> None:
    ran = cli("worker", "app:handle", "--url", "sqlite://", option, value)
    assert ran.code == 2, ran
    assert option in ran.err
    assert len(ran.err.strip().splitlines()) == 1, ran.err


@pytest.mark.parametrize("argument", ["poll_interval", "grace_s"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, 0, 10**9])
def test_the_constructors_refuse_a_duration_out_of_range(argument: str, value: float) -> None:
    store = Store.__new__(Store)  # never used: the arguments are checked first
    for make in (Worker, AsyncWorker):
        with pytest.raises(A2Error) as raised:
            make(store, lambda attempt: None, **{argument: value})  # type: ignore[arg-type, return-value]
        assert raised.value.code is ErrorCode.INVALID_ARGUMENT
        assert argument in str(raised.value)
