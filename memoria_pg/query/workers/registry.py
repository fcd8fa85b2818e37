"""The registry of retrieval sources: the one place that lists them. Everything that needs to know
the sources (routing's preconditions, the final CTE's weights, score directions and names, the
accepted worker names) reads it from here, from what each source declares about itself."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...config import FUSION_METHODS, Config
from ...core.types import ProcessedQuery, Route
from ...errors import ConfigError
from .attribute import AttributeWorker
from .base import FusionWeights, Source, Worker
from .bm25 import BM25Worker
from .fusion import FusionWorker
from .graph import GraphWorker
from .phrase import PhraseWorker
from .temporal import TemporalWorker
from .vector import VectorWorker


class RelevanceSource(Source):
    """The relevance pool (query/relevance.py): pinned and important memories of the hinted type,
    found before the workers run; `score` is their cosine distance."""

    name = "relevance"
    score_name = "relevance"
    lower_is_better = True
    weights = FusionWeights(score=0.15, rrf=0.3)


@dataclass(frozen=True)
class ConfidenceShift:
    """Score fusion's per-query weights (sql/final_candidates.sql, issue #14): when the best hit of
    `to` (a distance source: the vector worker) is closer than `near`, `slope * (near - distance)`
    of `from_`'s weight (at most all of it) moves to `to`'s. `slope` 0 keeps the declared weights.

    `near` 0.25 and `slope` 6.0 were chosen by leave-one-set-out over the five dev sets (LoCoMo,
    SciFact, HotpotQA, LongMemEval, MS MARCO) with benchmarks/fusion_lab.py, on the Snowball-stemmed
    BM25 of migration 0021 (0.3 and 2.0 before it); README, "Fusion"."""

    to: str = "vector"
    from_: str = "bm25"
    near: float = 0.25
    slope: float = 6.0

    def params(self) -> dict[str, Any]:
        return {"shift_to": self.to, "shift_from": self.from_, "shift_near": self.near, "shift_slope": self.slope}


DEFAULT_SHIFT = ConfidenceShift()
NO_SHIFT = ConfidenceShift(slope=0.0)


@dataclass(frozen=True)
class LexicalFeedback:
    """Pseudo-relevance feedback in the final CTE (sql/final_candidates.sql, issue #14): of the terms
    of the first `seeds` candidates of the fused order that another of the first `depth` holds too
    (the query's own left out), the `expansion` that weigh most (their share of each seed's text
    times their IDF) join the query's terms (counted `repeat` times); the first `depth` candidates
    with a fused score get the BM25 of those terms, normalized like a source's list and added with
    `weight`. It reads the terms of `depth` memories, whatever the tenant's size. A memory longer than
    `max_length` indexed tokens (its BM25 length) takes no part (it lends no term and gets no score;
    a seed's place stays empty), and no more of its postings than that are read, so that a head of
    long documents costs what a head of `max_length`-token memories does (a 5,000-word memory has
    about 2,300 postings: a head of them took the final CTE from 3 to 47 ms). Only for score fusion,
    and only where the BM25 and vector workers completed (pipeline.feedback_terms); `weight` 0 turns
    it off.

    The five numbers were chosen by leave-one-set-out over the five dev sets with
    benchmarks/feedback_lab.py (README, "Fusion"). `max_length` is a cost guard: at 1,024 no dev set
    changes (at 512 LongMemEval, whose sessions run to 4,120 tokens, loses 0.027)."""

    weight: float = 0.3
    seeds: int = 3
    expansion: int = 10
    depth: int = 20
    repeat: int = 2
    max_length: int = 1024

    def params(self, method: str, terms: Sequence[str]) -> dict[str, Any]:
        on = method == "score" and self.weight > 0 and bool(terms)
        return {
            "feedback_weight": self.weight if on else 0.0,
            "feedback_query": list(terms) if on else [],
            "feedback_seeds": self.seeds,
            "feedback_expansion": self.expansion,
            "feedback_depth": self.depth,
            "feedback_repeat": self.repeat,
            "feedback_max_length": self.max_length,
        }


DEFAULT_FEEDBACK = LexicalFeedback()
NO_FEEDBACK = LexicalFeedback(weight=0.0)


class WorkerRegistry(Mapping[str, type[Worker]]):
    """Worker classes by name (in declaration order), plus the sources that are not workers."""

    def __init__(
        self,
        workers: Iterable[type[Worker]],
        sources: Iterable[type[Source]] = (RelevanceSource,),
        shift: ConfidenceShift = DEFAULT_SHIFT,
        feedback: LexicalFeedback = DEFAULT_FEEDBACK,
    ) -> None:
        self.shift = shift
        self.feedback = feedback
        self._workers = {w.name: w for w in workers}
        self._sources: dict[str, type[Source]] = {**self._workers, **{s.name: s for s in sources}}
        for source in self._sources.values():
            _check_declared(source)

    def __getitem__(self, name: str) -> type[Worker]:
        return self._workers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._workers)

    def __len__(self) -> int:
        return len(self._workers)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._workers)

    def replace(self, *workers: type[Worker]) -> WorkerRegistry:
        """A registry with these workers added, or in place of the workers of the same names."""
        merged = dict(self._workers)
        merged.update({w.name: w for w in workers})
        others = [s for name, s in self._sources.items() if name not in self._workers]
        return WorkerRegistry(merged.values(), others, self.shift, self.feedback)

    def with_shift(self, shift: ConfidenceShift) -> WorkerRegistry:
        """The same sources with other per-query weight adaptation (NO_SHIFT: the declared weights)."""
        return WorkerRegistry(self._workers.values(), self._others(), shift, self.feedback)

    def with_feedback(self, feedback: LexicalFeedback) -> WorkerRegistry:
        """The same sources with other lexical feedback (NO_FEEDBACK: none)."""
        return WorkerRegistry(self._workers.values(), self._others(), self.shift, feedback)

    def _others(self) -> list[type[Source]]:
        return [s for n, s in self._sources.items() if n not in self._workers]

    def source(self, name: str) -> type[Source]:
        try:
            return self._sources[name]
        except KeyError:
            raise ConfigError(f"unknown retrieval source {name!r}; registered: {list(self._sources)}") from None

    def ready(self, name: str, query: ProcessedQuery, route: Route, config: Config) -> bool:
        return self[name].ready(query, route, config)

    def weights(self, method: str) -> dict[str, float]:
        if method not in FUSION_METHODS:
            raise ValueError(f"fusion method must be one of {list(FUSION_METHODS)}, got {method!r}")
        return {name: float(getattr(s.weights, method)) for name, s in self._sources.items()}

    def lower_is_better(self) -> list[str]:
        return [name for name, s in self._sources.items() if s.lower_is_better]

    def score_names(self) -> dict[str, str]:
        return {name: s.score_name for name, s in self._sources.items()}


def _check_declared(source: type[Any]) -> None:
    # A source missing a declaration would fail far from its cause (a KeyError in the final CTE).
    for attr in ("name", "score_name", "weights"):
        if not hasattr(source, attr):
            raise ConfigError(f"retrieval source {source.__name__} does not declare {attr!r}")
    if not isinstance(source.weights, FusionWeights):
        raise ConfigError(
            f"retrieval source {source.name!r}: weights must be a FusionWeights (one weight per "
            f"fusion method: {list(FUSION_METHODS)}), got {source.weights!r}"
        )
    if issubclass(source, Worker) and not hasattr(source, "sql_name"):
        raise ConfigError(f"worker {source.name!r} does not declare its sql_name")


DEFAULT_WORKERS = WorkerRegistry(
    (VectorWorker, BM25Worker, GraphWorker, PhraseWorker, AttributeWorker, FusionWorker, TemporalWorker)
)
