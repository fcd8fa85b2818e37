"""A query that returns only its top_k memories leaves out the route's auxiliary workers (graph,
phrase: no weight in the retrieval score) and answers as it would with them (QueryPipeline.
leave_out_auxiliary), on a real server: the same memories, order and scores; they run after all
when the answer needs the candidates only they find; a type hint or the caller's workers keep them."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem
from memoria_pg.core.types import CandidateRecord, ProcessedQuery
from memoria_pg.query.pipeline import _decided_without_auxiliary as decided
from memoria_pg.query.shards import ALL
from memoria_pg.query.workers import WorkerContext

PEOPLE = ("Alice Novak", "Bob Stone", "Carla Diaz", "Dev Patel")
PLACES = ("New York", "Paris", "Lisbon", "Kyoto")


def _memories(n: int) -> list[dict]:
    return [
        {
            "content": f"{PEOPLE[i % 4]} met {PEOPLE[(i + 1) % 4]} in {PLACES[i % 4]} on day {i} to talk about plan {i % 7}",
            "tenant": "t",
        }
        for i in range(n)
    ]


def _answer(system: MemorySystem, text: str, **kw):
    response = system.query(text, tenant="t", ranking=False, candidates=False, **kw)
    return response, [(m.memory_id, m.retrieval_score) for m in response.memories]


@pytest.fixture
def pair(config: Config):
    """Two systems on one database: auxiliary workers left out (the default) and always run."""
    with (
        MemorySystem(config, embedder=HashEmbedder()) as lean,
        MemorySystem(dataclasses.replace(config, skip_auxiliary_workers=False), embedder=HashEmbedder()) as full,
    ):
        yield lean, full


QUERIES = [
    "What did Alice Novak and Bob Stone talk about in New York?",
    "Where did Carla Diaz meet Dev Patel?",
    "plan 3 in Paris",
    "Bob Stone in Kyoto",
]


def test_a_query_returning_only_its_memories_leaves_them_out_and_answers_the_same(pair):
    lean, full = pair
    lean.store_many(_memories(60))
    for text in QUERIES:
        skipped, answer = _answer(lean, text, top_k=5)
        ran, expected = _answer(full, text, top_k=5)
        assert answer == expected and len(answer) == 5
        assert "graph" in ran.diagnostics.submitted_sources and not ran.diagnostics.skipped_sources
        assert "graph" in skipped.diagnostics.skipped_sources
        assert not set(skipped.diagnostics.skipped_sources) & set(skipped.diagnostics.submitted_sources)
        for lean_memory, memory in zip(skipped.memories, ran.memories):
            assert lean_memory.sources == [s for s in memory.sources if s not in ("graph", "phrase")]
    # phrase (a multi-word entity) is auxiliary too
    phrased, _ = _answer(lean, QUERIES[0], top_k=5)
    assert set(phrased.diagnostics.skipped_sources) == {"graph", "phrase"}


def test_they_run_after_all_when_the_answer_needs_what_only_they_find(config):
    # Four hits per worker: the scored candidates cannot fill a top 10, so the graph's own candidates
    # (no score, no distance) are among those returned: the graph runs after all, and the answer is
    # the one with it from the start.
    small = dataclasses.replace(config, worker_limit=4)
    with (
        MemorySystem(small, embedder=HashEmbedder()) as lean,
        MemorySystem(dataclasses.replace(small, skip_auxiliary_workers=False), embedder=HashEmbedder()) as full,
    ):
        lean.store_many(_memories(40))
        text = "Where did Carla Diaz meet Dev Patel?"
        late, answer = _answer(lean, text, top_k=10)
        _, expected = _answer(full, text, top_k=10)
        assert answer == expected and len(answer) == 10
        assert any(m.sources == ["graph"] for m in late.memories)
        d = late.diagnostics
        assert d.skipped_sources == [] and "graph" in d.submitted_sources and "graph" in d.completed_sources
        assert d.submitted_sources.index("vector") < d.submitted_sources.index("graph")  # the second run's


def test_a_typed_query_leaves_them_out_when_the_type_filter_is_decided_without_them(pair):
    lean, full = pair
    # more episodic memories than the relevance pool takes whole (3 x top_k): the workers run
    lean.store_many(
        _memories(30) + [{**m, "content": m["content"] + " again", "memory_type": "episodic"} for m in _memories(40)]
    )
    for text in QUERIES:
        skipped, answer = _answer(lean, text, top_k=5, memory_type="episodic")
        ran, expected = _answer(full, text, top_k=5, memory_type="episodic")
        assert answer == expected and len(answer) == 5
        assert skipped.diagnostics.type_filter_applied == ran.diagnostics.type_filter_applied
        assert {m.memory_type for m in skipped.memories} == {"episodic"}
        assert "graph" in skipped.diagnostics.skipped_sources and "graph" in ran.diagnostics.submitted_sources


def test_a_candidate_list_ranking_or_the_callers_workers_keep_them(system):
    system.store_many(_memories(30))
    text = "Where did Carla Diaz meet Dev Patel?"
    asked, _ = _answer(system, text, top_k=5, workers=["vector", "bm25", "graph"])
    listed = system.query(text, tenant="t", top_k=5, ranking=False)  # candidates=True: the whole list
    ranked = system.query(text, tenant="t", top_k=5, candidates=False)  # ranking reads the graph_hit signal
    for response in (asked, listed, ranked):
        assert "graph" in response.diagnostics.submitted_sources and not response.diagnostics.skipped_sources


def _candidate(memory_id: int, memory_type: str = "general", score: float = 0.5, distance: float | None = 0.3):
    scores = {} if distance is None else {"vector_distance": distance}
    return CandidateRecord(
        memory_id=memory_id, tenant="t", memory_type=memory_type, content="", metadata={}, importance=0.5,
        created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), last_accessed_at=None, access_count=0,
        embedding=None, scores=scores, retrieval_score=score,
    )  # fmt: skip


def _ctx(hint: str | None, rows: dict[str, int] | None) -> tuple[ProcessedQuery, WorkerContext]:
    query = ProcessedQuery(text="q", normalized="q", tokens=["q"], tenant="t", memory_type_hint=hint)
    ctx = WorkerContext(
        query=query, embedding=np.zeros(3, dtype=np.float32), shards=(ALL,), limit=10, graph_limit=10,
        graph_depth=1, config=Config(), tenant_rows=rows,
    )  # fmt: skip
    return query, ctx


def test_the_answer_is_decided_without_them_only_when_nothing_they_find_could_enter_it():
    scored = [_candidate(i) for i in range(3)]
    assert decided(scored, 3, *_ctx(None, {"general": 3}))
    assert not decided(scored[:2], 3, *_ctx(None, {"general": 3}))  # a place left for their candidates
    weightless = [*scored[:2], _candidate(9, score=0.0, distance=None)]  # found by no scored source
    assert not decided(weightless, 3, *_ctx(None, {"general": 3}))
    near = [*scored[:2], _candidate(9, score=0.0, distance=0.8)]  # no fused score but a distance
    assert decided(near, 3, *_ctx(None, {"general": 3}))
    # A type hint: the filter applied, and the hinted memories fill the answer
    mixed = [_candidate(1, "episodic"), _candidate(2), _candidate(3, "episodic"), _candidate(4, "episodic")]
    assert decided(mixed, 3, *_ctx("episodic", {"general": 1, "episodic": 3}))
    assert not decided(mixed, 4, *_ctx("episodic", {"general": 1, "episodic": 3}))  # three hinted only
    # the filter did not apply: their candidates of the hinted type could switch it on, unless the
    # tenant has none of that type
    assert not decided(scored, 3, *_ctx("episodic", {"general": 3, "episodic": 2}))
    assert not decided(scored, 3, *_ctx("episodic", None))
    assert decided(scored, 3, *_ctx("episodic", {"general": 3}))
