"""Candidate construction (the final CTE), the candidate cap and type filtering on a real server."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

from memoria_pg.config import Config
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.core.types import CandidateRecord, SourceHit
from memoria_pg.db.arrays import Float8Array, Int4Array, Int8Array, text_array
from memoria_pg.query.candidates import (
    _top_text,
    build_candidates,
    candidate_statement,
    filter_by_type,
    final_cte_params,
)
from memoria_pg.query.workers import DEFAULT_WORKERS
from memoria_pg.query.workers.registry import NO_SHIFT
from memoria_pg.system import MemorySystem

# The normalization and the declared weights, without the per-query shift (tests/test_fusion.py tests it).
DECLARED = DEFAULT_WORKERS.with_shift(NO_SHIFT)
SCORE_WEIGHTS = DEFAULT_WORKERS.weights("score")
RRF_WEIGHTS = DEFAULT_WORKERS.weights("rrf")


def hit(memory_id: int, source: str, rank: int, score: float, **detail) -> SourceHit:
    return SourceHit(memory_id=memory_id, source=source, rank=rank, score=score, memory_type="general", detail=detail)


def candidates(
    system: MemorySystem, hits: dict[str, list[SourceHit]], *, tenant: str = "t", cap: int = 200, method: str = "score"
):
    with system.db.transaction(tenant) as conn:
        return build_candidates(conn, hits, DECLARED, cap=cap, rrf_k=60, depth=20, method=method)


@pytest.fixture
def five(system):
    vecs = np.random.default_rng(1).normal(size=(5, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # unit length: stored as given (others are scaled to it)
    result = system.store_many(
        [{"content": f"memory {i}", "tenant": "t", "embedding": v, "importance": 0.1 * i} for i, v in enumerate(vecs)]
    )
    return result.ids, vecs


# -- the final CTE -----------------------------------------------------------------------------------


def test_memory_found_by_three_sources_appears_once_with_each_score(system, five):
    (a, b, c, *_), vecs = five
    hits = {
        "vector": [hit(a, "vector", 1, 0.1), hit(b, "vector", 2, 0.3)],
        "bm25": [hit(a, "bm25", 1, 5.0), hit(c, "bm25", 2, 2.0)],
        "graph": [hit(a, "graph", 1, -1.0, hops=1, entity_hits=1)],
    }
    found = candidates(system, hits)

    assert [x.memory_id for x in found] == [a, b, c]
    first = found[0]
    assert first.sources == ["bm25", "graph", "vector"]
    assert first.scores["vector_distance"] == pytest.approx(0.1)
    assert first.scores["bm25"] == pytest.approx(5.0)
    assert first.scores["graph_hops"] == 1.0
    assert first.scores["vector_rank"] == first.scores["bm25_rank"] == first.scores["graph_rank"] == 1.0
    # best of each list: every normalized score is 1
    assert first.retrieval_score == pytest.approx(
        SCORE_WEIGHTS["vector"] + SCORE_WEIGHTS["bm25"] + SCORE_WEIGHTS["graph"]
    )
    assert first.content == "memory 0" and first.tenant == "t"
    np.testing.assert_array_equal(first.embedding, vecs[0])


def test_the_final_cte_gives_the_same_candidates_on_its_generic_plan(system, five):
    # The query path runs the final CTE with generic plans (prepared after psycopg's 5 executions).
    (a, b, c, d, e), _ = five
    hits = {
        "vector": [hit(a, "vector", 1, 0.1), hit(b, "vector", 2, 0.3), hit(e, "vector", 3, 0.35)],
        "bm25": [hit(c, "bm25", 1, 5.0), hit(a, "bm25", 2, 2.0)],
        "phrase": [hit(d, "phrase", 1, 1.0)],
    }
    expected = [(x.memory_id, x.sources, x.scores, x.retrieval_score) for x in candidates(system, hits)]
    for _ in range(8):
        with system.db.transaction("t", generic_plans=True) as conn:
            assert conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0] == "force_generic_plan"
            found = build_candidates(conn, hits, DECLARED, cap=200, rrf_k=60, depth=20)
        assert [(x.memory_id, x.sources, x.scores, x.retrieval_score) for x in found] == expected
    with system.db.transaction("t") as conn:  # the workers' transactions keep custom plans
        assert conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0] == "force_custom_plan"


def _scans(node: dict, relation: str) -> list[dict]:
    """The plan nodes under `node` that scan a partition of `relation` (EXPLAIN's JSON)."""
    own = [node] if str(node.get("Relation Name", "")).startswith(relation + "_") else []
    return own + [scan for child in node.get("Plans", []) for scan in _scans(child, relation)]


def test_the_final_cte_reads_each_candidate_from_its_own_shard_once(system):
    """One index probe per candidate, in its memory type's shard (the others pruned at run time), on the
    generic plan the query path runs: not every shard's index probed with every candidate's id."""
    types = ["general", "fact", "episodic", "preference"]
    ids = system.store_many(
        [{"content": f"note {i} about Lisbon", "tenant": "t", "memory_type": types[i % 4]} for i in range(24)]
    ).ids
    hits = {
        "bm25": [
            SourceHit(memory_id=m, source="bm25", rank=i + 1, score=30.0 - i, memory_type=types[i % 4])
            for i, m in enumerate(ids)
        ]
    }
    statement, params = candidate_statement(hits, DECLARED, cap=200, rrf_k=60, depth=20)
    with system.db.transaction("t", generic_plans=True) as conn:
        conn.execute("SET LOCAL enable_seqscan = off")  # a few rows: the plan a large shard gets
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params).fetchone()[0][0]["Plan"]
    scans = _scans(plan, "memories")
    assert {scan["Relation Name"] for scan in scans} >= {f"memories_{t}" for t in types}
    assert sum(scan["Actual Loops"] for scan in scans) == len(ids)  # 24 probes, not 24 x 7 shards
    assert sum(scan["Actual Rows"] * scan["Actual Loops"] for scan in scans) == len(ids)
    assert all("ANY" not in scan.get("Index Cond", "") for scan in scans)


