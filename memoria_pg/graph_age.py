"""The Apache AGE mirror of the entity graph, and what the AGE graph worker binds.

The plain tables (entities, memory_entities, entity_edges) are the source of truth; the graph
`memoria_graph` mirrors them for Cypher users and for the graph worker:

    (:Memory {tenant, memory_id, memory_type})-[:MENTIONS {tenant}]->(:Entity {tenant, entity_id, name, norm_name, kind})
    (:Entity)-[:RELATED {tenant, weight}]->(:Entity)     co-occurrence, both directions, weight as in entity_edges

Writes are set-based SQL over AGE's label tables (INSERT ... SELECT ... ON CONFLICT against the
unique indexes the migration adds), not Cypher: one statement per label per batch whatever its
size, values only as bound parameters, and idempotent (a vertex or edge that exists is kept; RELATED
weights are copied from entity_edges, so re-running a batch changes nothing). AGE 1.5.0's
`UNWIND ... MERGE` is unusable for this (empty properties, only the first row SET, duplicates).

Every vertex and edge carries `tenant`, and every statement here filters on it explicitly: the
label tables have no row-level security (see the migration: under RLS PostgreSQL would not use
AGE's non-leakproof graphid and agtype operators as index conditions). The plain tables do, so the
caller's connection must have memoria.tenant set to `tenant`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import psycopg

_EID = "(ag_catalog.agtype_object_field_text({v}.properties, 'entity_id')::bigint)"
_MID = "(ag_catalog.agtype_object_field_text({v}.properties, 'memory_id')::bigint)"

# The sync works from temp tables: graph_batch (memory_id, memory_type) = the memories to mirror,
# graph_mentions (memory_id, entity_id) = their rows of memory_entities, graph_links = the same
# with the graph ids of both ends. Probes into the
# large tables (memory_entities, entities, entity_edges, the label tables) are LATERAL subqueries
# behind OFFSET 0: a parameterized index lookup per batch row, so a batch costs O(batch) whatever
# the graph's size and whether or not the label tables have statistics yet.
_TEMP_TABLES = """
CREATE TEMP TABLE IF NOT EXISTS graph_batch (memory_id bigint PRIMARY KEY, memory_type text NOT NULL) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS graph_mentions (memory_id bigint NOT NULL, entity_id bigint NOT NULL) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS graph_links (
    memory_id bigint NOT NULL, entity_id bigint NOT NULL,
    memory_gid ag_catalog.graphid NOT NULL, entity_gid ag_catalog.graphid NOT NULL
) ON COMMIT DROP;
TRUNCATE graph_batch, graph_mentions, graph_links
"""

# The new memories of the ingest batch (sql/ingest/insert_memories.sql set their memory_id).
_BATCH_FROM_STAGE = """
INSERT INTO graph_batch (memory_id, memory_type)
SELECT memory_id, memory_type FROM stage_memories WHERE memory_id IS NOT NULL
"""

# Every memory of the tenant (rebuild).
_BATCH_FROM_TENANT = """
INSERT INTO graph_batch (memory_id, memory_type)
SELECT id, memory_type FROM memoria.memories WHERE tenant = %(tenant)s
"""

_MENTIONS_OF_BATCH = """
INSERT INTO graph_mentions (memory_id, entity_id)
SELECT b.memory_id, me.entity_id
FROM graph_batch b
CROSS JOIN LATERAL (
    SELECT me.entity_id FROM memoria.memory_entities me
    WHERE me.memory_id = b.memory_id AND me.tenant = %(tenant)s OFFSET 0
) me;
ANALYZE graph_batch;
ANALYZE graph_mentions
"""

_INSERT_MEMORIES = """
INSERT INTO memoria_graph."Memory" (properties)
SELECT ag_catalog.agtype_build_map('tenant', %(tenant)s::text, 'memory_id', b.memory_id,
                                   'memory_type', b.memory_type)
FROM graph_batch b
ORDER BY b.memory_id
ON CONFLICT ((ag_catalog.agtype_object_field_text(properties, 'memory_id')::bigint)) DO NOTHING
"""

_INSERT_ENTITIES = """
INSERT INTO memoria_graph."Entity" (properties)
SELECT ag_catalog.agtype_build_map('tenant', %(tenant)s::text, 'entity_id', e.id, 'name', e.name,
                                   'norm_name', e.norm_name, 'kind', e.kind)
