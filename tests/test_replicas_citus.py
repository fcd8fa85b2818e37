"""The tenant-distributed layout for Citus (docs/scale-out.md, memoria_pg/db/distribution.py), checked on
the migrated schema and on the SQL, since no Citus server can run here: what Citus requires of a
table distributed by tenant (the tenant in every key, foreign keys by the tenant, one level of
partitioning, bigint sequences) and of a query to run on one node (every table filtered by the tenant,
no SQL that Citus refuses even there)."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from memoria_pg.db import distribution
from memoria_pg.db.distribution import DISTRIBUTED, REFERENCE, citus_statements, layout_problems

ROOT = Path(__file__).resolve().parents[1]
SQL_FILES = sorted((ROOT / "sql").rglob("*.sql"))
TENANT_FILTER = re.compile(r"\btenant\s*=\s*(current_setting\('memoria\.tenant'\)|v_tenant|\w+\.tenant|%\(tenant\)s)")


# Statements not yet filtering each distributed table by the tenant explicitly (row-level security
# does it on one server; a Citus router query needs the filter written): docs/scale-out.md, step 3.
def test_the_migrated_schema_fits_the_layout(dsn):
    with psycopg.connect(dsn) as conn:
        assert layout_problems(conn) == []


def test_the_check_finds_what_citus_would_refuse(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE memoria.stray (id bigint PRIMARY KEY)")
        conn.execute("ALTER TABLE memoria.memory_history ADD CONSTRAINT history_id_only UNIQUE (id)")
        conn.execute("CREATE UNIQUE INDEX access_by_memory ON memoria.memory_access (memory_id)")
        conn.execute("CREATE SEQUENCE memoria.narrow AS integer")
        conn.execute(
            "CREATE TABLE memoria.memories_nested PARTITION OF memoria.memories FOR VALUES IN ('nested') "
            "PARTITION BY LIST (tenant)"
        )
        conn.execute("ALTER TABLE memoria.query_traces ADD CONSTRAINT traces_id UNIQUE (id)")
        conn.execute(
            "ALTER TABLE memoria.query_trace_candidates ADD CONSTRAINT to_trace_id FOREIGN KEY (trace_id) "
            "REFERENCES memoria.query_traces (id)"
        )
        problems = "\n".join(layout_problems(conn))
    for expected in (
        "memoria.stray is neither distributed nor a reference table",
        "unique constraint history_id_only of memoria.memory_history does not include tenant",
        "unique index memoria.access_by_memory of memory_access does not include tenant",
        "sequence memoria.narrow is integer, not bigint",
        "memoria.memories_nested is a partition that is partitioned itself",
        "foreign key to_trace_id of memoria.query_trace_candidates does not include tenant",
        "foreign key to_trace_id of memoria.query_trace_candidates does not reference query_traces by tenant",
    ):
        assert expected in problems


def test_referenced_tables_are_distributed_first(dsn):
    """create_distributed_table refuses a foreign key to a table not yet distributed."""
    order = [re.search(r"'memoria\.(\w+)'", s).group(1) for s in citus_statements()]
    assert sorted(order) == sorted(DISTRIBUTED + REFERENCE) and order[: len(REFERENCE)] == list(REFERENCE)
    with psycopg.connect(dsn) as conn:
        keys = conn.execute(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint "
            "WHERE contype = 'f' AND connamespace = 'memoria'::regnamespace AND conparentid = 0"
        ).fetchall()
    assert keys
    for table, referenced in keys:
        assert order.index(referenced.split(".")[1]) < order.index(table.split(".")[1]), (table, referenced)


@pytest.mark.parametrize("path", SQL_FILES, ids=lambda p: str(p.relative_to(ROOT / "sql")))
def test_every_statement_filters_each_table_by_the_tenant(path):
    """A tenant's query runs on the tenant's node only when each distributed table it reads is filtered
    by the tenant (Citus's router queries; row-level security alone does not route). Rows an INSERT
    writes carry their tenant: Citus routes them by it."""
    text = re.sub(r"--[^\n]*", "", path.read_text())
    tables = re.findall(r"\b(?:FROM|JOIN|UPDATE)\s+memoria\.(\w+)\b(?!\s*\()", text)
    distributed = [t for t in tables if t in DISTRIBUTED]
    filters = len(TENANT_FILTER.findall(text))
    assert filters >= len(distributed), f"{path.name}: {len(distributed)} tables, {filters} tenant filters"


def test_upserts_conflict_on_keys_with_the_tenant():
    """Citus enforces a unique key only when it includes the distribution column: every ON CONFLICT
    target of the library's SQL names the tenant."""
    targets = [t for p in SQL_FILES for t in re.findall(r"ON CONFLICT\s*\(([^)]*)\)", p.read_text())]
    assert targets and all("tenant" in t for t in targets), targets


def test_no_sql_that_citus_refuses_on_any_node():
    """The rule system is not supported; TABLESAMPLE and grouping sets only on one shard (none used)."""
    texts = [p.read_text() for p in SQL_FILES] + [p.read_text() for p in (ROOT / "migrations").rglob("*.py")]
    for pattern in (
        r"\bCREATE\s+(OR\s+REPLACE\s+)?RULE\b",
        r"\bTABLESAMPLE\b",
        r"\bGROUPING\s+SETS\b",
        r"\bROLLUP\s*\(",
    ):
        assert not any(re.search(pattern, t, re.IGNORECASE) for t in texts), pattern


def test_the_command_prints_the_statements(dsn, capsys):
    assert distribution.main(["distribution", dsn]) == 0
    out = capsys.readouterr().out
    assert "SELECT create_distributed_table('memoria.memories', 'tenant');" in out and "problem" not in out
