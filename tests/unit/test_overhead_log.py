"""benchmarks/overhead.py's reading of the server log: each statement's Parse + Bind + Execute, per backend,
and the critical path they make (the workers side by side, the rest one after the other)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import overhead  # benchmarks/ is not a package: imported from its folder

LINES = [
    "2026-12-06 23:25:22.027 UTC [11] LOG:  duration: 0.014 ms  bind _pg3_1: SELECT set_config('memoria.tenant', $1, true)",
    "2026-12-06 23:25:22.028 UTC [11] LOG:  duration: 0.005 ms  execute _pg3_1: SELECT set_config('memoria.tenant', $1, true)",
    "2026-12-06 23:25:22.029 UTC [12] LOG:  duration: 0.100 ms  parse <unnamed>: -- BM25 worker (Okapi BM25 with Lucene's",
    "2026-12-06 23:25:22.029 UTC [11] LOG:  duration: 0.070 ms  bind _pg3_4: -- Vector worker, exact: the cosine distance",
    "2026-12-06 23:25:22.030 UTC [12] LOG:  duration: 0.050 ms  bind <unnamed>: -- BM25 worker (Okapi BM25 with Lucene's",
    "2026-12-06 23:25:22.031 UTC [11] LOG:  duration: 0.180 ms  execute _pg3_4: -- Vector worker, exact: the cosine distance",
    "    FROM memoria.memories m",  # a statement's next lines follow its first, unprefixed
    "2026-12-06 23:25:22.032 UTC [12] LOG:  duration: 0.550 ms  execute <unnamed>: -- BM25 worker (Okapi BM25 with Lucene's",
    "2026-12-06 23:25:22.033 UTC [13] LOG:  duration: 0.270 ms  bind _pg3_0: /* memoria-pg: sql/final_candidates.sql (first rows) */",
    "2026-12-06 23:25:22.035 UTC [13] LOG:  duration: 1.550 ms  execute _pg3_0: /* memoria-pg: sql/final_candidates.sql (first rows) */",
]


def test_each_statement_sums_its_parse_bind_and_execute_on_its_backend():
    got = overhead.logged_statements(LINES)
    assert [(pid, text.split(" ")[1], round(ms, 3)) for pid, text, ms in got] == [
        ("11", "set_config('memoria.tenant',", 0.019),
        ("11", "Vector", 0.25),
        ("12", "BM25", 0.7),
        ("13", "memoria-pg:", 1.82),
    ]


def test_the_critical_path_takes_the_longest_worker_block_and_every_other_statement():
    """A worker's settings count in its block (they ran beside the other worker), the final CTE's
    settings one after the other with it."""
    lines = [*LINES[:-2], *(line.replace("[11]", "[13]") for line in LINES[:2]), *LINES[-2:]]
    path = overhead.log_path(overhead.logged_statements(lines))
    assert {k: round(v, 3) for k, v in path["workers"].items()} == {"vector": 0.269, "bm25": 0.7}
    assert {k: round(v, 3) for k, v in path["sequential"].items()} == {"final": 1.82, "settings": 0.019}
    assert round(path["path_ms"], 3) == round(0.7 + 1.82 + 0.019, 3)


def test_the_log_is_read_by_complete_lines_from_where_it_was(tmp_path):
    log_file = tmp_path / "postgresql.log"
    log_file.write_text(LINES[0] + "\n")
    log = overhead.ServerLog(str(log_file))
    try:
        with log_file.open("a") as f:
            f.write(LINES[1] + "\n" + LINES[2][:30])
        assert log.lines() == [LINES[1]]  # not what was there before, not the unfinished line
        with log_file.open("a") as f:
            f.write(LINES[2][30:] + "\n")
        assert log.lines() == [LINES[2]]
    finally:
        log.close()


def test_a_log_file_that_cannot_be_read_is_a_clear_error_before_anything_is_set(tmp_path):
    with pytest.raises(SystemExit, match="cannot read the server's log file"):
        with overhead.statement_logging(None, "memoria", str(tmp_path / "missing.log")):  # type: ignore[arg-type]
            pass  # the database's logging is never touched: the admin connection is not even used
