"""Concurrency and fault torture: many processes, crashes, server faults, hostile input."""
