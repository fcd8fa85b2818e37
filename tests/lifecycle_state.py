"""What the lifecycle tests compare: every derived table of a database, keyed by what a memory is
(tenant, memory type, dedup key) instead of its id, read as the admin (outside row-level security)."""

from __future__ import annotations

from typing import Any

import psycopg

Key = tuple[str, str, str]


def _rows(conn: psycopg.Connection, query: str) -> list[tuple[Any, ...]]:
    return conn.execute(query).fetchall()


def derived_state(dsn: str, *, graph: bool) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        key = {
            r[0]: (r[1], r[2], r[3])
            for r in _rows(conn, "SELECT id, tenant, memory_type, dedup_key FROM memoria.memories")
        }
        norm = {r[0]: (r[1], r[2]) for r in _rows(conn, "SELECT id, tenant, norm_name FROM memoria.entities")}
        state: dict[str, Any] = {
            "memories": sorted(key.values()),
            "bm25_docs": sorted(_rows(conn, "SELECT tenant, memory_type, n_docs, sum_len FROM memoria.bm25_docs")),
            "bm25_terms": sorted(_rows(conn, "SELECT tenant, memory_type, term, df FROM memoria.bm25_terms")),
            "postings": sorted(
                (key[m], term, tf, doc_len)
                for m, term, tf, doc_len in _rows(conn, "SELECT memory_id, term, tf, doc_len FROM memoria.memory_terms")
            ),
            "entities": sorted(norm.values()),
            "mentions": sorted(
                (key[m], norm[e][1]) for m, e in _rows(conn, "SELECT memory_id, entity_id FROM memoria.memory_entities")
            ),
            # One row per pair, from the smaller entity id (0017): ids differ between databases, so a
            # pair is compared by its names, in name order.
            "edges": sorted(
                (norm[s][0], *sorted((norm[s][1], norm[d][1])), w)
                for s, d, w in _rows(conn, "SELECT src_id, dst_id, weight FROM memoria.entity_edges")
            ),
            "attributes": sorted(
                (key[m], subject, attribute, value, valid_to, key.get(sup) if sup else None)
                for m, subject, attribute, value, valid_to, sup in _rows(
                    conn,
                    "SELECT memory_id, subject, attribute, value, valid_to, superseded_by FROM memoria.memory_attributes",
                )
            ),
            "history_of_missing": _rows(
                conn,
                "SELECT count(*) FROM memoria.memory_history h WHERE h.event = 'updated' AND h.detail ? 'previous' "
                "AND NOT EXISTS (SELECT 1 FROM memoria.memories m WHERE m.id = h.memory_id)",
            )[0][0],
        }
        if graph:
            state["graph"] = graph_state(conn, key, norm)
    return state


def graph_state(conn: psycopg.Connection, key: dict[int, Key], norm: dict[int, tuple[str, str]]) -> dict[str, Any]:
    """The AGE mirror in plain-table terms (read over the label tables, as an admin)."""
    prop = "ag_catalog.agtype_object_field_text"
    memories = {
        r[0]: int(r[1])
        for r in _rows(conn, f"SELECT id::text, {prop}(properties, 'memory_id') FROM memoria_graph.\"Memory\"")
    }
    entities = {
        r[0]: int(r[1])
        for r in _rows(conn, f"SELECT id::text, {prop}(properties, 'entity_id') FROM memoria_graph.\"Entity\"")
    }
    mentions = _rows(conn, 'SELECT start_id::text, end_id::text FROM memoria_graph."MENTIONS"')
    related = _rows(
        conn, f"SELECT start_id::text, end_id::text, {prop}(properties, 'weight') FROM memoria_graph.\"RELATED\""
    )
    return {
        "memories": sorted(key[m] for m in memories.values()),
        "entities": sorted(norm[e] for e in entities.values()),
        "mentions": sorted((key[memories[s]], norm[entities[e]][1]) for s, e in mentions),
        "related": sorted((*sorted((norm[entities[s]][1], norm[entities[d]][1])), int(w)) for s, d, w in related),
    }
