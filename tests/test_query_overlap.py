"""The query embedding beside the workers that need no vector (Config.overlap_embedding), on a real
server: they start before the library embeds the query, the answer is the one of the sequential path,
and a typed query the relevance pool may answer, or a supplied vector, keeps the sequential order."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.query.workers.bm25 import BM25Worker
from memoria_pg.system import MemorySystem

MEMORIES = [
    {"content": "Jonas lives in Porto and plays the cello.", "tenant": "t"},
    {"content": "Maya's favourite colour is teal.", "tenant": "t", "memory_type": "preference"},
    {"content": "Jonas met Maya at the Porto book fair.", "tenant": "t"},
]


class WatchingEmbedder(HashEmbedder):
    """HashEmbedder that, before embedding a query, waits (at most `patience` s) for the BM25 worker
    to have run, and records whether it had."""

    def __init__(self, bm25_ran: threading.Event, patience: float) -> None:
        super().__init__()
        self.bm25_ran, self.patience = bm25_ran, patience
        self.saw_bm25: list[bool] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 1:  # a query (store_many embeds its records in batches of several)
            self.saw_bm25.append(self.bm25_ran.wait(self.patience))
        return super().embed(texts)


@pytest.fixture
def watched(config, monkeypatch):
    ran = threading.Event()
    run = BM25Worker.run

    def run_and_signal(self, conn, ctx):
        hits = run(self, conn, ctx)
        ran.set()
        return hits

    monkeypatch.setattr(BM25Worker, "run", run_and_signal)
    embedder = WatchingEmbedder(ran, patience=10.0)
    with MemorySystem(config.replace(query_cache_size=0), embedder=embedder) as system:
        system.store_many(MEMORIES + [{"content": f"filler note {i} about Lisbon", "tenant": "t"} for i in range(8)])
        embedder.saw_bm25.clear()
        yield system, embedder, ran


def test_bm25_runs_while_the_query_is_embedded(watched):
    system, embedder, ran = watched
    response = system.query("where does Jonas live?", tenant="t", ranking=False)
    assert embedder.saw_bm25 == [True]  # BM25 had finished before the embedder was done waiting
    d = response.diagnostics
    assert d.embedding_overlapped and d.policy_satisfied and d.submitted_sources[0] == "vector"
    assert {"vector", "bm25"} <= set(d.completed_sources)
    assert "Jonas lives in Porto" in response.memories[0].content


def test_the_overlapped_answer_is_the_sequential_one(watched, config):
    system, embedder, ran = watched
    overlapped = system.query("Jonas and Maya in Porto", tenant="t", ranking=False)
    with MemorySystem(config.replace(overlap_embedding=False), embedder=HashEmbedder()) as sequential_system:
        sequential = sequential_system.query("Jonas and Maya in Porto", tenant="t", ranking=False)
    assert overlapped.diagnostics.embedding_overlapped and not sequential.diagnostics.embedding_overlapped
    assert [(m.memory_id, m.sources, m.retrieval_score) for m in overlapped.memories] == [
        (m.memory_id, m.sources, m.retrieval_score) for m in sequential.memories
    ]
    assert overlapped.diagnostics.submitted_sources == sequential.diagnostics.submitted_sources


def test_a_typed_query_or_a_supplied_vector_embeds_first(watched):
    system, embedder, ran = watched
    embedder.patience = 0.0  # nothing to wait for: the query is embedded before any worker starts
    ran.clear()
    typed = system.query("teal", tenant="t", memory_type="preference", ranking=False)
    assert not typed.diagnostics.embedding_overlapped and embedder.saw_bm25 == [False]
    supplied = system.query("teal", tenant="t", embedding=HashEmbedder().embed(["teal"])[0], ranking=False)
    assert not supplied.diagnostics.embedding_overlapped


def every_connection_back(system: MemorySystem, within_s: float = 10.0) -> bool:
    """Whether the pool has all its connections idle again (a cancelled worker returns its own once
    the cancel was answered, CANCEL_WAIT_S at most)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        stats = system.db.pool.get_stats()
        if stats["pool_size"] == stats.get("pool_available", 0):
            return True
        time.sleep(0.05)
    return False