def _relation(node: dict, name: str) -> list[dict]:
    """The plan nodes under `node` (subplans included) that scan the table `name` (EXPLAIN's JSON)."""
    own = [node] if node.get("Relation Name") == name else []
    return own + [scan for child in node.get("Plans", []) for scan in _relation(child, name)]


def test_the_first_rows_read_the_access_statistics_of_the_rows_returned_only(system):
    """The first-rows form (candidates._TOP_EDITS) probes memory_access for each row it returns, above
    its limit, not for each candidate; the full form joins it for every candidate."""
    ids = system.store_many([{"content": f"note {i} about Lisbon", "tenant": "t"} for i in range(24)]).ids
    hits = {"bm25": [SourceHit(m, "bm25", i + 1, 30.0 - i, "general") for i, m in enumerate(ids)]}
    scans = {}
    for form, fetch in (("first rows", 3), ("full", None)):
        params = final_cte_params(hits, DECLARED, cap=200, rrf_k=60, depth=20, fetch=fetch, prefer_type=None)
        text = _top_text() if fetch else candidate_statement(hits, DECLARED, cap=200, rrf_k=60, depth=20)[0]
        with system.db.transaction("t", generic_plans=True) as conn:
            conn.execute("SET LOCAL enable_seqscan = off")  # a few rows: the plan a large tenant gets
            plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text, params).fetchone()[0][0]["Plan"]
        scans[form] = _relation(plan, "memory_access")
    assert sum(scan["Actual Loops"] for scan in scans["first rows"]) == 2 * 3  # two subqueries per row returned
    # the full form's join: a probe per candidate, or one pass over the table (a hash join: the
    # planner's choice for a table with no statistics yet)
    full = scans["full"]
    assert sum(scan["Actual Loops"] for scan in full) >= len(ids) or [s["Actual Loops"] for s in full] == [1]