FROM (SELECT DISTINCT entity_id FROM graph_mentions) m
CROSS JOIN LATERAL (
    SELECT e.id, e.name, e.norm_name, e.kind FROM memoria.entities e
    WHERE e.id = m.entity_id AND e.tenant = %(tenant)s OFFSET 0
) e
ORDER BY e.id
ON CONFLICT ((ag_catalog.agtype_object_field_text(properties, 'entity_id')::bigint)) DO NOTHING
"""

# The mentions with the graph ids of both ends (both vertices exist by now).
_LINKS = f"""
INSERT INTO graph_links (memory_id, entity_id, memory_gid, entity_gid)
SELECT m.memory_id, m.entity_id, mv.id, ev.id
FROM graph_mentions m
CROSS JOIN LATERAL (
    SELECT v.id FROM memoria_graph."Memory" v
    WHERE {_MID.format(v="v")} = m.memory_id
      AND ag_catalog.agtype_object_field_text(v.properties, 'tenant') = %(tenant)s OFFSET 0
) mv
CROSS JOIN LATERAL (
    SELECT v.id FROM memoria_graph."Entity" v
    WHERE {_EID.format(v="v")} = m.entity_id
      AND ag_catalog.agtype_object_field_text(v.properties, 'tenant') = %(tenant)s OFFSET 0
) ev;
ANALYZE graph_links
"""

_INSERT_MENTIONS = """
INSERT INTO memoria_graph."MENTIONS" (start_id, end_id, properties)
SELECT l.memory_gid, l.entity_gid, ag_catalog.agtype_build_map('tenant', %(tenant)s::text)
FROM graph_links l
ORDER BY l.entity_gid, l.memory_gid
ON CONFLICT (end_id, start_id) DO NOTHING
"""

# Entity pairs co-mentioned by the batch's memories get a RELATED edge whose weight is the current
# entity_edges weight (absolute, so re-running is a no-op; an unchanged edge is not rewritten).
_UPSERT_RELATED = """
INSERT INTO memoria_graph."RELATED" AS r (start_id, end_id, properties)
SELECT p.src_gid, p.dst_gid, ag_catalog.agtype_build_map('tenant', %(tenant)s::text, 'weight', ed.weight)
FROM (
    SELECT DISTINCT a.entity_id AS src_id, b.entity_id AS dst_id, a.entity_gid AS src_gid, b.entity_gid AS dst_gid
    FROM graph_links a
    JOIN graph_links b ON b.memory_id = a.memory_id AND b.entity_id <> a.entity_id
) p
CROSS JOIN LATERAL (
    SELECT ed.weight FROM memoria.entity_edges ed
    WHERE ed.src_id = p.src_id AND ed.dst_id = p.dst_id AND ed.tenant = %(tenant)s OFFSET 0
) ed
ORDER BY p.src_gid, p.dst_gid
ON CONFLICT (start_id, end_id) DO UPDATE SET properties = excluded.properties
WHERE ag_catalog.agtype_object_field_text(r.properties, 'weight')
      IS DISTINCT FROM ag_catalog.agtype_object_field_text(excluded.properties, 'weight')
"""

# -- rebuild of a whole tenant from the plain tables -------------------------------------------------
_DELETE_TENANT = [
    f'DELETE FROM memoria_graph."{label}" '
    "WHERE ag_catalog.agtype_object_field_text(properties, 'tenant') = %(tenant)s"
    for label in ("RELATED", "MENTIONS", "Memory", "Entity")
]

# Every entity of the tenant gets a vertex (also those no memory mentions any more), and RELATED
# mirrors entity_edges as a whole: hash joins over the tenant's tables, this is a bulk load.
_REBUILD_ENTITIES = """
INSERT INTO memoria_graph."Entity" (properties)
SELECT ag_catalog.agtype_build_map('tenant', %(tenant)s::text, 'entity_id', e.id, 'name', e.name,
                                   'norm_name', e.norm_name, 'kind', e.kind)
