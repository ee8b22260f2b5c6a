"""One process of ``a2sql worker --processes N`` (its parent is ``a2sql.worker.pool``):
a worker that stops when the parent asks, and also when the parent dies.

The parent asks over a pipe of its own (``STOP``), not by a signal: a child that also
got the signal itself (SIGTERM sent to the whole process group) then stops once, rather
than taking the parent's copy as a second signal ("stop at once"). Ctrl-C sends SIGINT
to the whole group too: a child ignores it and waits for the parent's word.

When the parent dies, even by SIGKILL, the child's end of that pipe and the parent's
sentinel become ready: the worker stops claiming and stops as ``worker.stop()`` does,
and a child still alive ``ORPHAN_EXIT_S`` later (a handler that does not return) exits
at once. Its claims not released then come back when their lease ends.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any

from a2sql.worker.serving import StopWorker, configure_logging, serve

log = logging.getLogger("a2sql.worker")

#: What the parent sends on a child's pipe to have it stop gracefully.
STOP = "stop"
#: How long a child whose parent died may take to stop before it exits regardless.
ORPHAN_EXIT_S = 3.0


def main(options: dict[str, Any], control: Connection) -> None:
    """The child process: serve until the worker returns, the parent asks or dies."""
    # Ctrl-C reaches the whole group; the parent's STOP is what counts. Ignored
    # before the worker starts, SIGINT stays ignored: the worker leaves it so.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging()
    stop = _StopRequest()
    threading.Thread(
        target=_watch_parent, args=(control, stop), name="a2sql-parent-watch", daemon=True
    ).start()
    sys.exit(serve(options, on_start=stop.attach))


class _StopRequest:
    """A stop asked from the watching thread, before or after the worker exists."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked = False
        self._stop: StopWorker | None = None

    def attach(self, stop: StopWorker) -> None:
        with self._lock:
            self._stop, asked = stop, self._asked
        if asked:
            stop()

    def ask(self) -> None:
        with self._lock:
            self._asked, stop = True, self._stop
        if stop is not None:
            stop()


def _watch_parent(control: Connection, stop: _StopRequest) -> None:
    parent = multiprocessing.parent_process()
    assert parent is not None, "a pool's child has a parent process"
    watched: list[Any] = [control, parent.sentinel]
    while True:
        ready = wait(watched)
        if control not in ready:
            break  # the parent's sentinel: it is gone
        try:
            control.recv()
        except EOFError:
            break  # the parent's end of the pipe closed with it
        log.info("asked to stop by the parent; running handlers may finish")
        stop.ask()
        watched = [parent.sentinel]  # the parent may still die while this one drains
    log.warning(
        "parent process %d is gone: stopping; exiting in at most %g s",
        parent.pid,
        ORPHAN_EXIT_S,
    )
    stop.ask()
    time.sleep(ORPHAN_EXIT_S)  # a daemon thread: ends with the process if it exits first
    log.warning("still running %g s after the parent died: exiting now", ORPHAN_EXIT_S)
    os._exit(1)
