"""The soak benchmark's short mode: 8 query clients and 2 writers for 20 s on 2k memories, with no
error and no lost write (benchmarks/soak.py --ci, in a database of its own)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from tests.conftest import drop_database

SOAK = Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"


def test_soak_ci_has_no_errors_and_no_lost_writes(admin_dsn: str):
    name = f"memoria_soak_{uuid.uuid4().hex[:10]}"
    try:
        result = subprocess.run(
            [sys.executable, str(SOAK), "--ci", "--dsn", admin_dsn, "--db-name", name, "--pool-max-size", "32"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        drop_database(admin_dsn, name)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.rstrip().endswith("SOAK PASSED")
    assert "lost 0, unacknowledged rows 0, mismatched 0" in result.stdout
    assert "errors: 0" in result.stdout
