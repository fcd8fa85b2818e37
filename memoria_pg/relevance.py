"""The relevance pool: pinned and important memories of the query's (non-general) type."""

from __future__ import annotations

from psycopg.rows import dict_row

from .resources import load_sql
from .types import SourceHit


def relevance_pool(system, query, vector, route, top_k: int) -> list[SourceHit]:
    hint = query.memory_type_hint
    if not hint or hint == system.config.default_memory_type:
        return []
    with system.db.transaction(query.tenant) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(load_sql("relevance_pool"), {
            "memory_type": hint, "embedding": vector, "limit": system.config.ranking_candidate_limit,
            "small_pool": top_k * 3}).fetchall()
    return [SourceHit(memory_id=r["memory_id"], source="relevance", rank=i + 1, score=float(r["distance"]),
                      memory_type=r["memory_type"], detail={"pinned": float(r["pinned"])})
            for i, r in enumerate(rows)]
