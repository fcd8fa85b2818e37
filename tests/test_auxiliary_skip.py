"""A query that returns only its top_k memories leaves out the route's auxiliary workers (graph,
phrase: no weight in the retrieval score) and answers as it would with them (QueryPipeline.
leave_out_auxiliary), on a real server: the same memories, order and scores; they run after all
when the answer needs the candidates only they find; a type hint or the caller's workers keep them."""

from __future__ import annotations

import dataclasses

import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem

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


def test_a_type_hint_a_candidate_list_or_the_callers_workers_keep_them(system):
    system.store_many(_memories(30))
    text = "Where did Carla Diaz meet Dev Patel?"
    cases = [
        {"memory_type": "episodic"},  # the type filter may keep a memory only the graph found
        {"workers": ["vector", "bm25", "graph"]},
    ]
    for kw in cases:
        response, _ = _answer(system, text, top_k=5, **kw)
        assert "graph" in response.diagnostics.submitted_sources and not response.diagnostics.skipped_sources
    listed = system.query(text, tenant="t", top_k=5, ranking=False)  # candidates=True: the whole list
    assert "graph" in listed.diagnostics.submitted_sources and not listed.diagnostics.skipped_sources
    ranked = system.query(text, tenant="t", top_k=5, candidates=False)  # ranking reads the graph_hit signal
    assert "graph" in ranked.diagnostics.submitted_sources and not ranked.diagnostics.skipped_sources
