import datetime as dt

import pytest

from memoria_pg.core.types import CandidateRecord, ProcessedQuery
from memoria_pg.ranking.signals import (
    SIGNALS,
    SignalContext,
    access,
    agreement,
    attribute_hit,
    graph_hit,
    importance,
    phrase_hit,
    recency,
    retrieval,
    retrieval_by_rank,
    type_match,
)

NOW = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)


def cand(memory_id=1, **fields):
    defaults = dict(
        tenant="t",
        memory_type="general",
        content="c",
        metadata={},
        importance=0.5,
        created_at=NOW,
        last_accessed_at=None,
        access_count=0,
        embedding=None,
    )
    return CandidateRecord(memory_id=memory_id, **{**defaults, **fields})


def ctx(hint=None, submitted=("vector", "bm25", "graph", "phrase"), retrieval_values=None, **kw):
    q = ProcessedQuery(text="q", normalized="q", tokens=["q"], tenant="t", memory_type_hint=hint)
    return SignalContext(q, NOW, frozenset(submitted), retrieval_values or {}, **kw)


def test_every_signal_stays_in_unit_interval():
    extreme = cand(
        importance=7.0,
        access_count=10**9,
        created_at=NOW - dt.timedelta(days=10**4),
        sources=["vector", "bm25", "graph", "phrase", "attribute", "relevance"],
        scores={"graph_hops": 0, "attribute_distance": -3.0},
    )
    c = ctx(retrieval_values={1: 1.0})
    for name, signal in SIGNALS.items():
        assert 0.0 <= signal(extreme, c) <= 1.0, name
        assert 0.0 <= signal(cand(), c) <= 1.0, name


def test_retrieval_by_rank_orders_by_retrieval_score_then_base_score():
    cands = [cand(1, retrieval_score=0.2), cand(2, retrieval_score=0.9), cand(3, retrieval_score=0.2, base_score=0.5)]
    values = retrieval_by_rank(cands, rank_constant=10)
    assert values == {2: 1.0, 3: 10 / 11, 1: 10 / 12}
    assert retrieval(cands[0], ctx(retrieval_values=values)) == 10 / 12


def test_retrieval_by_rank_ties_share_rank_and_scale_is_size_independent():
    values = retrieval_by_rank([cand(1, retrieval_score=0.5), cand(2, retrieval_score=0.5), cand(3)])
    assert values[1] == values[2] == 1.0 and values[3] == 10 / 12
    big = retrieval_by_rank([cand(i, retrieval_score=1000 - i) for i in range(200)])
    assert big[1] == 10 / 11  # second place costs the same in a set of 200 as in a set of 3


def test_newer_beats_older_and_half_life():
    c = ctx(half_life_days=30.0)
    assert recency(cand(created_at=NOW), c) == 1.0
    assert recency(cand(created_at=NOW - dt.timedelta(days=30)), c) == pytest.approx(0.5)
    day_old, quarter_old = (cand(created_at=NOW - dt.timedelta(days=d)) for d in (1, 90))
    assert recency(day_old, c) > recency(quarter_old, c)
    assert recency(cand(created_at=NOW + dt.timedelta(days=3)), c) == 1.0


def test_recency_accepts_naive_timestamps_as_utc():
    naive = (NOW - dt.timedelta(days=30)).replace(tzinfo=None)
    assert recency(cand(created_at=naive), ctx()) == pytest.approx(0.5)


def test_more_important_beats_less():
    assert importance(cand(importance=0.9), ctx()) > importance(cand(importance=0.1), ctx())
    assert importance(cand(importance=float("nan")), ctx()) == 0.0


def test_access_is_log_scaled_and_saturates():
    c = ctx(access_saturation=100)
    values = [access(cand(access_count=n), c) for n in (0, 1, 10, 100, 1000)]
    assert values[0] == 0.0 and values[-2] == values[-1] == 1.0
    assert values[1] < values[2] < values[3]
    assert values[2] - values[1] > (values[3] - values[2]) / 2  # log scale: early accesses count most


def test_agreement_is_share_of_submitted_sources():
    c = ctx(submitted=("vector", "bm25", "graph", "phrase"))
    assert agreement(cand(sources=["vector"]), c) == 0.25
    assert agreement(cand(sources=["vector", "bm25", "graph"]), c) == 0.75
    assert agreement(cand(sources=["relevance"]), c) == 0.0  # not a submitted source
    assert agreement(cand(sources=["vector"]), ctx(submitted=())) == 0.0


def test_graph_hit_prefers_fewer_hops():
    c = ctx()
    assert graph_hit(cand(sources=["graph"], scores={"graph_hops": 0}), c) == 1.0
    assert graph_hit(cand(sources=["graph"], scores={"graph_hops": 2}), c) == pytest.approx(1 / 3)
    assert graph_hit(cand(sources=["graph"]), c) == 1.0
    assert graph_hit(cand(sources=["vector"]), c) == 0.0


def test_attribute_hit_prefers_closer_matches():
    c = ctx()
    assert attribute_hit(cand(sources=["attribute"], scores={"attribute_distance": 0.1}), c) == pytest.approx(0.9)
    assert attribute_hit(cand(sources=["attribute"]), c) == 1.0
    assert attribute_hit(cand(sources=["vector"], scores={"attribute_distance": 0.0}), c) == 0.0


def test_phrase_hit():
    assert phrase_hit(cand(sources=["phrase"]), ctx()) == 1.0
    assert phrase_hit(cand(sources=["bm25"]), ctx()) == 0.0


def test_type_match():
    assert type_match(cand(memory_type="episodic"), ctx(hint="episodic")) == 1.0
    assert type_match(cand(memory_type="general"), ctx(hint="episodic")) == 0.0
    assert type_match(cand(memory_type="general"), ctx(hint=None)) == 0.0
