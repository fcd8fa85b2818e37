"""Shard selection: which partitions of `memories` a query reads, and the per-shard limits."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .types import Route, Shard

ALL = Shard(None)  # the single default shard: the whole table


def select_shards(route: Route, hint: str | None, known_types: Sequence[str], *, sharding: bool) -> tuple[Shard, ...]:
    """The route's pool and fallback pools when the query is typed, else the whole table."""
    if not sharding:
        return (ALL,)
    wanted = [route.pool or hint, *route.fallback_pools] if (route.pool or hint) else []
    chosen: list[Shard] = []
    for name in wanted:
        if name in known_types and Shard(name) not in chosen:
            chosen.append(Shard(name))
    return tuple(chosen) or (ALL,)


def per_shard_limit(limit: int, shards: Sequence[Shard]) -> int:
    """A worker's limit divided across the selected shards (at least 1 each)."""
    return max(1, math.ceil(limit / max(1, len(shards))))
