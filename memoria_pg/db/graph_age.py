"""The Apache AGE mirror of the entity graph, and what the AGE graph worker calls.

The plain tables (entities, memory_entities, entity_edges) are the source of truth; the graph
`memoria_graph` mirrors them for the graph worker (and for Cypher users with an admin role):

    (:Memory {tenant, memory_id, memory_type})-[:MENTIONS {tenant}]->
        (:Entity {tenant, entity_id, name, norm_name, kind})
    (:Entity)-[:RELATED {tenant, weight}]->(:Entity)     co-occurrence, weight as in entity_edges: one edge
                                                         per pair, from the smaller entity_id (0017)

The library's role memoria_app has no privilege on the graph (its label tables cannot have row-level
security: PostgreSQL would refuse AGE's non-leakproof operators as index conditions). It reaches the
graph only through SECURITY DEFINER functions of migration 0003 (graph_walk bounded since 0007), which
act for the transaction's tenant (`memoria.tenant`, as the row-level-security policies do) and never
take a tenant as an argument:
memoria.graph_sync (the batch sync), memoria.graph_walk (sql/workers/graph_age.sql),
memoria.graph_rebuild and memoria.graph_counts. Their writes are set-based SQL over AGE's label tables,
one statement per label per batch whatever its size, idempotent (a vertex or edge that exists is kept;
RELATED weights are copied from entity_edges, so re-running a batch changes nothing). AGE 1.5.0's
`UNWIND ... MERGE` is unusable for this (empty properties, only the first row SET, duplicates).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence

import psycopg

from ..core import validation
from ..errors import SchemaError
from .database import scalar

LABELS = ("Memory", "Entity", "MENTIONS", "RELATED")
_UPGRADE = (
    "the AGE graph is reached through the functions of migration 0003, which this database "
    "lacks: run `memoria-pg db upgrade`"
)

# The ids of the ingest batch's new memories (sql/ingest/insert_memories.sql set their memory_id; a
# duplicate keeps NULL), read by the caller and handed over as an array: the definer function never
# reads a table of the caller's.
_SYNC = (
    "SELECT memoria.graph_sync(ARRAY(SELECT memory_id FROM stage_memories "
    "WHERE memory_id IS NOT NULL ORDER BY memory_id))"
)


def sync_batch(conn: psycopg.Connection, tenant: str) -> None:
    """Mirror the current ingest batch into the graph (Ingestor.graph_writer).

    Runs inside the batch transaction after sql/ingest/insert_entities.sql, whose memoria.tenant the
    ingest set to `tenant`: memoria.graph_sync mirrors the staged rows that got a memory_id, with their
    mentions and co-occurrence weights from the plain tables. One statement whatever the batch size.
    """
    try:
        conn.execute(_SYNC)
    except psycopg.errors.UndefinedFunction as exc:
        raise SchemaError(_UPGRADE) from exc


def rebuild(conn: psycopg.Connection, tenant: str) -> dict[str, int]:
    """Rebuild `tenant`'s part of the graph from the plain tables; returns the counts per label.

    Runs in one transaction (a savepoint when the caller already has one) with memoria.tenant set to
    `tenant` for its duration. Other tenants' vertices and edges are untouched.
    """
    with _as_tenant(conn, tenant):
        return _counts(conn, "SELECT label, total FROM memoria.graph_rebuild()")


def graph_counts(conn: psycopg.Connection, tenant: str) -> dict[str, int]:
    """Vertices and edges per label for `tenant` (memoria.tenant is set to it for the call)."""
    with _as_tenant(conn, tenant):
        return _counts(conn, "SELECT label, total FROM memoria.graph_counts()")


def _counts(conn: psycopg.Connection, query: str) -> dict[str, int]:
    try:
        rows: dict[str, int] = dict(conn.execute(query).fetchall())
    except psycopg.errors.UndefinedFunction as exc:
        raise SchemaError(_UPGRADE) from exc
    return {label: int(rows.get(label, 0)) for label in LABELS}


@contextlib.contextmanager
def _as_tenant(conn: psycopg.Connection, tenant: str) -> Iterator[None]:
    """A transaction (or savepoint) whose memoria.tenant is `tenant`; the caller's is restored after.
    An empty or non-string tenant is an InputError (the functions would refuse it as "not set")."""
    validation.tenant(tenant)
    with conn.transaction():
        previous = scalar(conn, "SELECT current_setting('memoria.tenant', true)")
        conn.execute("SELECT set_config('memoria.tenant', %s, true)", (tenant,))
        yield
        if previous != tenant:
            conn.execute("SELECT set_config('memoria.tenant', %s, true)", (previous or "",))


def cypher_params(entities: Sequence[str], tenant: str, depth: int) -> str:
    """The agtype parameter map (JSON text) for the graph's Cypher statements.

    Bind it as `%(cypher_params)s::ag_catalog.agtype`, the third argument of cypher(); it is the
    only way values reach Cypher, so names with quotes, $$, braces or backslashes are plain data.
    """
    return json.dumps(
        {"names": sorted(set(entities)), "tenant": tenant, "depth": int(depth)}, ensure_ascii=False, allow_nan=False
    )


# The pure-Cypher form of the graph worker (memoria.graph_walk walks the label tables instead, see
# migration 0003 why), without the worker's bounds (graph_fanout, graph_entity_memories: migration
# 0007): the same rows as the worker whenever no entity has more edges or memories than the bounds.
# Kept as a reference for Cypher users and as the cross-check the tests run.
# Only a role with privileges on the graph can run it, such as the user that ran the migrations:
# memoria_app has none, and as no row-level security guards the label tables, the $tenant parameter
# is its only tenant filter. AGE 1.5.0 takes no parameter in a variable-length bound, so the walk is
# one fixed-length pattern per entity hop (0, 1, 2), switched by $depth: it covers depths 1 to
# MAX_CYPHER_DEPTH. Cypher needs AGE loaded (LOAD 'age', unless the server preloads it) and
# ag_catalog on the search_path. Measured on 10k memories / 71k RELATED edges: ~3-6x the SQL worker
# at depth 1-2, and over 5 s at depth 3 (path enumeration). RELATED patterns are undirected: one edge
# per pair (migration 0017).
MAX_CYPHER_DEPTH = 3
CYPHER_WALK = """
SELECT memory_id::text::bigint AS memory_id, memory_type::text AS memory_type,
       min(hops::text::int) + 1 AS hops, count(DISTINCT entity::text) AS entity_hits
