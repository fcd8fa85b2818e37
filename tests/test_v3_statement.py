"""V3's vector search and final CTE in one statement (candidates.v3_statement), against the two
statements it replaces (the vector worker's hits, then build_candidates on them), on a real server."""

from __future__ import annotations

import dataclasses

import numpy as np
import psycopg
import pytest

import memoria_pg.query.pipeline as pipeline_module
from memoria_pg.config import Config
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.query.candidates import v3_statement
from memoria_pg.query.shards import ALL, tenant_rows
from memoria_pg.query.workers import DEFAULT_WORKERS
from memoria_pg.query.workers.vector import exact
from memoria_pg.ranking import RankingPipeline
from memoria_pg.system import MemorySystem

DIM = 384


class NotBuiltIn:
    """What `retrieve_v3_in` compares the registry's vector worker with, replaced: every vector
    worker then counts as another one and takes the two-statement path."""


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def answer(system: MemorySystem, vector: np.ndarray, *, top_k: int = 10, ranking: bool = False):
    response = system.query("what was said", tenant="t", top_k=top_k, embedding=vector, ranking=ranking, v4=False)
    d = response.diagnostics
    return (
        [
            (c.memory_id, c.memory_type, c.sources, c.scores, c.retrieval_score, c.base_score, c.content,
             c.metadata, c.importance, c.created_at, None if c.embedding is None else c.embedding.tobytes())
            for c in response.candidates
        ],
        [c.memory_id for c in response.memories],
        d.worker_hits,
        d.candidate_count,
        (response.query.entities, response.query.subject, response.query.phrases),
    )  # fmt: skip


