"""Torture harness for a2sql: many processes, crashes and server faults; invariants checked.

Run ``python -m bench.torture --help``. The CI tests in ``tests/torture`` call
the same scenarios with short settings.
"""
