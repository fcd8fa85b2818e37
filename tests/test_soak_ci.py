"""The soak benchmark's short mode: 8 query clients, 2 writers and 2 changers (updates, deletes and
invalidations of memories the writers have just written and the queries read: issue 12, point 6) for
20 s on 2k memories, with no error, no resurrected delete, no stale update and every derived statistic
equal to a recount at the end; then the
cancel race (issue 15, point 1: a 10 ms retrieval deadline, 6 query clients and a writer on a pool of
4) for 15 s, with no error in either phase and no lost write (benchmarks/soak.py --ci, in a database
of its own). Before the fix the race failed queries, workers and writes with QueryCanceled."""

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
            timeout=240,
            check=False,
        )
    finally:
        drop_database(admin_dsn, name)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.rstrip().endswith("SOAK PASSED")
    assert "lost 0, unacknowledged rows 0, mismatched 0" in result.stdout
    assert "cancel race:" in result.stdout
    assert (
        "change checks: resurrected 0, stale updates 0, not found but never deleted 0, bm25_docs off 0, "
        "bm25_terms off 0, entity_edges off 0, entities unmentioned 0"
    ) in result.stdout, result.stdout
    changes = result.stdout[result.stdout.index("changes: ") :].split("\n")[0]
    assert "errors 0" in changes and "update " in changes and "delete " in changes, changes  # both did happen
    assert result.stdout.count("\nerrors: 0\n") == 2, result.stdout  # the soak's and the race's
    race = result.stdout[result.stdout.index("cancel race:") :]
    degraded = int(race.split("degraded (a pending or failed worker): ")[1].split()[0])
    assert degraded > 0  # the deadline did cancel workers
