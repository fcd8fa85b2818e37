import dataclasses
import datetime as dt
import math

import numpy as np
import pytest

from memoria_pg.core.types import CandidateRecord, ProcessedQuery
from memoria_pg.query.candidates import retrieval_order
from memoria_pg.ranking import RankingPipeline, RankingWeights, finalize, mmr

NOW = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
QUERY = ProcessedQuery(text="q", normalized="q", tokens=["q"], tenant="t", memory_type_hint="episodic")


def cand(memory_id, score=0.0, embedding=None, **fields):
    defaults = dict(
        tenant="t",
        memory_type="general",
        content=f"m{memory_id}",
        metadata={},
        importance=0.5,
        created_at=NOW - dt.timedelta(days=10),
        last_accessed_at=None,
        access_count=0,
        sources=["vector"],
    )
    emb = None if embedding is None else np.asarray(embedding, dtype=np.float32)
    return CandidateRecord(memory_id=memory_id, embedding=emb, retrieval_score=score, **{**defaults, **fields})


def ids(cands):
    return [c.memory_id for c in cands]


def test_default_weights_let_retrieval_dominate():
    w = RankingWeights()
    others = sum(v for k, v in w.as_dict().items() if k != "retrieval")
    assert w.retrieval == 1.0 and others < 0.6
    assert w.agreement > w.type_match > w.recency >= w.access


def test_weights_validation_and_boost():
    with pytest.raises(ValueError, match="recency"):
        RankingWeights(recency=-1)
    boosted = RankingWeights().boosted(["recency", "importance"], factor=3)
    assert boosted.recency == pytest.approx(0.15) and boosted.importance == pytest.approx(0.15)
    assert boosted.retrieval == 1.0
    with pytest.raises(ValueError, match="unknown signals"):
        RankingWeights().boosted(["nope"])


def test_explanations_sum_to_final_score():
    cands = [
        cand(1, 0.9, sources=["vector", "bm25"], memory_type="episodic", access_count=3),
        cand(2, 0.5, sources=["graph"], scores={"graph_hops": 1}),
        cand(3, 0.1, sources=["attribute", "phrase"], importance=0.9),
    ]
    ranked = RankingPipeline(mmr_lambda=1.0).rank(QUERY, cands, 3, ["vector", "bm25", "graph"], now=NOW)
    for c in ranked:
        assert math.isclose(sum(c.explanation.values()), c.final_score)
        assert set(c.explanation) >= {"retrieval", "recency", "agreement", "type_match"}
    first = next(c for c in ranked if c.memory_id == 1)
    assert first.explanation["type_match"] == pytest.approx(0.1)
    assert first.explanation["agreement"] == pytest.approx(0.15 * 2 / 3)


def test_retrieval_order_kept_when_other_signals_equal():
    cands = [cand(i, score=1.0 - i / 10) for i in range(6)]
    ranked = RankingPipeline(mmr_lambda=1.0).rank(QUERY, cands[::-1], 6, ["vector"], now=NOW)
    assert ids(ranked) == [0, 1, 2, 3, 4, 5]


def test_signals_break_ties_but_do_not_overturn_strong_lead():
    tied = [cand(1, 0.5), cand(2, 0.5, created_at=NOW), cand(3, 0.5, importance=0.9)]
    assert ids(RankingPipeline(mmr_lambda=1.0).rank(QUERY, tied, 3, ["vector"], now=NOW))[-1] == 1
    # a tail candidate with every bonus still stays behind the retrieval leader
    cands = [cand(i, score=100 - i) for i in range(30)]
    cands[-1] = cand(
        29,
        71,
        memory_type="episodic",
        created_at=NOW,
        importance=1.0,
        access_count=500,
        sources=["vector", "graph", "attribute", "phrase"],
    )
    ranked = RankingPipeline(mmr_lambda=1.0).rank(QUERY, cands, 5, ["vector", "graph", "attribute", "phrase"], now=NOW)
    assert ranked[0].memory_id == 0 and 29 not in ids(ranked)


def test_neighbours_swapped_by_agreement_and_type():
    a = cand(1, 0.9)
    b = cand(2, 0.8, sources=["vector", "bm25", "fusion"], memory_type="episodic")
    ranked = RankingPipeline(mmr_lambda=1.0).rank(QUERY, [a, b], 2, ["vector", "bm25", "fusion"], now=NOW)
    assert ids(ranked) == [2, 1]


