"""How the ``a2sql`` command prints: rich in a terminal, plain and stable otherwise,
JSON on request.

Tables are tab-separated lines with a header when stdout is not a terminal,
so that scripts can cut and grep them; ``--json`` prints one JSON document
(or, for ``tail``, one JSON object per line). Times are ISO 8601 in UTC, to
the millisecond. Diagnostics, such as which database a command reads, go to
stderr. Every text printed here has its control characters escaped, and in a
terminal it goes to rich as ``Text``, never as markup: stored text is shown
as it is, whoever wrote it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from a2sql.core.escaping import json_printable, printable


def iso(value: datetime | None) -> str:
    """A stored time as ISO 8601 in UTC, to the millisecond; ``-`` when unset."""
    if value is None:
        return "-"
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def age(value: datetime | None, now: datetime) -> str:
    """How long ago ``value`` was, in the largest units that matter (``3m 12s``)."""
    if value is None:
        return "-"
    seconds = max(0, int((now - value).total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")]
    shown = [f"{n}{unit}" for n, unit in parts if n][:2]
    return " ".join(shown) or "0s"


def jsonable(value: Any) -> Any:
    """Records, datetimes and containers as JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


class Output:
    """One command's printing."""

    def __init__(self, *, as_json: bool = False) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=True)
        self.errors = Console(stderr=True, highlight=False, soft_wrap=True)
        self.rich = self.console.is_terminal and not as_json

    def database(self, shown_url: str) -> None:
        """Say which database the command works on (stderr, or a header in a terminal)."""
        if self.rich:
            self.console.print(Text(f"database: {printable(shown_url)}", style="dim"))
        elif not self.as_json:
            print(f"database: {printable(shown_url)}", file=sys.stderr)

    def json(self, document: Any) -> None:
        print(json_printable(json.dumps(jsonable(document), ensure_ascii=False, indent=None)))
        sys.stdout.flush()

    def line(self, text: str, style: str | None = None) -> None:
        if self.rich:
            self.console.print(Text(printable(text), style=style or ""))
        else:
            print(printable(text))
            sys.stdout.flush()

    def note(self, text: str) -> None:
        """A remark beside the data (stderr when plain, so stdout stays data)."""
        if self.rich:
            self.console.print(Text(printable(text), style="dim"))
        else:
            print(printable(text), file=sys.stderr)

    def fields(self, pairs: Sequence[tuple[str, object]], title: str | None = None) -> None:
        """``name: value`` lines."""
        if self.rich:
            shown_title = None if title is None else Text(printable(title))
            table = Table(show_header=False, box=None, title=shown_title, title_justify="left")
            table.add_column(style="bold")
            table.add_column()
            for name, value in pairs:
                table.add_row(Text(printable(name)), Text(printable(value)))
            self.console.print(table)
            return
        for name, value in pairs:
            print(f"{printable(name)}: {printable(value)}")

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[object]],
        *,
        styles: Sequence[str | None] | None = None,
        empty: str = "none",
    ) -> None:
        """Rows under a header: a rich table, or tab-separated lines."""
        if self.rich:
            if not rows:
                self.console.print(Text(empty, style="dim"))
                return
            table = Table(box=None, header_style="bold", pad_edge=False)
            cells = [[printable(cell) for cell in row] for row in rows]
            for number, name in enumerate(columns):
                if number == len(columns) - 1:
                    table.add_column(name)  # the last one (details, errors) wraps
                    continue
                # Ids, indexes and times are never cut short.
                widest = max(len(name), *(len(row[number]) for row in cells))
                table.add_column(name, no_wrap=True, min_width=widest)
            for position, texts in enumerate(cells):
                style = styles[position] if styles else None
                table.add_row(*(Text(cell) for cell in texts), style=style)
            self.console.print(table)
            return
        # A tab or a line break in a cell is escaped (\t, \n) with the other
        # controls: the lines stay one row each, their columns tab-separated.
        print("\t".join(columns))
        for row in rows:
            print("\t".join(printable(cell) for cell in row))

    @contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[Any]:
        """A progress bar in a terminal; nothing otherwise. Yields ``advance(n)``."""
        if not self.rich:
            yield lambda _n=1: None
            return
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        ) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n=1: bar.advance(task, n)