def test_the_first_rows_read_only_the_rows_they_return_and_count_out_what_stopped_holding(system):
    """The first-rows form reads the memories rows of the first `fetch` valid candidates only: the
    candidates not valid now (here 6 of 25: 5 invalidated, two of them among the first, and one that
    begins to hold in 2099) are found in the partial index memories_bounded (migration 0020), left
    out of the list and of both counts, and never read; what it returns is the full form's first rows,
    with the full form's counts."""
    ids = system.store_many([{"content": f"note {i} about Porto", "tenant": "t"} for i in range(24)]).ids
    for memory_id in (ids[0], ids[2], ids[9], ids[17], ids[23]):
        system.invalidate(memory_id, tenant="t")
    later = system.store("note about Porto, from 2099 on", tenant="t", valid_from="2099-01-01")
    ranked = [ids[0], later, *ids[1:]]
    hits = {"bm25": [SourceHit(m, "bm25", i + 1, 30.0 - i, "general") for i, m in enumerate(ranked)]}
    with system.db.transaction("t", generic_plans=True) as conn:
        full = build_candidates(conn, hits, DECLARED, cap=200, rrf_k=60, depth=20)
        first = build_candidates(conn, hits, DECLARED, cap=200, rrf_k=60, depth=20, fetch=3)
        params = final_cte_params(hits, DECLARED, cap=200, rrf_k=60, depth=20, fetch=3, prefer_type="general")
        conn.execute("SET LOCAL enable_seqscan = off")  # a few rows: the plan a large tenant gets
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + _top_text(), params).fetchone()[0][0]["Plan"]
        rows = conn.cursor(row_factory=dict_row).execute(_top_text(), params).fetchall()
    assert [c.memory_id for c in full] == [m for m in ids if m not in (ids[0], ids[2], ids[9], ids[17], ids[23])]
    assert [c.memory_id for c in first] == [c.memory_id for c in full][:3] == [ids[1], ids[3], ids[4]]
    assert first.total == full.total == 19
    assert [(r["candidate_total"], r["preferred_total"]) for r in rows] == [(19, 19)] * 3
    scans = _relation(plan, "memories_general")
    invalid = [scan for scan in scans if "valid_to" in scan.get("Index Name", "")]  # memories_bounded's
    assert sum(scan["Actual Rows"] * scan["Actual Loops"] for scan in invalid) == 6
    read = sum(scan["Actual Rows"] * scan["Actual Loops"] for scan in scans if scan not in invalid)
    assert read == 3, "the rows of the 3 returned are read, not those of 24 candidates"


def test_a_candidate_gone_since_its_worker_read_it_leaves_no_row_out(system):
    """A memory deleted between a worker's statement and the final CTE takes its place in the
    first-rows form's list but has no row: the caller reads the whole list then, and gets the rows
    the full form gives."""
    ids = system.store_many([{"content": f"line {i} of Braga", "tenant": "t"} for i in range(8)]).ids
    hits = {"bm25": [SourceHit(m, "bm25", i + 1, 20.0 - i, "general") for i, m in enumerate(ids)]}
    system.delete(ids[1], tenant="t")
    with system.db.transaction("t", generic_plans=True) as conn:
        full = build_candidates(conn, hits, DECLARED, cap=200, rrf_k=60, depth=20)
        first = build_candidates(conn, hits, DECLARED, cap=200, rrf_k=60, depth=20, fetch=3)
    assert [c.memory_id for c in first][:3] == [c.memory_id for c in full][:3] == [ids[0], ids[2], ids[3]]
    assert first.total == full.total == 7


def test_score_fusion_normalizes_each_source_within_its_list(system, five):
    (a, b, c, d, e), _ = five
    found = candidates(
        system,
        {
            "vector": [hit(a, "vector", 1, 0.1), hit(b, "vector", 2, 0.3), hit(c, "vector", 3, 0.5)],  # distances
            "bm25": [hit(d, "bm25", 1, 9.0), hit(c, "bm25", 2, 6.0), hit(e, "bm25", 3, 1.0)],
            "attribute": [hit(e, "attribute", 1, 0.2), hit(b, "attribute", 2, 0.6)],  # distances
        },
    )
    score = {x.memory_id: x.retrieval_score for x in found}
    wv, wb, wa = SCORE_WEIGHTS["vector"], SCORE_WEIGHTS["bm25"], SCORE_WEIGHTS["attribute"]
    # min-max with the floor one step below the last hit: a list of n puts its last hit at 1/n
    assert score[a] == pytest.approx(wv * 1.0)
    assert score[b] == pytest.approx(wv * (0.7 - 0.3) / 0.6 + wa * 0.5)
    assert score[c] == pytest.approx(wv * (0.7 - 0.5) / 0.6 + wb * (6.0 + 3.0) / 12.0)
    assert score[d] == pytest.approx(wb * 1.0)
    assert score[e] == pytest.approx(wb * (1.0 + 3.0) / 12.0 + wa * 1.0)
    # a tie (a, d): the smaller vector distance first, candidates without one after
    assert [x.memory_id for x in found] == [c, a, d, b, e]


