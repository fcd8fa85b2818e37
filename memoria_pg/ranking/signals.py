"""Ranking signals: each maps a candidate (in its query context) to a value in [0, 1]."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..core.types import CandidateRecord, ProcessedQuery


@dataclass(frozen=True)
class SignalContext:
    """What signals may read besides the candidate; built once per query by the pipeline."""

    query: ProcessedQuery
    now: dt.datetime
    submitted_sources: frozenset[str]
    retrieval: Mapping[int, float]  # memory_id -> rank-normalized retrieval score
    half_life_days: float = 30.0
    access_saturation: int = 100


Signal = Callable[[CandidateRecord, SignalContext], float]


def retrieval_by_rank(candidates: Sequence[CandidateRecord], rank_constant: float = 10.0) -> dict[int, float]:
    """c / (c + rank) over candidates ordered by (retrieval_score, base_score); equal scores share a rank.

    Rank, not raw score, because scores from different sources and partitions are not on one
    scale. The curve is steep at the head and flat in the tail, independent of the set size: a
    small nudge from other signals can swap neighbours near the top but cannot lift the 30th
    candidate to the first place.
    """
    ordered = sorted(candidates, key=_retrieval_key, reverse=True)
    values: dict[int, float] = {}
    rank, previous = 0, None
    for position, candidate in enumerate(ordered):
        key = _retrieval_key(candidate)
        if key != previous:
            rank, previous = position, key
        values[candidate.memory_id] = rank_constant / (rank_constant + rank)
    return values


def _retrieval_key(candidate: CandidateRecord) -> tuple[float, float]:
    return candidate.retrieval_score, candidate.base_score


def retrieval(candidate: CandidateRecord, ctx: SignalContext) -> float:
    return ctx.retrieval.get(candidate.memory_id, 0.0)


def recency(candidate: CandidateRecord, ctx: SignalContext) -> float:
    """Exponential decay on age since created_at: 1 now, 0.5 after one half-life."""
    created = candidate.created_at
    now = ctx.now
    if (created.tzinfo is None) != (now.tzinfo is None):  # naive timestamps are taken as UTC
        created, now = _utc(created), _utc(now)
    age_days = (now - created).total_seconds() / 86400.0
    return 1.0 if age_days <= 0 else 0.5 ** (age_days / ctx.half_life_days)


def _utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


def importance(candidate: CandidateRecord, ctx: SignalContext) -> float:
    return _clamp(candidate.importance)


def access(candidate: CandidateRecord, ctx: SignalContext) -> float:
    """log(1 + access_count), saturating at access_saturation accesses."""
    return _clamp(math.log1p(max(candidate.access_count, 0)) / math.log1p(ctx.access_saturation))


def agreement(candidate: CandidateRecord, ctx: SignalContext) -> float:
    """Share of the submitted sources that found the candidate."""
    if not ctx.submitted_sources:
        return 0.0
    return len(set(candidate.sources) & ctx.submitted_sources) / len(ctx.submitted_sources)


def graph_hit(candidate: CandidateRecord, ctx: SignalContext) -> float:
    """1 for a memory mentioning a query entity, 1/(1+hops) for one reached over hops edges."""
    hops = candidate.scores.get("graph_hops")
    if hops is not None:
        return 1.0 / (1.0 + max(hops, 0.0))
    return 1.0 if "graph" in candidate.sources else 0.0


def attribute_hit(candidate: CandidateRecord, ctx: SignalContext) -> float:
    """1 - attribute distance (trigram distance in [0, 1]) when the attribute worker found it."""
    if "attribute" not in candidate.sources or candidate.scores.get("attribute_current") == 0.0:
        return 0.0  # not found, or its fact was superseded at the query time
    return _clamp(1.0 - candidate.scores.get("attribute_distance", 0.0))


def phrase_hit(candidate: CandidateRecord, ctx: SignalContext) -> float:
    return 1.0 if "phrase" in candidate.sources else 0.0


def type_match(candidate: CandidateRecord, ctx: SignalContext) -> float:
    hint = ctx.query.memory_type_hint
    return 1.0 if hint is not None and candidate.memory_type == hint else 0.0


def _clamp(value: float) -> float:
    return 0.0 if not math.isfinite(value) else min(max(value, 0.0), 1.0)


SIGNALS: dict[str, Signal] = {
    "retrieval": retrieval,
    "agreement": agreement,
    "type_match": type_match,
    "recency": recency,
    "importance": importance,
    "graph_hit": graph_hit,
    "attribute_hit": attribute_hit,
    "phrase_hit": phrase_hit,
    "access": access,
}
SIGNAL_NAMES = tuple(SIGNALS)
