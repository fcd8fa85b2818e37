"""Reciprocal-rank fusion in pure Python, for the in-process references (reference.py).

The database fuses its workers' results in SQL; this is the exact computation to compare it with.

Why `depth`: with k=60 the RRF curve is flat (rank 1 earns 1/61, rank 100 still 1/160), so a long
tail from a weak source adds many low-precision ids whose small contributions add up and push out
ids that one strong source ranked near the top. Fusing only the head of each list keeps RRF about
agreement among confident results; on LoCoMo, RRF over the top 20 of each source beats the top 100.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def rrf(
    ranked_lists: Mapping[str, Sequence[int]],
    k: int = 60,
    weights: Mapping[str, float] | None = None,
    depth: int | None = None,
) -> list[tuple[int, float]]:
    """(id, score) by descending sum of weight / (k + rank), rank from 1; ties by best rank, then id.

    A source missing from `weights` weighs 1. An id repeated within one list counts at its first rank.
    """
    if k < 0:
        raise ValueError("k must be non-negative")
    if depth is not None and depth <= 0:
        raise ValueError("depth must be positive")
    weights = weights or {}
    if any(w < 0 for w in weights.values()):
        raise ValueError("weights must be non-negative")
    scores: dict[int, float] = {}
    best: dict[int, int] = {}
    for source, ids in ranked_lists.items():
        weight = weights.get(source, 1.0)
        seen: set[int] = set()
        for rank, memory_id in enumerate(ids[:depth] if depth else ids, start=1):
            if memory_id in seen:
                continue
            seen.add(memory_id)
            scores[memory_id] = scores.get(memory_id, 0.0) + weight / (k + rank)
            best[memory_id] = min(best.get(memory_id, rank), rank)
    return sorted(scores.items(), key=lambda item: (-item[1], best[item[0]], item[0]))