def test_the_last_of_two_hits_still_counts(system, five):
    """A memory second of two by vector and first by BM25 beats the vector's first alone."""
    (a, b, *_), _ = five
    found = candidates(
        system, {"vector": [hit(a, "vector", 1, 0.2), hit(b, "vector", 2, 0.9)], "bm25": [hit(b, "bm25", 1, 2.0)]}
    )
    assert [x.memory_id for x in found] == [b, a]
    assert found[0].retrieval_score == pytest.approx(SCORE_WEIGHTS["vector"] * 0.5 + SCORE_WEIGHTS["bm25"])


def test_a_list_of_equal_scores_counts_fully(system, five):
    (a, b, *_), _ = five
    found = candidates(system, {"bm25": [hit(a, "bm25", 1, 2.0), hit(b, "bm25", 2, 2.0)]})
    assert [x.retrieval_score for x in found] == pytest.approx([SCORE_WEIGHTS["bm25"]] * 2)


def test_rrf_method_fuses_by_rank(system, five):
    (a, b, c, *_), _ = five
    hits = {
        "vector": [hit(a, "vector", 1, 0.1), hit(b, "vector", 2, 0.3)],
        "bm25": [hit(a, "bm25", 1, 5.0), hit(c, "bm25", 2, 2.0)],
    }
    found = candidates(system, hits, method="rrf")
    assert [x.memory_id for x in found] == [a, b, c]
    assert found[0].retrieval_score == pytest.approx((RRF_WEIGHTS["vector"] + RRF_WEIGHTS["bm25"]) / 61)
    assert found[1].retrieval_score == pytest.approx(RRF_WEIGHTS["vector"] / 62)


def test_an_unknown_fusion_method_is_refused(system, five):
    (a, *_), _ = five
    with pytest.raises(ValueError, match="fusion method must be one of"):
        candidates(system, {"vector": [hit(a, "vector", 1, 0.1)]}, method="borda")


def test_base_score_is_inverse_distance(system, five):
    (a, b, c, *_), _ = five
    found = candidates(
        system, {"vector": [hit(a, "vector", 1, 0.25), hit(b, "vector", 2, 1.5)], "bm25": [hit(c, "bm25", 1, 3.0)]}
    )
    by_id = {x.memory_id: x for x in found}
    assert by_id[a].base_score == pytest.approx(1 / 1.25)
    assert by_id[b].base_score == pytest.approx(1 / 2.5)
    assert by_id[c].base_score == 0.0  # no distance: lexical-only candidates have no base score


def test_cap_keeps_the_best_fused_candidates(system, five):
    ids, _ = five
    hits = {
        "vector": [hit(m, "vector", r, 0.1 * r) for r, m in enumerate(ids, 1)],
        "bm25": [hit(m, "bm25", r, 10.0 - r) for r, m in enumerate(reversed(ids), 1)],
    }
    # attribute votes in the fused score (graph and phrase are auxiliary: weight 0)
    hits["attribute"] = [hit(ids[2], "attribute", 1, 0.0)]
    found = candidates(system, hits, cap=2)
    assert len(found) == 2
    assert found[0].memory_id == ids[2]  # the only memory with a third voting source


def test_other_tenants_memories_never_become_candidates(system, five):
    (a, *_), _ = five
    foreign = system.store("someone else's memory", tenant="u")
    found = candidates(system, {"vector": [hit(foreign, "vector", 1, 0.0), hit(a, "vector", 2, 0.2)]})
    assert [x.memory_id for x in found] == [a]


def test_no_hits_no_candidates(system):
    assert candidates(system, {"vector": [], "bm25": []}) == []


# -- through the query -------------------------------------------------------------------------------


