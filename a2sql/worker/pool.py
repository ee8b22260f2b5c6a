"""The parent of ``a2sql worker --processes N``: N worker processes, kept running.

- A child that ends without being asked to (a crash, a signal of its own, ``kill -9``)
  is restarted after a pause: ``RESTART_FIRST_S``, doubling with each restart of that
  child up to ``RESTART_MAX_S``, and back to the first once a child lived
  ``STEADY_S``. Each end is logged: which child (its number and pid), why (exit code
  or signal), which restart comes. Under ``--until-idle`` a child that exits 0 has
  finished, and is not restarted.
- A child that keeps crashing at start, ending abnormally within ``EARLY_S`` of its
  start ``EARLY_LIMIT`` times in a row (a handler module that fails in the child, a
  database it cannot open), stops the pool: the other children are asked to stop,
  and the pool exits 1.
- SIGTERM or SIGINT (Ctrl-C): no more restarts; each child is asked to stop (see
  ``a2sql.worker.child``) and the pool waits for them; it exits 1 if one of them
  ended abnormally meanwhile. A second signal kills the children (SIGKILL; their
  claims come back when their leases end) and exits 1.

The children stay in the parent's process group, so that ``kill -- -PGID`` reaches
them too, and each stops by itself when the parent dies.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from a2sql.worker import child

log = logging.getLogger("a2sql.worker")

RESTART_FIRST_S = 1.0
RESTART_MAX_S = 30.0
#: A child that lived this long is restarted after ``RESTART_FIRST_S`` again.
STEADY_S = 60.0
#: An abnormal end this soon after the start is a crash at start ...
EARLY_S = 10.0
#: ... and this many of them in a row, in one child, stop the pool.
EARLY_LIMIT = 3
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class _Slot:
    """One of the pool's N children, through its restarts."""

    number: int
    process: BaseProcess | None = None
    control: Connection | None = None  # the parent's end of the child's pipe
    started_at: float = 0.0
    restarts: int = 0
    early_ends: int = 0  # abnormal ends within EARLY_S of the start, in a row
    pause_s: float = RESTART_FIRST_S  # before the next restart
    restart_at: float | None = None

    def pause_after(self, lived_s: float, abnormal: bool) -> float | None:
        """The pause before restarting a child that ended after ``lived_s``; ``None``
        when it keeps crashing at start."""
        self.early_ends = self.early_ends + 1 if abnormal and lived_s < EARLY_S else 0
        if self.early_ends >= EARLY_LIMIT:
            return None
        if lived_s >= STEADY_S:
            self.pause_s = RESTART_FIRST_S
        pause, self.pause_s = self.pause_s, min(RESTART_MAX_S, self.pause_s * 2)
        return pause


class Pool:
    """``size`` children, each running the worker the command's ``options`` describe."""

    def __init__(self, options: dict[str, Any], size: int) -> None:
        self._options = options
        self._context = multiprocessing.get_context("spawn")
        self._slots = [_Slot(number) for number in range(1, size + 1)]
        self._stopping = False
        self._failed = False
        self._signals: list[int] = []
        # The signal handler's wake-up: a byte here ends the wait on the children.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    def run(self) -> int:
        """Run until every child has finished or the pool is stopped; 0 when all went
        well, 1 when a child kept crashing at start or ended abnormally while stopping."""
        previous = {each: signal.signal(each, self._on_signal) for each in STOP_SIGNALS}
        try:
            for slot in self._slots:
                self._start(slot)
            while any(slot.process or slot.restart_at is not None for slot in self._slots):
                self._step()
        finally:
            for each, handler in previous.items():
                signal.signal(each, handler)
            os.close(self._wake_r)
            os.close(self._wake_w)
        return 1 if self._failed else 0

    def _step(self) -> None:
        running = {slot.process.sentinel: slot for slot in self._slots if slot.process}
        due = [slot.restart_at for slot in self._slots if slot.restart_at is not None]
        timeout = max(0.0, min(due) - time.monotonic()) if due else None
        ready = wait([*running, self._wake_r], timeout)
        if self._wake_r in ready:
            os.read(self._wake_r, 512)
            while self._signals:
                self._on_stop_signal(self._signals.pop(0))
        for each in ready:
            if each in running:
                self._ended(running[each])
        now = time.monotonic()
        for slot in self._slots:
            if slot.restart_at is not None and slot.restart_at <= now:
                self._start(slot)

    def _start(self, slot: _Slot) -> None:
        theirs, ours = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=child.main,
            # Its number tells it its metrics port (a2sql.worker.serving.exposing).
            args=({**self._options, "child": slot.number}, theirs),
            name=f"a2sql-worker-{slot.number}",
        )
        process.start()
        theirs.close()  # the child's alone: writing to a dead child fails, not blocks
        slot.process, slot.control = process, ours
        slot.started_at, slot.restart_at = time.monotonic(), None
        restart = f" (restart {slot.restarts})" if slot.restarts else ""
        log.info("child %d started: pid %d%s", slot.number, process.pid, restart)

    def _ended(self, slot: _Slot) -> None:
        process, control = slot.process, slot.control
        assert process is not None and control is not None
        process.join()
        code, pid = process.exitcode, process.pid
        assert code is not None
        process.close()
        control.close()
        slot.process = slot.control = None
        why = _reason(code)
        if self._stopping:
            if code != 0:
                self._failed = True
                log.warning(
                    "child %d (pid %d) ended abnormally while stopping: %s", slot.number, pid, why
                )
            else:
                log.info("child %d (pid %d) stopped", slot.number, pid)
            return
        if code == 0 and self._options["until_idle"]:
            log.info("child %d (pid %d) finished: no work left", slot.number, pid)
            return
        pause = slot.pause_after(time.monotonic() - slot.started_at, abnormal=code != 0)
        if pause is None:
            log.error(
                "child %d (pid %d) ended (%s) within %g s of its start %d times in a row: "
                "stopping the pool",
                slot.number,
                pid,
                why,
                EARLY_S,
                EARLY_LIMIT,
            )
            self._failed = True
            self._stop()
            return
        slot.restarts += 1
        slot.restart_at = time.monotonic() + pause
        log.warning(
            "child %d (pid %d) ended: %s; restart %d in %g s",
            slot.number,
            pid,
            why,
            slot.restarts,
            pause,
        )

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Only noted here: the loop acts on it, between its own steps.
        self._signals.append(signum)
        with suppress(BlockingIOError):
            os.write(self._wake_w, b"\0")

    def _on_stop_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if not self._stopping:
            log.info("%s: stopping the children; running handlers may finish", name)
            self._stop()
            return
        log.warning("%s again: killing the children", name)
        self._failed = True
        for slot in self._slots:
            if slot.process is not None:
                slot.process.kill()

    def _stop(self) -> None:
        self._stopping = True
        for slot in self._slots:
            slot.restart_at = None
            if slot.control is not None:
                # A child that died meanwhile has closed its end: its end is next.
                with suppress(OSError):
                    slot.control.send(child.STOP)


def _reason(exitcode: int) -> str:
    """An exit code as ``Process.exitcode`` gives it, in words."""
    if exitcode >= 0:
        return f"exit code {exitcode}"
    try:
        return f"signal {signal.Signals(-exitcode).name}"
    except ValueError:
        return f"signal {-exitcode}"