def test_a_failing_embedding_fails_the_query_and_leaves_the_pool_whole(config):
    class Broken(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            if len(texts) == 1:
                raise RuntimeError("the model fell over")
            return super().embed(texts)

    with MemorySystem(config.replace(query_cache_size=0), embedder=Broken()) as system:
        system.store_many(MEMORIES)
        for _ in range(3):
            with pytest.raises(Exception, match="the model fell over"):
                system.query("where does Jonas live?", tenant="t")
        assert every_connection_back(system)
        ok = system.query("where does Jonas live?", tenant="t", embedding=HashEmbedder().embed(["Jonas"])[0])
        assert ok.memories


class RecordingEmbedder(HashEmbedder):
    """HashEmbedder that records each query text it embeds, and on which thread, and signals `started`."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.queries: list[tuple[str, bool]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 1:
            self.queries.append((texts[0], threading.current_thread() is threading.main_thread()))
            self.started.set()
        return super().embed(texts)


def test_the_query_is_embedded_while_it_is_processed(config, monkeypatch):
    """The entity lookup (processing's read) waits until the embedding has started: it can only go on
    if processing runs beside the embedding, on another thread (before, processing came first and this
    waited out its patience). The caller's thread embeds."""
    from memoria_pg.query.processor import TableLookup

    embedder = RecordingEmbedder()
    lookup = TableLookup.__call__
    waited: list[bool] = []

    def after_the_embedding_started(self, norms):
        waited.append(embedder.started.wait(10.0) and threading.current_thread() is not threading.main_thread())
        return lookup(self, norms)

    with MemorySystem(config.replace(query_cache_size=0), embedder=embedder) as system:
        system.store_many(MEMORIES)
        embedder.queries.clear()
        monkeypatch.setattr(TableLookup, "__call__", after_the_embedding_started)
        for memory_type in (None, "preference"):  # the typed one waits for its vector before any worker
            embedder.started.clear()
            response = system.query("Where does Jonas live?", tenant="t", memory_type=memory_type, ranking=False)
            d = response.diagnostics
            assert waited[-1] and d.embedding_beside_processing and d.policy_satisfied
            assert embedder.queries[-1] == ("Where does Jonas live?", True)  # normalized, on the caller's thread
            first = response.memories[0]
            assert first.memory_type == "preference" if memory_type else "Jonas lives in Porto" in first.content
        assert waited == [True, True] and len(embedder.queries) == 2


def test_a_processor_that_normalizes_otherwise_has_its_own_text_embedded(config):
    """The vector is always that of query.normalized: a processor whose normalized text is not
    normalize(text) has its own text embedded once processing is done."""
    from memoria_pg.query.processor import QueryProcessor

    class Lowering(QueryProcessor):
        def process(self, text, tenant, memory_type=None, *, speaker=None):
            query = super().process(text, tenant, memory_type, speaker=speaker)
            query.normalized = query.normalized.lower()
            return query

    embedder = RecordingEmbedder()
    with MemorySystem(config.replace(query_cache_size=0), embedder=embedder) as system:
        system.store_many(MEMORIES)
        embedder.queries.clear()
        system.pipeline.processor_factory = lambda types, lookup: Lowering(types, entity_lookup=lookup)
        response = system.query("Where does Jonas LIVE?", tenant="t", ranking=False)
    assert [text for text, _ in embedder.queries] == ["Where does Jonas LIVE?", "where does jonas live?"]
    d = response.diagnostics
    assert not d.embedding_beside_processing and not d.embedding_overlapped and d.policy_satisfied


class HoldingEmbedder(HashEmbedder):
    """HashEmbedder that holds the embedding of the query text "hold" until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.holding, self.release = threading.Event(), threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if list(texts) == ["hold"]:
            self.holding.set()
            self.release.wait(10.0)
        return super().embed(texts)


def test_the_vector_search_splits_when_the_query_has_the_cores_to_itself(config, monkeypatch):
    """A query the library embeds starts its vector search after the others: with no other query of the
    process in flight it runs as two statements from vector_parallel_alone_min_rows on; beside another
    query, or with the vector supplied (every worker starts at once), it stays one. The same answer."""
    from memoria_pg.query.workers.vector import VectorWorker

    parts: list[int] = []
    run_part = VectorWorker.run_part
    monkeypatch.setattr(
        VectorWorker, "run_part", lambda self, conn, statement: parts.append(1) or run_part(self, conn, statement)
    )
    embedder = HoldingEmbedder()
    cfg = config.replace(query_cache_size=0, vector_parallel_min_rows=10**6, vector_parallel_alone_min_rows=2)
    with MemorySystem(cfg, embedder=embedder) as system:
        system.store_many(MEMORIES + [{"content": f"episode {i} in Lisbon", "tenant": "t", "memory_type": "episodic"}
                                      for i in range(4)])  # fmt: skip
        alone = system.query("Jonas in Lisbon", tenant="t", ranking=False, top_k=20)
        assert len(parts) == 2
        parts.clear()
        supplied = system.query(
            "Jonas in Lisbon", tenant="t", ranking=False, top_k=20, embedding=embedder.embed(["Jonas in Lisbon"])[0]
        )
        assert parts == []
        held = threading.Thread(target=system.query, args=("hold",), kwargs={"tenant": "t"})
        held.start()
        try:
            assert embedder.holding.wait(10.0)  # that query is in flight, embedding
            beside = system.query("Jonas in Lisbon", tenant="t", ranking=False, top_k=20)
            assert parts == [] and beside.diagnostics.embedding_overlapped
        finally:
            embedder.release.set()
            held.join(10.0)
        assert len(parts) == 2  # the held query, alone once released
    answers = [[(m.memory_id, m.retrieval_score) for m in r.memories] for r in (alone, supplied, beside)]
    assert answers[0] == answers[1] == answers[2] and len(answers[0]) == 7
