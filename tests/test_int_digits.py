"""Big integers in payloads do not depend on Python's int/str digit limit (SPEC §4).

Python refuses to convert ints of more than ``sys.get_int_max_str_digits()``
digits to or from text (4300 by default; ``PYTHONINTMAXSTRDIGITS`` can lower
it to 640). a2sql accepts ints of up to 13,000 bits (about 3,900 digits), so
a process with a lowered limit must still read and write what another stored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import a2sql
from a2sql import NewEvent
from a2sql.core import jsontext

BIG = 10**3000 + 7  # about 3,000 digits: under a2sql's bound, over a lowered limit

LOWERED_LIMIT_PROCESS = textwrap.dedent(
    """
    import sys
    import a2sql
    from a2sql import NewEvent

    big = 10**3000 + 7
    store = a2sql.create_store(sys.argv[1])
    [event] = store.read("s")
    assert event.payload == {"n": big, "list": [big, -big]}, "read back differs"
    store.append("s", [NewEvent("t", {"n": -big})])  # encoding, under the same limit
    print("ok", sys.get_int_max_str_digits())
    """
)


def test_a_process_with_a_lowered_digit_limit_reads_and_writes_big_ints(url: str) -> None:
    """A payload holding a 3,000-digit int, stored by this process, is read back exactly
    by a process run with PYTHONINTMAXSTRDIGITS=640, which can append one too."""
    store = a2sql.create_store(url, migrate=True)
    try:
        store.append("s", [NewEvent("t", {"n": BIG, "list": [BIG, -BIG]})])
        done = subprocess.run(
            [sys.executable, "-c", LOWERED_LIMIT_PROCESS, url],
            env={**os.environ, "PYTHONINTMAXSTRDIGITS": "640"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == ["ok", "640"]
        assert [e.payload for e in store.read("s")][1] == {"n": -BIG}
    finally:
        store.close()


def test_json_text_round_trips_ints_of_every_length_under_the_lowest_digit_limit() -> None:
    """a2sql.core.jsontext prints and parses ints of any length with Python's limit at its
    lowest (640 digits), chunk boundaries and signs included, as json does unlimited."""
    values = [10**n + d for n in (599, 600, 601, 639, 640, 1199, 1200, 3900) for d in (0, -1, 1)]
    values += [-v for v in values] + [0, -1]
    document = {"ints": values, "nested": [{"k": values[-3]}]}
    expected = json.dumps(document, separators=(",", ":"))  # under the default limit
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        text = jsontext.encode_json(document)
        assert jsontext.decode_json(text) == document
        assert jsontext.encode_json(document, sort_keys=True) == text  # keys already sorted
    finally:
        sys.set_int_max_str_digits(previous)
    assert text == expected
