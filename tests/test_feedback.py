"""The final CTE's lexical feedback (issue #14, sql/final_candidates.sql): the terms that weigh most in
the first candidates re-score the head of the fused order, exactly as benchmarks/feedback_lab.py
computes it, only where the BM25 worker completed and only for score fusion."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

from memoria_pg import indexed_tokens, normalize, tokenize
from memoria_pg.core.types import ProcessedQuery, SourceHit
from memoria_pg.db import load_sql
from memoria_pg.db.native import native
from memoria_pg.query.candidates import build_candidates, candidate_statement, final_cte_params, v3_statement
from memoria_pg.query.pipeline import feedback_terms
from memoria_pg.query.workers import DEFAULT_WORKERS
from memoria_pg.query.workers.registry import DEFAULT_FEEDBACK, NO_FEEDBACK, LexicalFeedback

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import feedback_lab  # benchmarks/ is not a package: imported from its folder
import fusion_lab

TEXTS = [
    "The orchard harvest ended with cider pressing in the old barn.",
    "Cider pressing needs ripe apples and a clean wooden press.",
    "We walked through the orchard after the harvest festival.",
    "The barn roof leaked during the autumn storms.",
    "Apples keep longest in a cool cellar over winter.",
    "Pressing cider at home: wash, grind, press, and ferment.",
    "The festival had music, pies and a tractor parade.",
    "A wooden press from the barn was sold at the auction.",
    "Winter pruning keeps old apple trees productive.",
    "Our neighbour brews beer, not cider, in his garage.",
    "The harvest moon rose over the hills in September.",
    "Fermenting cider takes two weeks in a warm room.",
]
QUERY = "orchard harvest festival"


@pytest.fixture
def stored(system):
    vecs = np.random.default_rng(5).normal(size=(len(TEXTS), 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = system.store_many([{"content": t, "tenant": "t", "embedding": v} for t, v in zip(TEXTS, vecs)]).ids
    return ids


def hits_for(ids: list[int]) -> dict[str, list[SourceHit]]:
    """Vector and BM25 lists that mostly disagree, of different lengths, with scores uneven enough that
    no two fused scores tie (a tie's order would rest on the last bit of a float sum)."""

    def hit(k: int, source: str, rank: int, score: float) -> SourceHit:
        return SourceHit(memory_id=ids[k], source=source, rank=rank, score=score, memory_type="general")

    distances = [0.31, 0.36, 0.43, 0.47, 0.58, 0.62]
    scores = [7.3, 5.9, 5.2, 3.1, 2.9]
    vector = [hit(k, "vector", r + 1, distances[r]) for r, k in enumerate([1, 5, 9, 2, 11, 8])]
    bm25 = [hit(k, "bm25", r + 1, scores[r]) for r, k in enumerate([2, 0, 6, 10, 7])]
    return {"vector": vector, "bm25": bm25}


def found(system, hits, registry=DEFAULT_WORKERS, terms=(), method="score"):
    with system.db.transaction("t") as conn:
        out = build_candidates(conn, hits, registry, cap=200, rrf_k=60, depth=20, method=method, terms=terms)
    return {c.memory_id: c for c in out}


def lab_scores(ids: list[int], hits, p: LexicalFeedback) -> dict[int, float]:
    """What the lab computes for these hits: the engine's fusion, then the feedback."""
    lab_hits = {s: [(h.memory_id, h.memory_type, h.rank, h.score, {}) for h in hs] for s, hs in hits.items()}
    fused = fusion_lab.engine(lab_hits)
    tenant = feedback_lab.Tenant.of({m: indexed_tokens(t, None) for m, t in zip(ids, TEXTS)})
    head = feedback_lab.head_of(lab_hits, fused, p.depth)
    for m, norm in feedback_lab.feedback(tenant, head, tokenize(normalize(QUERY)), p).items():
        fused[m] += p.weight * norm
    return fused


@pytest.mark.parametrize(
    "params",
    [
        DEFAULT_FEEDBACK,
        LexicalFeedback(weight=0.5, seeds=2, expansion=4, depth=5, repeat=1),
        LexicalFeedback(max_length=6),  # half the memories, two of the three seeds among them, take no part
    ],
)
def test_the_lab_computes_the_feedback_the_sql_does(system, stored, params):
    """benchmarks/feedback_lab.py chose the five numbers by replaying captured lists: its replay must
    be the statement's arithmetic, or its leave-one-set-out figures would describe another rule."""
    hits = hits_for(stored)
    got = found(system, hits, DEFAULT_WORKERS.with_feedback(params), tokenize(normalize(QUERY)))
    expected = lab_scores(stored, hits, params)
    fused = fusion_lab.engine(
        {s: [(h.memory_id, h.memory_type, h.rank, h.score, {}) for h in hs] for s, hs in hits.items()}
    )
    assert len({round(v, 9) for v in fused.values()}) == len(fused)  # no tie decides the head's order
    assert {m: c.retrieval_score for m, c in got.items()} == pytest.approx(expected)
    lifted = [m for m, c in got.items() if "feedback" in c.scores]
    assert lifted and len(lifted) <= params.depth
    before = found(system, hits, DEFAULT_WORKERS.with_feedback(NO_FEEDBACK), tokenize(normalize(QUERY)))
    for m in lifted:
        assert got[m].retrieval_score == pytest.approx(
            before[m].retrieval_score + params.weight * got[m].scores["feedback"]
        )
    assert max(got[m].scores["feedback"] for m in lifted) == pytest.approx(1.0)


def test_the_feedback_lifts_a_memory_that_shares_the_seeds_terms(system, stored):
    """The first candidates are about the orchard walk and cider pressing. The memory of the harvest
    that ended with cider pressing, fourth by the lists, holds the query's terms and the seeds' and
    overtakes the third; a memory that holds none of the query's terms is reached by the seeds' alone."""
    hits = hits_for(stored)
    terms = tokenize(normalize(QUERY))
    with_fb = found(system, hits, terms=terms)
    without = found(system, hits, DEFAULT_WORKERS.with_feedback(NO_FEEDBACK), terms)

    def order(c):
        return sorted(c, key=lambda x: (-c[x].retrieval_score, x))

    harvest, home = (
        stored[0],
        stored[5],
    )  # "The orchard harvest ended with cider pressing ...", "Pressing cider at home ..."
    assert order(without).index(home) < order(without).index(harvest)
    assert order(with_fb).index(harvest) < order(with_fb).index(home)
    press = stored[7]  # "A wooden press from the barn was sold at the auction."
    assert not set(terms) & set(indexed_tokens(TEXTS[7], None))
    assert with_fb[press].scores["feedback"] > 0 and "feedback" not in without[press].scores


def test_no_feedback_without_the_bm25_terms_for_rrf_or_when_off(system, stored):
    hits = hits_for(stored)
    terms = tokenize(normalize(QUERY))
    base = found(system, hits, DEFAULT_WORKERS.with_feedback(NO_FEEDBACK), terms)
    for got in (
        found(system, hits),  # no terms: the BM25 worker did not complete
        found(system, hits, DEFAULT_WORKERS.with_feedback(LexicalFeedback(weight=0.0)), terms),
    ):
        assert all("feedback" not in c.scores for c in got.values())
        assert {m: c.retrieval_score for m, c in got.items()} == pytest.approx(
            {m: c.retrieval_score for m, c in base.items()}
        )
    rrf = found(system, hits, terms=terms, method="rrf")
    assert all("feedback" not in c.scores for c in rrf.values())


def test_only_completed_bm25_and_vector_workers_give_the_terms():
    terms = tokenize(normalize(QUERY))
    query = ProcessedQuery(QUERY, normalize(QUERY), terms, "t")
    assert feedback_terms(query, {"vector": [], "bm25": []}) == terms  # completed, even with no hit
    assert feedback_terms(query, {"vector": []}) == []
    assert feedback_terms(query, {"bm25": [], "graph": []}) == []  # BM25 without the vector worker
    query.metadata["expanded_tokens"] = [*terms, "fair"]  # query expansion ran: BM25 read those
    assert feedback_terms(query, {"bm25": [], "vector": []}) == [*terms, "fair"]


def test_a_query_reports_the_feedback_and_the_generic_plan_agrees(system, stored):
    """Through the public API: the returned memories carry the feedback's score, and the final CTE's
    cached generic plan (after five executions) gives the same answer as the first."""
    first = system.query(QUERY, tenant="t", ranking=False, top_k=5)
    assert any("feedback" in m.scores for m in first.memories)
    for _ in range(6):
        again = system.query(QUERY, tenant="t", ranking=False, top_k=5)
    assert [m.memory_id for m in again.memories] == [m.memory_id for m in first.memories]
    assert [m.retrieval_score for m in again.memories] == pytest.approx([m.retrieval_score for m in first.memories])


def test_a_caller_who_chooses_one_source_gets_it_alone(system, stored):
    for workers in (["bm25"], ["vector"]):
        out = system.query(QUERY, tenant="t", ranking=False, top_k=5, workers=workers)
        assert out.memories and all("feedback" not in m.scores for m in out.memories)


def nodes(node: dict) -> Iterator[dict]:
    """A plan node (EXPLAIN's JSON) and every node under it."""
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def head_terms_plan(conn, params) -> dict:
    """The final CTE's head_terms node, executed (EXPLAIN ANALYZE) with these parameters."""
    plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + load_sql("final_candidates"), params).fetchone()[0][0]
    return next(n for n in nodes(plan["Plan"]) if n.get("Subplan Name") == "CTE head_terms")