def test_query_deduplicates_across_sources(system):
    system.store_many(
        [
            {"content": c, "tenant": "t"}
            for c in (
                "Alice's favourite colour is blue",
                "Alice bought a blue bicycle",
                "The sea is blue today",
                "Bob prefers green tea",
            )
        ]
    )
    response = system.query("Alice's favourite colour", tenant="t")
    ids = [c.memory_id for c in response.candidates]
    assert len(ids) == len(set(ids))
    top = next(c for c in response.candidates if c.content == "Alice's favourite colour is blue")
    assert {"vector", "bm25", "fusion", "attribute"} <= set(top.sources)
    assert {"vector_distance", "bm25", "fusion", "attribute_distance"} <= set(top.scores)
    for c in response.candidates:
        if "vector_distance" in c.scores:
            assert c.base_score == pytest.approx(1 / (1 + c.scores["vector_distance"]))


def test_candidate_count_is_capped(config: Config):
    cfg = config.replace(ranking_candidate_limit=200, worker_limit=300)
    with MemorySystem(cfg, embedder=HashEmbedder()) as system:
        system.store_many(
            [{"content": f"harbour log entry {i} mentions crate {i * 7}", "tenant": "t"} for i in range(300)]
        )
        response = system.query("harbour log crate", tenant="t", workers=["vector", "bm25"], ranking=False)
    d = response.diagnostics
    assert d.worker_hits == {"vector": 300, "bm25": 300}
    assert d.candidate_count == 200
    assert len(response.candidates) == 200
    assert d.returned_count == cfg.top_k


# -- type filtering ----------------------------------------------------------------------------------


def record(memory_id: int, memory_type: str) -> CandidateRecord:
    return CandidateRecord(
        memory_id=memory_id,
        tenant="t",
        memory_type=memory_type,
        content="c",
        metadata={},
        importance=0.5,
        created_at=dt.datetime.now(dt.UTC),
        last_accessed_at=None,
        access_count=0,
        embedding=None,
    )


def test_filter_by_type_keeps_the_hinted_type_or_everything():
    mixed = [record(1, "general"), record(2, "fact"), record(3, "general")]
    assert filter_by_type(mixed, "fact") == ([mixed[1]], True)
    assert filter_by_type(mixed, "episodic") == (mixed, False)
    assert filter_by_type(mixed, None) == (mixed, False)
    assert filter_by_type([], "fact") == ([], False)


def test_typed_query_falls_back_when_no_candidate_has_the_type(system):
    system.store_many([{"content": f"how to bake sourdough bread step {i}", "tenant": "t"} for i in range(4)])
    response = system.query("how to bake bread", tenant="t", memory_type="procedural")
    assert response.query.memory_type_hint == "procedural"
    assert not response.diagnostics.type_filter_applied
    assert response.memories and {m.memory_type for m in response.memories} == {"general"}


def test_typed_query_keeps_only_matching_candidates(system):
    system.store_many(
        [{"content": f"how to bake sourdough bread step {i}", "tenant": "t"} for i in range(4)]
        + [
            {"content": "how to knead bread dough", "tenant": "t", "memory_type": "procedural"},
            {"content": "how to bake rye bread", "tenant": "t", "memory_type": "procedural"},
        ]
    )
    response = system.query("how to bake bread", tenant="t", memory_type="procedural")
    assert response.diagnostics.type_filter_applied
    assert {m.memory_type for m in response.candidates} == {"procedural"}
    assert {m.content for m in response.memories} == {"how to knead bread dough", "how to bake rye bread"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=8),
    ints=st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=8),
    small=st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=8),
    floats=st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=8),
)
def test_array_parameters_read_back_as_the_values(system, texts, ints, small, floats):
    """The final CTE's hit arrays travel as text literals and binary numbers (db/arrays.py): every string
    (quotes, backslashes, braces, commas, 'NULL', the empty string), None, bigint, integer and double reads
    back unchanged, also where the statement casts them, also empty."""
    texts = [t.replace("\x00", "") if t is not None else None for t in texts]  # PostgreSQL text has no NUL
    params = (text_array(texts), Int8Array.of(ints), Int4Array.of(small), Float8Array.of(floats))
    with system.db.connection() as conn:
        cast = conn.execute("SELECT %s::text[], %s::bigint[], %s::int[], %s::float8[]", params).fetchone()
        typed = conn.execute("SELECT %s::text[], %s, %s, %s, pg_typeof(%s)::text", (*params, params[3])).fetchone()
    assert cast == (texts, ints, small, floats) and typed == (texts, ints, small, floats, "double precision[]")


