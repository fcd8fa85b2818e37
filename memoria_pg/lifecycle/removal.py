"""Removing memories: delete, forget by filter, erase a tenant."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ..core import validation
from ..db import load_sql, pipelined, scalar
from ..errors import NotFound

# Children before parents (foreign keys); every other table of schema memoria with a tenant column is
# erased after these (tenant_tables), so a table added later is never left behind.
ERASE_ORDER = (
    "query_trace_candidates", "query_traces", "memory_access", "memory_history", "memory_attributes",
    "memory_entities", "entity_edges", "entities", "memory_terms", "bm25_terms", "bm25_docs", "memories",
)  # fmt: skip


SHOWN_MISSING = 20  # the missing ids a NotFound names: a caller may send thousands


def delete(
    conn: psycopg.Connection, ids: list[int], *, graph: bool, single_valued: Mapping[str, list[str]],
    missing_ok: bool = False,
) -> int:  # fmt: skip
    """Delete the memories (of the transaction's tenant) and everything derived from them; NotFound,
    and nothing deleted, when one of them does not exist (unless `missing_ok`). `single_valued`: the
    attribute patterns whose facts are re-superseded (Ingestor.single_valued)."""
    if not ids:
        return 0
    with pipelined(conn):  # one round trip; a missing memory raises below, and the caller rolls back
        locked = conn.execute(
            "SELECT id FROM memoria.memories WHERE tenant = current_setting('memoria.tenant') AND id = ANY(%s) "
            "ORDER BY id FOR UPDATE", (ids,))  # fmt: skip
        removed = remove_derived_cursor(conn, ids, single_valued, forget_usage=True)
        gone = conn.execute(load_sql("lifecycle/delete"), {"ids": ids})
    found = [r[0] for r in locked.fetchall()]
    missing = sorted(set(ids) - set(found))
    if missing and not missing_ok:
        shown = ", ".join(map(str, missing[:SHOWN_MISSING])) + (
            f" and {len(missing) - SHOWN_MISSING} more" if len(missing) > SHOWN_MISSING else ""
        )
        raise NotFound(
            f"{len(missing)} of the {len(ids)} memories not found (for this tenant): {shown}; nothing was deleted"
        )
    if graph:
        conn.execute("SELECT memoria.graph_forget(%s, %s)", (found, entity_ids(removed)))
    return len(gone.fetchall())


def remove_derived_cursor(
    conn: psycopg.Connection, ids: list[int], single_valued: Mapping[str, list[str]], *, forget_usage: bool
) -> psycopg.Cursor[Any]:
    """Take the memories' contribution out of every derived table (migration 0012's function); its result,
    unread (in a pipeline: read once the pipeline is synced), is the ids of the entities they mentioned
    (for the graph mirror: entity_ids)."""
    params = (ids, forget_usage, single_valued["exact"], single_valued["prefixes"])
    return conn.execute("SELECT memoria.remove_derived(%s, %s, %s::text[], %s::text[])", params)


def entity_ids(cursor: psycopg.Cursor[Any]) -> list[int]:
    row = cursor.fetchone()
    return list(row[0]) if row is not None and row[0] is not None else []


def matching(
    conn: psycopg.Connection, *, memory_type: str | None, before: Any, where: dict[str, Any] | None
) -> list[int]:
    """The ids a `forget` filter selects, locked."""
    params = {
        "memory_type": memory_type,
        "before": None if before is None else validation.moment(before, "before"),
        "where": None if where is None else Jsonb(validation.metadata_filter(where)),
    }
    return [r[0] for r in conn.execute(load_sql("lifecycle/match"), params).fetchall()]


def erase(conn: psycopg.Connection, *, graph: bool) -> dict[str, int]:
    """Every row of the transaction's tenant, in every table of schema memoria, and its graph."""
    counts: dict[str, int] = {}
    if graph:
        counts["graph vertices (Memory)"] = int(scalar(conn, "SELECT memoria.graph_erase()"))
    tables = [*ERASE_ORDER, *sorted(set(tenant_tables(conn)) - set(ERASE_ORDER))]
    for table in tables:
        statement = sql.SQL("DELETE FROM memoria.{} WHERE tenant = current_setting('memoria.tenant')")
        counts[table] = conn.execute(statement.format(sql.Identifier(table))).rowcount
    return counts


def tenant_tables(conn: psycopg.Connection) -> list[str]:
    """The tables of schema memoria with a tenant column (partitions excluded) that the library's role
    may delete from: the memories and everything derived from them. Tables it may not touch (the API
    keys of the service: credentials, revoked with `memoria-pg keys revoke`) are not memory data."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped "
        "WHERE n.nspname = 'memoria' AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
        "AND pg_catalog.has_table_privilege(c.oid, 'DELETE') ORDER BY c.relname"
    ).fetchall()
    return [r[0] for r in rows]
