"""Start-up: what importing the library and the CLI's query command costs (issue 17, point 8).

The query path may not import the migration tools (Alembic, SQLAlchemy), the evaluation harness, the
service's web stack, or a model runtime: each is imported by the command or the backend that needs
it. Checked in a fresh interpreter, where sys.modules shows everything that was imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("alembic", "sqlalchemy", "evals", "torch", "sentence_transformers", "transformers", "onnxruntime",
         "fastapi", "uvicorn", "mcp", "httpx", "matplotlib")  # fmt: skip


def imported_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [m for m in json.loads(done.stdout.strip().splitlines()[-1]) if m in HEAVY]


@pytest.mark.parametrize(
    "code",
    [
        "import memoria_pg",
        "import memoria_pg.cli",
        "from memoria_pg.system import MemorySystem",
        "from memoria_pg.async_system import AsyncMemorySystem",
        # the query command resolved and its help printed, as `memoria-pg query --help` does
        "from memoria_pg.cli import cli\ntry:\n    cli(['query', '--help'])\nexcept SystemExit:\n    pass",
    ],
)
def test_the_query_path_imports_no_heavy_module(code):
    assert imported_after(code) == []


def test_the_probe_sees_a_heavy_import():
    # the check can fail: a module that does import one is reported
    assert imported_after("import memoria_pg.db.migrate") == ["alembic", "sqlalchemy"]
