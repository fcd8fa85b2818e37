"""Pure fusion of ranked lists and scores from several retrieval sources.

Raw scores from different sources (cosine distance, BM25, trigram distance) and from different
partitions are not comparable, so sources are fused by rank (`rrf`) or after normalization
(`min_max_normalize`, `score_fusion`).

Why `depth` in rrf: with k=60 the RRF curve is flat (rank 1 earns 1/61, rank 100 still 1/160), so a
long tail from a weak source adds many low-precision ids whose small contributions add up and push
out ids that one strong source ranked near the top. Fusing only the head of each list keeps RRF
about agreement among confident results; on LoCoMo, RRF over the top 20 of each source beats the
top 100.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


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


def min_max_normalize(scores: Mapping[K, float], lower_is_better: bool = False) -> dict[K, float]:
    """Scores mapped onto [0, 1], best = 1; all-equal scores all map to 1 (none is worse)."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi == lo:
        return {key: 1.0 for key in scores}
    span = hi - lo
    if lower_is_better:
        return {key: (hi - value) / span for key, value in scores.items()}
    return {key: (value - lo) / span for key, value in scores.items()}


def score_fusion(
    scores: Mapping[str, Mapping[int, float]],
    weights: Mapping[str, float] | None = None,
    lower_is_better: Sequence[str] = (),
) -> list[tuple[int, float]]:
    """(id, score) by descending weighted sum of per-source min-max normalized scores.

    An id a source did not return gets 0 from it. `lower_is_better` names distance-like sources.
    """
    weights = weights or {}
    fused: dict[int, float] = {}
    for source, source_scores in scores.items():
        weight = weights.get(source, 1.0)
        for memory_id, value in min_max_normalize(source_scores, source in lower_is_better).items():
            fused[memory_id] = fused.get(memory_id, 0.0) + weight * value
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))