def both_paths(system: MemorySystem, monkeypatch, vector: np.ndarray, **kwargs):
    one = answer(system, vector, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(pipeline_module, "VectorWorker", NotBuiltIn)
        two = answer(system, vector, **kwargs)
    return one, two


@pytest.fixture
def stored(config: Config):
    """A system with 40 memories of tenant t over three memory types and 10 of another tenant."""

    def make(ranking=None, **overrides):
        system = MemorySystem(dataclasses.replace(config, **overrides), embedder=HashEmbedder(), ranking=ranking)
        rng = np.random.default_rng(7)
        types = ("general", "episodic", "fact")
        records = [
            {"content": f"memory {i}", "tenant": "t", "memory_type": types[i % 3], "embedding": v,
             "importance": 0.02 * i, "metadata": {"i": i}}
            for i, v in enumerate(unit(rng, 40))
        ] + [{"content": f"other {i}", "tenant": "u", "embedding": v} for i, v in enumerate(unit(rng, 10))]  # fmt: skip
        ids = system.store_many(records).ids
        return system, ids[:40], rng

    systems: list[MemorySystem] = []

    def factory(ranking=None, **overrides):
        system, ids, rng = make(ranking, **overrides)
        systems.append(system)
        return system, ids, rng

    yield factory
    for s in systems:
        s.close()


@pytest.mark.parametrize("exact_max_rows", [10_000, 0], ids=["exact search", "the vector worker (bound 0)"])
def test_v3_in_one_statement_gives_what_the_two_statements_give(stored, monkeypatch, exact_max_rows):
    system, ids, rng = stored(vector_exact_max_rows=exact_max_rows)
    for vector in unit(rng, 8):
        one, two = both_paths(system, monkeypatch, vector)
        assert one == two
        assert one[2] == {"vector": 40}  # every memory of t, none of u: the hits, counted in the server
        assert one[3] == 40
        assert [c[3]["vector_rank"] for c in one[0]] == [float(r) for r in range(1, 41)]


def test_a_ranked_v3_query_gets_the_same_candidates_with_their_vectors(stored, monkeypatch):
    """A ranking that reads the candidates' vectors (MMR) gets them on both paths."""
    system, ids, rng = stored(ranking=RankingPipeline(mmr_lambda=0.7))
    vector = unit(rng, 1)[0]
    one, two = both_paths(system, monkeypatch, vector, ranking=True)
    assert one[0] == two[0]  # the ranking's own scores move with the access counts each query writes
    assert all(c[-1] is not None for c in one[0])


def test_invalid_memories_are_hits_but_not_candidates(stored, monkeypatch):
    system, ids, rng = stored()
    system.invalidate(ids[3], tenant="t")
    system.invalidate(ids[11], tenant="t")
    vector = unit(rng, 1)[0]
    one, two = both_paths(system, monkeypatch, vector, top_k=50)
    assert one == two
    assert one[2] == {"vector": 40} and one[3] == 38
    assert {ids[3], ids[11]}.isdisjoint(c[0] for c in one[0])


def test_a_stored_vector_of_zero_norm_is_left_out_as_before(stored, monkeypatch, config: Config):
    system, ids, rng = stored()
    # A legacy row: validation refuses a zero vector today, an older version could store one.
    with psycopg.connect(config.dsn, autocommit=True) as admin:
        admin.execute(
            "UPDATE memoria.memories SET embedding = array_fill(0, ARRAY[%s])::real[]::vector WHERE id = %s",
            (DIM, ids[5]),
        )
    vector = unit(rng, 1)[0]
    one, two = both_paths(system, monkeypatch, vector, top_k=50)
    assert one[:2] == two[:2] and one[3] == two[3] == 39
    assert ids[5] not in [c[0] for c in one[0]]
    # The one difference: the worker's 40 rows included the NaN one, the statement counts hits with a distance.
    assert (one[2], two[2]) == ({"vector": 39}, {"vector": 40})


def test_the_entity_lookup_rides_in_the_statement_and_falls_back_without_candidates(config, monkeypatch):
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        (first,) = system.store_many([{"content": "Maya Lopez met Tom at the harbour.", "tenant": "t"}]).ids
        queries = []
        original = MemorySystem.query

        def lowered(**kwargs):  # lower case: only the entity table knows the name
            response = original(system, "where did maya lopez meet tom", tenant="t", v4=False, **kwargs)
            queries.append(response)
            return response

        assert lowered(ranking=False).query.entities[:1] == ["Maya Lopez"]
        assert queries[-1].diagnostics.candidate_count == 1
        system.invalidate(first, tenant="t")  # no candidate left to carry the names: looked up alone
        empty = lowered(ranking=False)
        assert empty.diagnostics.candidate_count == 0 and empty.query.entities[:1] == ["Maya Lopez"]
        with monkeypatch.context() as m:
            m.setattr(pipeline_module, "VectorWorker", NotBuiltIn)
            assert lowered(ranking=False).query.entities == empty.query.entities


# 40 memories over 3 types: 14 per type (42) allows the exact search, 13 (39) does not.
@pytest.mark.parametrize(
    "exact_max_rows", [10_000, 14, 13, 0], ids=["exact", "exact at the bound", "worker past it", "worker"]
)
def test_the_statement_searches_exactly_within_the_bound_and_the_worker_above(stored, monkeypatch, exact_max_rows):
    system, ids, rng = stored(vector_exact_max_rows=exact_max_rows)
    vector = unit(rng, 1)[0]
    text, params = v3_statement(
        vector, DEFAULT_WORKERS, limit=50, exact_max_rows=exact_max_rows, cap=200, rrf_k=60, depth=20
    )
    with system.db.transaction("t") as conn:
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + text, params).fetchall())
        rows = conn.execute(text, params).fetchall()
        # The statement's rule (sql/v3_search.sql, in SQL) is VectorWorker's (in Python) for the whole table.
        chosen_exact = exact_max_rows > 0 and exact(tenant_rows(conn), ALL, exact_max_rows)
    assert chosen_exact == (exact_max_rows in (10_000, 14))
    # sql/v3_search.sql: the exact form is the subquery `e`, under a one-time filter; no HNSW form.
    exact_scan = next(line for line in plan.splitlines() if "Subquery Scan on e " in line)
    assert ("never executed" in exact_scan) != chosen_exact
    assert "cosine_distance" in plan and "<=>" not in plan
    assert len(rows) == (40 if chosen_exact else 0)  # every memory of t, none of u
    # Above the bound the statement answers nothing and the query runs the vector worker: the same
    # answer as the two-statement path, every memory of t a hit.
    one, two = both_paths(system, monkeypatch, vector)
    assert one == two and one[2] == {"vector": 40} and one[3] == 40


def test_the_search_parameters_are_not_the_final_ctes():
    text, params = v3_statement(
        np.zeros(DIM, dtype=np.float32), DEFAULT_WORKERS, limit=5, exact_max_rows=7, norms=["maya"], cap=200,
        rrf_k=60, depth=20,
    )  # fmt: skip
    assert params["limit"] == 5 and params["exact_max_rows"] == 7 and params["norms"] == '{"maya"}'
    assert "ids" not in params and "memory_type" in params and params["memory_type"] is None
    assert "-- @exact" not in text and "-- @hnsw" not in text and "declared AS (" in text