def test_binary_arrays_refuse_what_their_type_cannot_hold():
    """An integer out of the element type's range is an error here, not a wrapped number in the server."""
    with pytest.raises(OverflowError):
        Int4Array.of([2**31])
    with pytest.raises(OverflowError):
        Int8Array.of([2**63])
    assert "bytes" in repr(Int8Array.of([1, 2]))  # what EXPLAIN and errors show: not the raw bytes


def test_candidates_keep_each_sources_hit_as_sent(system, five):
    """Sources, scores and ranks come from the hits the caller sent (the statement returns only the
    fused score): the graph source's fused value is its hop count, a NaN hit is left out."""
    (a, b, c, *_), _ = five
    hits = {
        "vector": [hit(a, "vector", 1, 0.1), hit(b, "vector", 2, float("nan"))],
        "graph": [hit(b, "graph", 1, 0.9, hops=2), hit(a, "graph", 2, 0.5, hops=1)],
        "bm25": [hit(c, "bm25", 1, 3.0)],
    }
    got = {x.memory_id: x for x in candidates(system, hits)}
    assert got[a].sources == ["graph", "vector"] and got[b].sources == ["graph"] and got[c].sources == ["bm25"]
    assert got[a].scores["vector_distance"] == 0.1 and got[a].scores["vector_rank"] == 1.0
    assert got[b].scores["graph_rank"] == 1.0 and "vector_distance" not in got[b].scores
    assert got[a].scores[DEFAULT_WORKERS.score_names()["graph"]] == 1.0  # hops, not the hit's score


def test_only_a_ranking_that_reads_vectors_gets_them(system, config, five):
    """The candidates' vectors are sent only to a ranking stage that reads them: MMR, a signal
    plugin, or a stage of the caller's that does not say (RankingStage.reads_embeddings). The default
    ranking (no MMR, no plugins) and a retrieval-only query leave them in the database; the same
    candidates and order otherwise."""
    from memoria_pg.plugins import PluginRegistry
    from memoria_pg.ranking import RankingPipeline
    from memoria_pg.system import MemorySystem

    ids, vecs = five
    plain = system.query("memory", tenant="t", embedding=vecs[0], ranking=False)
    ranked = system.query("memory", tenant="t", embedding=vecs[0], ranking=True)
    assert plain.candidates and all(c.embedding is None for c in plain.candidates)
    assert ranked.candidates and all(c.embedding is None for c in ranked.candidates)
    assert sorted(c.memory_id for c in plain.candidates) == sorted(c.memory_id for c in ranked.candidates)
    v3 = system.query("memory", tenant="t", embedding=vecs[0], ranking=True, v4=False)
    assert v3.candidates and all(c.embedding is None for c in v3.candidates)

    class Stage:  # a ranking of the caller's that does not say whether it reads them
        def rank(self, query, candidates, top_k, submitted_sources, now=None, boost=()):
            return candidates[:top_k]

    class Signal:
        name, weight = "novelty", 0.1

        def __call__(self, query, candidate):
            return 0.0 if candidate.embedding is None else 0.5

    plugins = PluginRegistry()
    plugins.register_ranking_signal(Signal())
    readers = {"mmr": {"ranking": RankingPipeline(mmr_lambda=0.7)}, "stage": {"ranking": Stage()}}
    readers["plugin"] = {"plugins": plugins}
    for name, kwargs in readers.items():
        with MemorySystem(config, embedder=HashEmbedder(), **kwargs) as other:
            for v4 in (True, False):
                got = other.query("memory", tenant="t", embedding=vecs[0], ranking=True, v4=v4)
                assert got.candidates and all(c.embedding is not None for c in got.candidates), (name, v4)
                first = next(c for c in got.candidates if c.memory_id == ids[0])
                np.testing.assert_array_equal(first.embedding, vecs[0])
                if name == "plugin":
                    assert all(c.explanation["novelty"] == 0.05 for c in got.memories)
    assert not RankingPipeline().reads_embeddings
