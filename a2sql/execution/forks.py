"""Which process a connection or thread belongs to, across ``fork()``.

What a store holds before a fork (idle pooled connections, the LISTEN
thread and its connection) is the parent's: the child must neither use nor
close it, and makes its own.
"""

from __future__ import annotations

import os

# Bumped in every forked child.
_generation = 0


def _forked() -> None:
    global _generation
    _generation += 1


os.register_at_fork(after_in_child=_forked)


def generation() -> int:
    """A number that differs in a forked child from what it was in its parent."""
    return _generation