FROM memoria.entities e
WHERE e.tenant = %(tenant)s
ORDER BY e.id
"""

_REBUILD_RELATED = """
CREATE TEMP TABLE IF NOT EXISTS graph_entity_ids (entity_id bigint PRIMARY KEY, gid ag_catalog.graphid NOT NULL) ON COMMIT DROP;
TRUNCATE graph_entity_ids;
INSERT INTO graph_entity_ids (entity_id, gid)
SELECT (ag_catalog.agtype_object_field_text(v.properties, 'entity_id'))::bigint, v.id
FROM memoria_graph."Entity" v
WHERE ag_catalog.agtype_object_field_text(v.properties, 'tenant') = %(tenant)s;
ANALYZE graph_entity_ids;
INSERT INTO memoria_graph."RELATED" (start_id, end_id, properties)
SELECT s.gid, d.gid, ag_catalog.agtype_build_map('tenant', %(tenant)s::text, 'weight', ed.weight)
FROM memoria.entity_edges ed
JOIN graph_entity_ids s ON s.entity_id = ed.src_id
JOIN graph_entity_ids d ON d.entity_id = ed.dst_id
WHERE ed.tenant = %(tenant)s
ORDER BY s.gid, d.gid
"""


def _run(conn: psycopg.Connection, script: str, params: dict | None = None) -> None:
    # One statement per execute: psycopg binds server-side, which allows a single statement only.
    for statement in script.split(";\n"):
        if statement.strip():
            conn.execute(statement, params)


def sync_batch(conn: psycopg.Connection, tenant: str) -> None:
    """Mirror the current ingest batch into the graph (Ingestor.graph_writer).

    Runs inside the batch transaction after sql/ingest/insert_entities.sql, with memoria.tenant set
    to `tenant`: the new memories are the staged rows with a memory_id; their mentions and
    co-occurrence weights come from the plain tables. About a dozen statements whatever the size.
    """
    params = {"tenant": tenant}
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM stage_memories WHERE memory_id IS NOT NULL)").fetchone()[0]:
        return  # every record was a duplicate: nothing new
    _run(conn, _TEMP_TABLES)
    conn.execute(_BATCH_FROM_STAGE)
    _run(conn, _MENTIONS_OF_BATCH, params)
    conn.execute(_INSERT_MEMORIES, params)
    conn.execute(_INSERT_ENTITIES, params)
    _run(conn, _LINKS, params)
    conn.execute(_INSERT_MENTIONS, params)
    conn.execute(_UPSERT_RELATED, params)


def rebuild(conn: psycopg.Connection, tenant: str) -> dict[str, int]:
    """Rebuild `tenant`'s part of the graph from the plain tables; returns the counts per label.

    Runs in one transaction (a savepoint when the caller already has one) with memoria.tenant set
    to `tenant` for its duration. Other tenants' vertices and edges are untouched.
    """
    params = {"tenant": tenant}
    with conn.transaction():
        conn.execute("SELECT set_config('memoria.tenant', %s, true)", (tenant,))
        for statement in _DELETE_TENANT:
            conn.execute(statement, params)
        _run(conn, _TEMP_TABLES)
        conn.execute(_BATCH_FROM_TENANT, params)
        _run(conn, _MENTIONS_OF_BATCH, params)
        conn.execute(_INSERT_MEMORIES, params)
        conn.execute(_REBUILD_ENTITIES, params)
        _run(conn, _LINKS, params)
        conn.execute(_INSERT_MENTIONS, params)
        _run(conn, _REBUILD_RELATED, params)
        return graph_counts(conn, tenant)


def graph_counts(conn: psycopg.Connection, tenant: str) -> dict[str, int]:
    """Vertices and edges per label for `tenant`."""
    counts = {}
    for label in ("Memory", "Entity", "MENTIONS", "RELATED"):
        counts[label] = conn.execute(
            f'SELECT count(*) FROM memoria_graph."{label}" '
            "WHERE ag_catalog.agtype_object_field_text(properties, 'tenant') = %s", (tenant,)
        ).fetchone()[0]
    return counts


def cypher_params(entities: Sequence[str], tenant: str, depth: int) -> str:
    """The agtype parameter map (JSON text) for the graph's Cypher statements.

    Bind it as `%(cypher_params)s::ag_catalog.agtype`, the third argument of cypher(); it is the
    only way values reach Cypher, so names with quotes, $$, braces or backslashes are plain data.
    """
    return json.dumps({"names": sorted(set(entities)), "tenant": tenant, "depth": int(depth)},
                      ensure_ascii=False, allow_nan=False)


# The pure-Cypher form of the graph worker (sql/workers/graph_age.sql walks the label tables
# instead, see there why). Kept as a reference for Cypher users and as the cross-check the tests
# run. AGE 1.5.0 takes no parameter in a variable-length bound, so the walk is one fixed-length
# pattern per entity hop (0, 1, 2), switched by $depth: it covers depths 1 to MAX_CYPHER_DEPTH.
# Cypher needs ag_catalog on the search_path (the pool sets it). Measured on 10k memories / 71k
# RELATED edges: ~3-6x the SQL worker at depth 1-2, and over 5 s at depth 3 (path enumeration).
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
    MATCH (s:Entity)-[:RELATED]->(e:Entity)
    WHERE $depth > 1 AND s.tenant = $tenant AND s.norm_name IN $names
    MATCH (m:Memory)-[:MENTIONS]->(e)
    WHERE m.tenant = $tenant
    RETURN m.memory_id, m.memory_type, id(e), 1
    UNION ALL
    MATCH (s:Entity)-[:RELATED]->(:Entity)-[:RELATED]->(e:Entity)
    WHERE $depth > 2 AND s.tenant = $tenant AND s.norm_name IN $names
    MATCH (m:Memory)-[:MENTIONS]->(e)
    WHERE m.tenant = $tenant
    RETURN m.memory_id, m.memory_type, id(e), 2
$$, %(cypher_params)s::ag_catalog.agtype) AS (memory_id ag_catalog.agtype, memory_type ag_catalog.agtype,
                                              entity ag_catalog.agtype, hops ag_catalog.agtype)
WHERE %(memory_type)s::text IS NULL OR memory_type::text = %(memory_type)s::text
GROUP BY 1, 2
ORDER BY hops, entity_hits DESC, memory_id
LIMIT %(limit)s
"""
