"""RankingPipeline: signals -> weighted sum -> MMR diversity -> finalizer (score floor, top_k).

Default weights (RankingWeights) and why:

    retrieval      1.00  rank-normalized retrieval score: the retrieval order is already good
    agreement      0.15  several independent sources found it
    type_match     0.10  memory type equals the query's hint
    recency        0.05  exponential decay, 30-day half-life
    importance     0.05  the importance stored with the memory
    graph_hit      0.05  reached from a query entity (1/(1+hops))
    attribute_hit  0.05  matched the query's subject/attribute
    phrase_hit     0.05  contains a query phrase
    access         0.02  log-scaled access count

Retrieval dominates: every other signal together adds at most 0.52, so they break ties and nudge
neighbours (the retrieval value drops from 1.0 to 0.91 to 0.83 over the first ranks) but cannot
carry a weak candidate from the tail to the top. `explanation` holds weight * value per signal
and sums to `final_score`.

MMR is off by default (mmr_lambda=1.0): on the dev sets, diversity cost recall (HotpotQA nDCG@10
-0.032) because near-duplicate turns of a conversation are often all evidence. Set mmr_lambda
(e.g. 0.7) when an agent prefers varied memories to complete ones.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..core.types import CandidateRecord, ProcessedQuery
from .mmr import mmr
from .signals import SIGNAL_NAMES, SIGNALS, SignalContext, retrieval_by_rank


@dataclass(frozen=True)
class RankingWeights:
    retrieval: float = 1.0
    agreement: float = 0.15
    type_match: float = 0.1
    recency: float = 0.05
    importance: float = 0.05
    graph_hit: float = 0.05
    attribute_hit: float = 0.05
    phrase_hit: float = 0.05
    access: float = 0.02

    def __post_init__(self) -> None:
        for name, weight in self.as_dict().items():
            if not math.isfinite(weight) or weight < 0:
                raise ValueError(f"weight {name} must be a non-negative number, got {weight}")

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in SIGNAL_NAMES}

    def boosted(self, signals: Iterable[str], factor: float = 2.0) -> RankingWeights:
        """These weights with the named signals (a Route's `signals`) multiplied by factor."""
        signals = set(signals)
        unknown = signals - set(SIGNAL_NAMES)
        if unknown:
            raise ValueError(f"unknown signals {sorted(unknown)}; choose from {list(SIGNAL_NAMES)}")
        return dataclasses.replace(self, **{s: getattr(self, s) * factor for s in signals})


class RankingStage(Protocol):
    """The ranking stage after retrieval: the returned memories, best first, at most top_k.

    The candidates come with their vectors (CandidateRecord.embedding) unless the stage has a
    `reads_embeddings` attribute that is false (reads_embeddings): 200 vectors are most of what the
    final CTE sends."""

    def rank(
        self,
        query: ProcessedQuery,
        candidates: list[CandidateRecord],
        top_k: int,
        submitted_sources: Sequence[str],
        now: dt.datetime | None = None,
        boost: Sequence[str] = (),
    ) -> list[CandidateRecord]: ...


class SignalPlugin(Protocol):
    name: str
    weight: float

    def __call__(self, query: ProcessedQuery, candidate: CandidateRecord) -> float: ...


class RankingPipeline:
    """Scores, diversifies and cuts a candidate set; pure Python, no database."""

    def __init__(
        self,
        weights: RankingWeights = RankingWeights(),
        mmr_lambda: float = 1.0,
        score_floor: float = 0.0,
        signal_plugins: Sequence[SignalPlugin] = (),
        *,
        half_life_days: float = 30.0,
        access_saturation: int = 100,
        rank_constant: float = 10.0,
    ) -> None:
        if not 0.0 <= mmr_lambda <= 1.0:
            raise ValueError("mmr_lambda must be between 0 and 1")
        if half_life_days <= 0 or access_saturation <= 0 or rank_constant <= 0:
            raise ValueError("half_life_days, access_saturation and rank_constant must be positive")
        names = [p.name for p in signal_plugins]
        clash = set(names) & set(SIGNAL_NAMES) | {n for n in names if names.count(n) > 1}
        if clash:
            raise ValueError(f"signal plugin names must be unique and not built-in: {sorted(clash)}")
        self.weights = weights
        self.mmr_lambda = mmr_lambda
        self.score_floor = score_floor
        self.signal_plugins = list(signal_plugins)
        self.half_life_days = half_life_days
        self.access_saturation = access_saturation
        self.rank_constant = rank_constant

    @property
    def reads_embeddings(self) -> bool:
        """Whether ranking reads the candidates' vectors: MMR does (mmr_lambda below 1), and a signal
        plugin may. With neither (the default) the final CTE does not send them."""
        return self.mmr_lambda < 1.0 or bool(self.signal_plugins)

    def score(
        self,
        query: ProcessedQuery,
        candidates: Sequence[CandidateRecord],
        submitted_sources: Sequence[str],
        now: dt.datetime | None = None,
        boost: Sequence[str] = (),
    ) -> None:
        """Set final_score and explanation ({signal: weight * value}) on every candidate; the
        `boost` signals (a Route's signals, e.g. recency for episodic queries) weigh more."""
        ctx = SignalContext(
            query,
            now or dt.datetime.now(dt.UTC),
            frozenset(submitted_sources),
            retrieval_by_rank(candidates, self.rank_constant),
            self.half_life_days,
            self.access_saturation,
        )
        chosen = self.weights.boosted(boost) if boost else self.weights
        weights = {name: w for name, w in chosen.as_dict().items() if w}
        for candidate in candidates:
            explanation = {name: w * SIGNALS[name](candidate, ctx) for name, w in weights.items()}
            for plugin in self.signal_plugins:
                value = float(plugin(query, candidate))
                explanation[plugin.name] = plugin.weight * (min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0)
            candidate.explanation = explanation
            candidate.final_score = sum(explanation.values())

    def rank(
        self,
        query: ProcessedQuery,
        candidates: list[CandidateRecord],
        top_k: int,
        submitted_sources: Sequence[str],
        now: dt.datetime | None = None,
        boost: Sequence[str] = (),
    ) -> list[CandidateRecord]:
        """The best top_k candidates above score_floor, scored and in MMR order."""
        if top_k <= 0:
            raise ValueError("top_k must be positive")
        self.score(query, candidates, submitted_sources, now, boost)
        ordered = sorted(candidates, key=lambda c: c.final_score, reverse=True)
        if self.mmr_lambda < 1.0:
            ordered = mmr(ordered, len(ordered), self.mmr_lambda)
        return finalize(ordered, top_k, self.score_floor)


def finalize(candidates: Sequence[CandidateRecord], top_k: int, score_floor: float = 0.0) -> list[CandidateRecord]:
    """The first top_k candidates whose final_score reaches score_floor, order kept."""
    return [c for c in candidates if c.final_score >= score_floor][:top_k]