def test_top_k_and_score_floor():
    cands = [cand(i, score=10 - i) for i in range(10)]
    assert len(RankingPipeline().rank(QUERY, cands, 3, ["vector"], now=NOW)) == 3
    floored = RankingPipeline(score_floor=0.8, mmr_lambda=1.0).rank(QUERY, cands, 10, ["vector"], now=NOW)
    assert floored and all(c.final_score >= 0.8 for c in floored)
    assert len(floored) < 10
    with pytest.raises(ValueError):
        RankingPipeline().rank(QUERY, cands, 0, ["vector"])


def test_mmr_in_pipeline_demotes_near_duplicate():
    base = np.array([1.0, 0.0, 0.0])
    cands = [cand(1, 0.9, base), cand(2, 0.8, base + [0.0, 0.01, 0.0]), cand(3, 0.7, [0.0, 1.0, 0.0])]
    assert ids(RankingPipeline(mmr_lambda=1.0).rank(QUERY, cands, 3, ["vector"], now=NOW)) == [1, 2, 3]
    assert ids(RankingPipeline(mmr_lambda=0.7).rank(QUERY, cands, 3, ["vector"], now=NOW)) == [1, 3, 2]


class Pinned:
    name = "pinned"
    weight = 0.5

    def __call__(self, query, candidate):
        return 1.0 if candidate.metadata.get("pinned") else 0.0


def test_signal_plugin_contributes_and_is_explained():
    cands = [cand(1, 0.9), cand(2, 0.5, metadata={"pinned": True})]
    ranked = RankingPipeline(mmr_lambda=1.0, signal_plugins=[Pinned()]).rank(QUERY, cands, 2, ["vector"], now=NOW)
    assert ids(ranked) == [2, 1]
    assert ranked[0].explanation["pinned"] == 0.5
    assert math.isclose(sum(ranked[0].explanation.values()), ranked[0].final_score)


def test_signal_plugin_values_clamped_and_names_checked():
    class Wild(Pinned):
        name = "wild"

        def __call__(self, query, candidate):
            return 5.0

    c = RankingPipeline(signal_plugins=[Wild()]).rank(QUERY, [cand(1)], 1, ["vector"], now=NOW)[0]
    assert c.explanation["wild"] == 0.5
    clash = dataclasses.make_dataclass("Clash", [("name", str), ("weight", float)])("recency", 1.0)
    with pytest.raises(ValueError, match="recency"):
        RankingPipeline(signal_plugins=[clash])


def test_mmr_reduces_near_duplicates():
    v = np.array([1.0, 0.0])
    cands = [cand(1, embedding=v), cand(2, embedding=v * 2), cand(3, embedding=[0.0, 1.0])]
    for c, s in zip(cands, (1.0, 0.95, 0.6), strict=True):
        c.final_score = s
    assert ids(mmr(cands, 2, lambda_=1.0)) == [1, 2]
    assert ids(mmr(cands, 2, lambda_=0.5)) == [1, 3]


def test_mmr_without_embeddings_is_relevance_order_and_handles_edges():
    cands = [cand(i) for i in range(4)]
    for c, s in zip(cands, (0.1, 0.9, 0.5, 0.5), strict=True):
        c.final_score = s
    assert ids(mmr(cands, 4, lambda_=0.3)) == [1, 2, 3, 0]
    assert mmr(cands, 0) == [] and mmr([], 3) == []
    assert len(mmr(cands, 10)) == 4
    with pytest.raises(ValueError):
        mmr(cands, 2, lambda_=1.5)


def test_finalize_and_retrieval_order():
    cands = [cand(1, 0.2), cand(2, 0.0, base_score=0.5), cand(4, 0.0, base_score=0.9), cand(3, 0.9)]
    ranked = retrieval_order(cands)
    # fused score first; memories without one (retrieval_score 0) after, by inverse distance
    assert ids(ranked) == [3, 1, 4, 2]
    ranked = ranked[:2]
    assert finalize(ranked, 5, score_floor=0.6) == [ranked[0]]
