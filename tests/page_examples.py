"""The documentation's runnable examples: a ```python block followed by ``Prints:`` and a
```text block of what it prints, run as written in a fresh folder by the tests of each
page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = re.compile(r"```python\n((?:(?!```).)*?)```\n\nPrints:\n\n```text\n(.*?)```", re.S)


def examples(page: Path) -> list[tuple[str, str]]:
    """Each example of ``page`` and what the page says it prints."""
    return [(code, prints) for code, prints in EXAMPLE.findall(page.read_text())]


def assert_prints(code: str, prints: str, folder: Path, what: str = "the example") -> None:
    """``code`` run in a process of its own in ``folder``, on the development database it
    makes there (no ``A2SQL_DATABASE_URL``), exits 0 and prints ``prints``."""
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "A2SQL_DATABASE_URL"},
    )
    assert ran.returncode == 0, f"{what}: {ran.stderr}"
    assert ran.stdout.splitlines() == prints.splitlines(), f"{what}: {ran.stdout}\n{ran.stderr}"
