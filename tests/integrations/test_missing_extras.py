"""An integration imported without its framework says which extra installs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # as if it were not installed
try:
    import a2sql.integrations.{module}
except ImportError as error:
    print(error)
"""


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("langgraph", ["langgraph", "langchain_core"], "langgraph"),
        ("openai_agents", ["agents"], "openai-agents"),
    ],
)
def test_an_integration_without_its_framework_names_its_extra(
    module: str, blocked: list[str], extra: str
) -> None:
    said = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(module=module, blocked=blocked)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert f"a2sql.integrations.{module} needs" in said, said
    assert f"pip install -e '.[{extra}]' in a clone" in said, said
