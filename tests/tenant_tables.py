"""The tenant tables, as the catalog has them: every table of schema memoria with a tenant column (a
partitioned table once, not its partitions), so that a table a later migration adds is checked
without a list to keep up to date (the same rule `erase_tenant` follows)."""

from __future__ import annotations

import psycopg

# Tables every checked database has: what the catalog query must at least find.
CORE_TENANT_TABLES = frozenset(
    {
        "memories",
        "memory_terms",
        "bm25_terms",
        "bm25_docs",
        "entities",
        "memory_entities",
        "entity_edges",
        "memory_attributes",
        "query_traces",
        "query_trace_candidates",
        "memory_access",
        "memory_history",
    }
)


def tenant_tables(conn: psycopg.Connection) -> list[str]:
    """The names of schema memoria's tables with a tenant column, sorted (partitions left out)."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped "
        "WHERE c.relnamespace = 'memoria'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
        "ORDER BY c.relname"
    ).fetchall()
    names = [r[0] for r in rows]
    missing = CORE_TENANT_TABLES - set(names)
    assert not missing, f"the catalog query missed tenant tables: {sorted(missing)}"
    return names
