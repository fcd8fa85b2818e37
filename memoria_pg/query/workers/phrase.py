from __future__ import annotations

from typing import Any

from ...config import Config
from ...core.text import tokenize
from ...core.types import ProcessedQuery, Route, Shard
from .base import FusionWeights, Worker, WorkerContext

# The phrase's second-rarest term filters the anchor's candidates when it has at most this many times
# the candidates per phrase in postings: reading one costs a fraction of the index probe and heap row
# each candidate it rules out would (sql/workers/phrase.sql).
COMPANION_POSTINGS = 10


class PhraseWorker(Worker):
    """Positional full-text match of the query's phrases, over at most Config.phrase_candidates
    memories per phrase (its rarest term's postings in impact order) that also hold its second-rarest
    term where that term is not common."""

    name = "phrase"
    sql_name = "workers/phrase"
    uses_embedding = False
    generic_plans = True
    shard_filtered = True  # its postings' shard filter prunes on the generic plan (shard_sql)
    score_name = "phrase"
    weights = FusionWeights(score=0.0, rrf=0.0)  # auxiliary: adds candidates, feeds the phrase_hit signal

    @classmethod
    def ready(cls, query: ProcessedQuery, route: Route, config: Config) -> bool:
        return config.enable_phrase_index and bool(query.phrases)

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        term_phrase, terms = [], []
        for ordinal, phrase in enumerate(ctx.query.phrases, start=1):
            for term in dict.fromkeys(tokenize(phrase)):
                term_phrase.append(ordinal)
                terms.append(term)
        return {
            "phrases": list(ctx.query.phrases),
            "term_phrase": term_phrase,
            "terms": terms,
            "memory_type": shard.memory_type,
            "limit": ctx.limit,
            "per_phrase": ctx.config.phrase_candidates,
            # a companion term's postings are read whole up to this many (sql/workers/phrase.sql)
            "companion_df": COMPANION_POSTINGS * ctx.config.phrase_candidates,
        }

    def score(self, row: dict[str, Any]) -> float:
        return float(row["matched"]) + float(row["score"])

    def detail(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"phrases": list(row["phrases"]), "matched": int(row["matched"])}
