"""docs/time-and-control.md: each example runs as written, in a fresh folder (on the
development database it makes there), and prints what the page says it prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.page_examples import assert_prints

PAGE = Path(__file__).resolve().parents[1] / "docs" / "time-and-control.md"
# A section's title, its one example, and what the page says it prints.
EXAMPLE = re.compile(
    r"## ([^\n]+)\n(?:(?!\n## ).)*?```python\n(.*?)```\n\nPrints:\n\n```text\n(.*?)```", re.S
)


def examples() -> list[tuple[str, str, str]]:
    found = EXAMPLE.findall(PAGE.read_text())
    assert len(found) == 5, "the page has five examples, each with what it prints"
    return found


@pytest.mark.parametrize(("title", "code", "prints"), examples(), ids=lambda v: str(v)[:30])
def test_the_example_prints_what_the_page_says(
    title: str, code: str, prints: str, tmp_path: Path
) -> None:
    assert_prints(code, prints, tmp_path, title)
