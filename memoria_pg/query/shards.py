"""Shard selection: which partitions of `memories` a query reads, and the per-shard limits."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

import psycopg

from ..core.types import Route, Shard
from ..db import load_sql

ALL = Shard(None)  # the single default shard: the whole table


def select_shards(route: Route, hint: str | None, known_types: Collection[str], *, sharding: bool) -> tuple[Shard, ...]:
    """The route's pool and fallback pools when the query is typed, else the whole table."""
    if not sharding:
        return (ALL,)
    wanted = [route.pool or hint, *route.fallback_pools] if (route.pool or hint) else []
    chosen: list[Shard] = []
    for name in wanted:
        if name in known_types and Shard(name) not in chosen:
            chosen.append(Shard(name))
    return tuple(chosen) or (ALL,)


def tenant_rows(conn: psycopg.Connection) -> dict[str, int]:
    """Memories of the transaction's tenant per memory type (sql/tenant_rows.sql)."""
    return {t: int(n) for t, n in conn.execute(load_sql("tenant_rows")).fetchall()}


def populated(shards: Sequence[Shard], rows: Mapping[str, int]) -> tuple[Shard, ...]:
    """The selected typed shards in which the tenant has memories (`rows`: its memories per type).

    A worker's limit is divided across the shards it reads, so an empty shard would waste its share:
    a query routed to the episodic pool with the general fallback, for a tenant whose memories are
    all general, would otherwise get half the candidates from each worker. When none of the typed
    shards holds any of the tenant's memories the query reads the whole table, rather than nothing
    (the final type filter keeps the hinted type when it can, as it does for any candidate set).
    """
    kept = tuple(s for s in shards if s.memory_type is None or rows.get(s.memory_type, 0) > 0)
    return kept or (ALL,)


def per_shard_limit(limit: int, shards: Sequence[Shard]) -> int:
    """A worker's limit divided across the selected shards (at least 1 each)."""
    return max(1, math.ceil(limit / max(1, len(shards))))