FROM ag_catalog.cypher('memoria_graph', $$
    MATCH (s:Entity)
    WHERE s.tenant = $tenant AND s.norm_name IN $names
    MATCH (m:Memory)-[:MENTIONS]->(s)
    WHERE m.tenant = $tenant
    RETURN m.memory_id, m.memory_type, id(s), 0
    UNION ALL
    MATCH (s:Entity)-[:RELATED]-(e:Entity)
    WHERE $depth > 1 AND s.tenant = $tenant AND s.norm_name IN $names
    MATCH (m:Memory)-[:MENTIONS]->(e)
    WHERE m.tenant = $tenant
    RETURN m.memory_id, m.memory_type, id(e), 1
    UNION ALL
    MATCH (s:Entity)-[:RELATED]-(:Entity)-[:RELATED]-(e:Entity)
    WHERE $depth > 2 AND s.tenant = $tenant AND s.norm_name IN $names
    MATCH (m:Memory)-[:MENTIONS]->(e)
    WHERE m.tenant = $tenant
    RETURN m.memory_id, m.memory_type, id(e), 2
$$, %(cypher_params)s::ag_catalog.agtype) AS (memory_id ag_catalog.agtype, memory_type ag_catalog.agtype,
                                              entity ag_catalog.agtype, hops ag_catalog.agtype)
WHERE %(memory_type)s::text IS NULL OR memory_type::text = %(memory_type)s::text
GROUP BY 1, 2
ORDER BY hops, entity_hits DESC, memory_id DESC
LIMIT %(limit)s
"""