def test_the_feedback_reads_only_its_candidates_postings_before_any_analyze(system):
    """Right after a load, before autovacuum's first ANALYZE, the planner has no statistics: the
    feedback must still probe each candidate's postings by tenant and id (migration 0022's index,
    the lateral's fence), not join the tenant's every posting, on the generic plan the final CTE
    keeps."""
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(400)]
    texts = [" ".join(rng.choice(words, size=20)) + f" item{i}" for i in range(1500)]
    vecs = rng.normal(size=(len(texts), 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = system.store_many([{"content": t, "tenant": "t", "embedding": v} for t, v in zip(texts, vecs)]).ids

    def hit(k: int, source: str, rank: int, score: float) -> SourceHit:
        return SourceHit(memory_id=ids[k], source=source, rank=rank, score=score, memory_type="general")

    hits = {
        "vector": [hit(k, "vector", k + 1, 0.3 + 0.01 * k) for k in range(40)],
        "bm25": [hit(40 + k, "bm25", k + 1, 9.0 - 0.1 * k) for k in range(40)],
    }
    params = final_cte_params(hits, DEFAULT_WORKERS, cap=200, rrf_k=60, depth=20, terms=texts[0].split()[:4])
    with system.db.transaction("t") as conn:
        conn.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
        head_terms = head_terms_plan(conn, params)
    bound = DEFAULT_FEEDBACK.depth * 21  # each candidate's postings: 20 words and its item number at most
    assert head_terms["Actual Rows"] > 0
    assert all(n["Actual Rows"] * n["Actual Loops"] <= bound for n in nodes(head_terms)), json.dumps(head_terms)


def test_a_memory_longer_than_the_bound_takes_no_part_and_is_not_read_through(system):
    """A head of long documents must cost what a head of short memories does: a memory longer than
    max_length tokens lends no term and gets no score, and no more than max_length of its postings
    are read (a 5,000-word memory has about 2,300)."""
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(3000)]
    long = [" ".join(rng.choice(words, size=400, replace=False)) + " orchard" for _ in range(4)]
    short = [f"orchard harvest {w} cider {words[i]}" for i, w in enumerate(rng.choice(words, size=12))]
    texts = long + short
    vecs = rng.normal(size=(len(texts), 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = system.store_many([{"content": t, "tenant": "t", "embedding": v} for t, v in zip(texts, vecs)]).ids

    def hit(k: int, source: str, rank: int, score: float) -> SourceHit:
        return SourceHit(memory_id=ids[k], source=source, rank=rank, score=score, memory_type="general")

    order = list(range(len(texts)))  # the long ones first in both lists
    hits = {
        "vector": [hit(k, "vector", r + 1, 0.3 + 0.02 * r) for r, k in enumerate(order)],
        "bm25": [hit(k, "bm25", r + 1, 9.0 - 0.3 * r) for r, k in enumerate(order)],
    }
    terms = ["orchard", "harvest"]
    bound = 50
    registry = DEFAULT_WORKERS.with_feedback(LexicalFeedback(max_length=bound))
    got = found(system, hits, registry, terms)
    assert all("feedback" not in got[ids[k]].scores for k in range(len(long)))
    assert any("feedback" in got[ids[k]].scores for k in range(len(long), len(texts)))
    params = final_cte_params(hits, registry, cap=200, rrf_k=60, depth=20, terms=terms)
    with system.db.transaction("t") as conn:
        head_terms = head_terms_plan(conn, params)
    scans = [n for n in nodes(head_terms) if n.get("Relation Name", "").startswith("memory_terms")]
    assert scans and all(n["Actual Rows"] <= bound for n in scans), json.dumps(head_terms)  # rows per loop
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in scans)
    assert read <= len(long) * bound + len(short) * 6, json.dumps(head_terms)


def test_a_statement_the_feedback_does_not_run_for_carries_none_of_it(system, stored):
    """V3, RRF and a V4 query without the feedback run the final CTE cut of the feedback's CTEs (whose
    plan nodes, set up at every execution for no row, cost a V3 query 12% at LoCoMo size), with the
    rows the whole file gives."""
    hits, terms = hits_for(stored), tokenize(normalize(QUERY))
    off = DEFAULT_WORKERS.with_feedback(NO_FEEDBACK)
    text, params = candidate_statement(hits, off, cap=200, rrf_k=60, depth=20, terms=terms)
    assert "head_terms" not in text and "feedback_norm AS (" in text
    assert "head_terms" in candidate_statement(hits, DEFAULT_WORKERS, cap=200, rrf_k=60, depth=20, terms=terms)[0]
    for method, registry, given in (("rrf", DEFAULT_WORKERS, terms), ("score", DEFAULT_WORKERS, ())):
        cut = candidate_statement(hits, registry, cap=200, rrf_k=60, depth=20, method=method, terms=given)[0]
        assert "head_terms" not in cut, method
    v3 = v3_statement(
        np.zeros(384, dtype=np.float32), DEFAULT_WORKERS, limit=5, exact_max_rows=7, cap=200, rrf_k=60, depth=20
    )
    assert "head_terms" not in v3[0] and "declared AS (" in v3[0]
    with system.db.transaction("t") as conn:  # both forms as build_candidates sends them (db/native.py)
        whole, cut = (native(t, "test") for t in (load_sql("final_candidates"), text))
        rows = psycopg.RawCursor(conn).execute(whole.text, whole.args(params)).fetchall()
        assert psycopg.RawCursor(conn).execute(cut.text, cut.args(params)).fetchall() == rows
        whole = rows
    assert [c.memory_id for c in build_candidates_rows(system, hits, off, terms)] == [r[0] for r in whole]


def build_candidates_rows(system, hits, registry, terms):
    with system.db.transaction("t") as conn:
        return build_candidates(conn, hits, registry, cap=200, rrf_k=60, depth=20, terms=terms, embeddings=False)


def test_the_configuration_turns_it_off(config, stored):
    from memoria_pg import HashEmbedder, MemorySystem

    with MemorySystem(dataclasses.replace(config, lexical_feedback=False), embedder=HashEmbedder()) as off:
        out = off.query(QUERY, tenant="t", ranking=False, top_k=5)
        assert out.memories and all("feedback" not in m.scores for m in out.memories)
