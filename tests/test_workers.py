"""Each retrieval worker's SQL on a real server, run directly with a WorkerContext inside a tenant
transaction, checked against what the worker is meant to compute."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter

import numpy as np
import psycopg
import pytest

from memoria_pg.config import Config
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.core.text import tokenize
from memoria_pg.core.types import ProcessedQuery, Shard, SourceHit
from memoria_pg.db import vector_indexes
from memoria_pg.query.shards import ALL
from memoria_pg.query.workers import DEFAULT_WORKERS as WORKERS
from memoria_pg.query.workers import WorkerContext
from memoria_pg.query.workers.attribute import AttributeWorker
from memoria_pg.query.workers.base import shard_sql
from memoria_pg.query.workers.bm25 import BM25Worker
from memoria_pg.query.workers.fusion import FusionWorker
from memoria_pg.query.workers.graph import GENERIC_MAX_ROWS, GraphWorker
from memoria_pg.query.workers.phrase import PhraseWorker
from memoria_pg.query.workers.vector import VectorWorker
from memoria_pg.system import MemorySystem

FUSION_DEPTH = Config().rrf_depth


def processed(text: str = "", tenant: str = "t", **fields) -> ProcessedQuery:
    return ProcessedQuery(text=text, normalized=text, tokens=tokenize(text), tenant=tenant, **fields)


def run(
    system: MemorySystem,
    worker,
    query: ProcessedQuery,
    *,
    embedding=None,
    shards=(ALL,),
    limit=50,
    graph_depth=2,
    config: Config | None = None,
) -> list[SourceHit]:
    vector = embedding if embedding is not None else system.embed_query(query.normalized or "x")
    ctx = WorkerContext(
        query=query,
        embedding=np.asarray(vector, dtype=np.float32),
        shards=tuple(shards),
        limit=limit,
        graph_limit=limit,
        graph_depth=graph_depth,
        config=config or system.config,
        graph_backend=system.graph_backend,
    )
    with system.db.transaction(query.tenant) as conn:
        return worker.run(conn, ctx)


def unit_vectors(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# -- vector ------------------------------------------------------------------------------------------


@pytest.fixture
def vectors(system):
    vecs = unit_vectors(25, seed=3)
    ids = system.store_many(
        [
            {"content": f"point {i}", "tenant": "t", "embedding": v, "memory_type": "fact" if i % 5 == 0 else "general"}
            for i, v in enumerate(vecs)
        ]
    ).ids
    system.store_many([{"content": f"foreign point {i}", "tenant": "u", "embedding": v} for i, v in enumerate(vecs)])
    return dict(zip(ids, vecs))


def test_vector_returns_nearest_first_in_distance_order(system, vectors):
    ids = list(vectors)
    query = vectors[ids[7]]
    hits = run(system, VectorWorker(), processed("point"), embedding=query, limit=10)

    matrix = np.stack(list(vectors.values()))
    exact = 1.0 - matrix @ query
    expected = [ids[i] for i in np.argsort(exact)[:10]]
    assert [h.memory_id for h in hits] == expected
    assert hits[0].memory_id == ids[7] and hits[0].score == pytest.approx(0.0, abs=1e-5)
    assert [h.score for h in hits] == sorted(h.score for h in hits)
    assert [h.score for h in hits] == pytest.approx(sorted(exact)[:10], abs=1e-5)
    assert [h.rank for h in hits] == list(range(1, 11))


def test_vector_sees_only_the_tenant(system, vectors):
    hits = run(system, VectorWorker(), processed("point"), embedding=next(iter(vectors.values())), limit=100)
    assert {h.memory_id for h in hits} == set(vectors)


def test_vector_reads_only_the_selected_shard(system, vectors):
    hits = run(
        system,
        VectorWorker(),
        processed("point"),
        embedding=next(iter(vectors.values())),
        shards=[Shard("fact")],
        limit=100,
    )
    assert len(hits) == 5 and {h.memory_type for h in hits} == {"fact"}


def test_vector_limit_above_ef_search_is_honoured(config):
    # An HNSW scan stops after ef_search tuples unless iterative scans are on (HNSW forced: 1,500
    # memories would otherwise be searched exactly).
    with MemorySystem(config.replace(hnsw_ef_search=10, vector_exact_max_rows=0), embedder=HashEmbedder()) as system:
        vecs = unit_vectors(1500, seed=11)
        system.store_many(
            [{"content": f"bulk {i}", "tenant": "t", "embedding": v} for i, v in enumerate(vecs)], batch_size=1500
        )
        # the tenant's own HNSW index (the only kind since migration 0016); the sync analyzes
        assert [a.action for a in system.sync_vector_indexes()] == ["build"]
        query = unit_vectors(1, seed=12)[0]
        ctx = WorkerContext(
            query=processed("bulk"), embedding=query, shards=(ALL,), limit=60, graph_limit=10, graph_depth=1,
            config=system.config,
        )  # fmt: skip
        with system.db.transaction("t") as conn:
            ((text, params),) = VectorWorker().statements_for(conn, ctx)
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + text, params))
        assert "Index Scan using memories_vec_" in plan, plan  # the graph, not a sort of all 1,500
        hits = run(system, VectorWorker(), processed("bulk"), embedding=query, limit=60)
    assert len(hits) == 60


def test_vector_searches_small_tenants_exactly_and_large_ones_with_hnsw(system, vectors):
    ctx = WorkerContext(
        query=processed("point"),
        embedding=next(iter(vectors.values())),
        shards=(ALL, Shard("fact"), Shard("general"), Shard("episodic")),
        limit=10,
        graph_limit=10,
        graph_depth=1,
        config=system.config,
    )

    def chosen(per_type: int) -> list:
        """Each shard's form, from its statement: sql/workers/vector_exact or vector, its shard filter
        written for the shard it reads (shard_sql); a search split by type (one statement, a UNION ALL
        of typed searches, VectorWorker.split_search), the tuple of its parts' forms."""
        with system.db.transaction("t") as conn:  # tenant t: 20 general, 5 fact, 0 episodic memories
            statements = VectorWorker().statements_for(
                conn, dataclasses.replace(ctx, config=system.config.replace(vector_exact_max_rows=per_type))
            )
        forms = {
            shard_sql(f"workers/{name}", Shard(memory_type)): name
            for name in ("vector_exact", "vector")
            for memory_type in (None, "fact", "general", "episodic")
        }

        def form(text: str, params: dict) -> str:
            name = forms[text]
            assert text == shard_sql(f"workers/{name}", Shard(params["memory_type"]))
            return name.replace("vector_exact", "exact").replace("vector", "hnsw")

        def split(text: str, params: dict) -> tuple:
            parts = text.split("\nUNION ALL\n")
            assert [params[f"memory_type_{k}"] for k in range(len(parts))] == ["fact", "general"]  # sorted
            return tuple("exact" if "cosine_distance(" in part else "hnsw" for part in parts)

        return [form(text, params) if text in forms else split(text, params) for text, params in statements]

    exact, hnsw = "exact", "hnsw"
    # The whole table holds 25 memories of the tenant in 2 types: exact up to 2 x the per-type budget;
    # above it, one search per type the tenant has (in one statement), each as that typed shard chooses.
    assert chosen(13) == [exact, exact, hnsw, exact]
    assert chosen(12) == [(exact, hnsw), exact, hnsw, exact]
    assert chosen(20) == [exact, exact, exact, exact]
    assert chosen(0) == [hnsw, hnsw, hnsw, hnsw]


BM25_POINT = {"terms": ["point"], "types": None, "k1": 1.2, "b": 0.75, "per_term": 2000}


@pytest.mark.parametrize(
    ("name", "table"),
    [("workers/vector_exact", "memories_"), ("workers/vector", "memories_"), ("workers/bm25", "memory_terms_")],
)
def test_a_typed_shard_prunes_partitions_on_a_generic_plan(system, vectors, name, table):
    """shard_sql writes the shard filter so that a cached generic plan reads one partition (executor
    start-up pruning); the whole table's statement has no filter. The same rows as the custom plan."""
    from memoria_pg.db.native import native

    query = next(iter(vectors.values()))
    given = {"embedding": query, "memory_type": "fact", "limit": 10, "tenant": "t", **BM25_POINT}
    with system.db.transaction("t") as conn:
        found = {}
        for mode in ("force_custom_plan", "force_generic_plan"):
            conn.execute("SELECT set_config('plan_cache_mode', %s, true)", (mode,))
            statement = native(shard_sql(name, Shard("fact")), name)
            conn.execute(f"PREPARE typed_{mode} AS {statement.text}")
            args = statement.args(given)
            # EXECUTE's arguments cannot be bound parameters; a client-side cursor quotes them.
            cur = psycopg.ClientCursor(conn)
            placeholders = ", ".join(["%s"] * len(args))
            plan = [
                r[0] for r in cur.execute(f"EXPLAIN (ANALYZE, COSTS OFF) EXECUTE typed_{mode}({placeholders})", args)
            ]
            rows = cur.execute(f"EXECUTE typed_{mode}({placeholders})", args).fetchall()
            found[mode] = [r[0] for r in rows]
            scanned = [line for line in plan if f" on {table}" in line]
            assert len(scanned) == 1 and f"{table}fact" in scanned[0], plan
        assert found["force_custom_plan"] == found["force_generic_plan"] and len(found["force_custom_plan"]) == 5
        assert any("Subplans Removed" in line for line in plan)  # the generic plan pruned at start-up
    assert "%(memory_type)s" not in shard_sql(name, ALL)


@pytest.mark.parametrize("shards", [(ALL,), (Shard("general"), Shard("fact"))])
def test_vector_exact_and_hnsw_searches_agree(system, vectors, shards):
    # every (tenant, type) its own HNSW index (vector_exact_max_rows 0), so the HNSW form walks a graph
    assert {a.action for a in vector_indexes.sync(system.dsn, 0)} == {"build"}
    ids = list(vectors)
    query = vectors[ids[3]] + 0.5 * vectors[ids[11]]
    both = [
        run(
            system,
            VectorWorker(),
            processed("point"),
            embedding=query,
            shards=shards,
            limit=12,
            config=system.config.replace(vector_exact_max_rows=limit),
        )
        for limit in (10**6, 0)
    ]
    assert [h.memory_id for h in both[0]] == [h.memory_id for h in both[1]]  # 25 points: HNSW is exact here
    assert [h.score for h in both[0]] == pytest.approx([h.score for h in both[1]], abs=1e-6)


def test_a_large_tenants_search_splits_by_memory_type_into_parts(system, vectors):
    """VectorWorker.parts deals the memory types (largest first, to the least loaded part) when the
    search costs vector_parallel_min_rows: each type searched exactly costs its memories, one searched
    with HNSW vector_exact_max_rows. Typed shards and small searches stay one statement."""
    ctx = WorkerContext(
        query=processed("point"), embedding=next(iter(vectors.values())), shards=(ALL,), limit=10,
        graph_limit=10, graph_depth=1, config=system.config,
        tenant_rows={"general": 20, "fact": 5, "episodic": 2, "semantic": 0},
    )  # fmt: skip

    def parts(**settings) -> list | None:
        found = VectorWorker().parts(dataclasses.replace(ctx, config=system.config.replace(**settings)))
        if found is None:
            return None
        return [
            ([p[f"memory_type_{k}"] for k in range(text.count("UNION ALL") + 1)], generic)
            for (text, p), generic in found
        ]

    assert parts(vector_parallel_min_rows=27) == [(["general"], True), (["episodic", "fact"], True)]
    assert parts(vector_parallel_min_rows=28) is None  # 27 memories to compare: not worth a second connection
    assert parts(vector_parallel_min_rows=1, vector_parallel_parts=1) is None
    assert parts(vector_parallel_min_rows=1, vector_parallel_parts=5) == [
        (["general"], True), (["fact"], True), (["episodic"], True),
    ]  # fmt: skip
    # above the exact bound (4) fact and general are HNSW searches costing 4 each (ties dealt by name):
    # fact, then general to the other part, then episodic (2 memories, exact) to the first of the two
    assert parts(vector_parallel_min_rows=1, vector_exact_max_rows=4) == [
        (["episodic", "fact"], False),
        (["general"], False),
    ]
    assert VectorWorker().parts(dataclasses.replace(ctx, shards=(Shard("general"),))) is None
    assert VectorWorker().parts(dataclasses.replace(ctx, tenant_rows=None)) is None
    # with cores to spare (WorkerContext.spare_cores) the lower vector_parallel_alone_min_rows applies
    spare = dataclasses.replace(ctx, spare_cores=True)
    for alone, split in ((27, True), (28, False), (0, False)):
        cfg = system.config.replace(vector_parallel_min_rows=10**6, vector_parallel_alone_min_rows=alone)
        assert (VectorWorker().parts(dataclasses.replace(spare, config=cfg)) is not None) == split, alone
        assert VectorWorker().parts(dataclasses.replace(ctx, config=cfg)) is None


@pytest.mark.parametrize("bound", [10**6, 4])  # exact searches; HNSW ones for general and fact
def test_a_split_search_finds_what_one_statement_finds(system, vectors, bound, monkeypatch):
    """Through the query pipeline: the parts run (each its own statement) and their merged hits are the
    vector worker's hits of the unsplit search, in order, with their ranks; the diagnostics know one
    vector source."""
    system.store_many([{"content": f"episode {i}", "tenant": "t", "embedding": v, "memory_type": "episodic"}
                       for i, v in enumerate(unit_vectors(6, seed=5))])  # fmt: skip
    if bound < 10**6:
        vector_indexes.sync(system.dsn, bound)
    calls = []
    run_part = VectorWorker.run_part
    monkeypatch.setattr(
        VectorWorker, "run_part", lambda self, conn, statement: calls.append(1) or run_part(self, conn, statement)
    )
    query = next(iter(vectors.values()))
    found = {}
    for parts in (1, 2):
        cfg = system.config.replace(
            vector_exact_max_rows=bound, vector_parallel_parts=parts, vector_parallel_min_rows=1
        )
        with MemorySystem(cfg, embedder=HashEmbedder()) as s:
            r = s.query("point", tenant="t", embedding=query, ranking=False, workers=["vector"], top_k=10)
            explained = s.explain(r)
        found[parts] = (r.candidates, r.diagnostics)
        assert ("in 2 parts, each on its own connection" in explained) == (parts == 2)  # query --explain shows them
    assert len(calls) == 2  # the split search ran as two parts; the unsplit one ran none
    (one, d1), (two, d2) = found[1], found[2]
    assert [(c.memory_id, c.sources, c.scores) for c in one] == [(c.memory_id, c.sources, c.scores) for c in two]
    assert len(one) == 31 and d1.worker_hits == d2.worker_hits == {"vector": 31}  # every memory a candidate
    assert d2.completed_sources == ["vector"] and set(d2.worker_ms) == {"vector"} and d2.policy_satisfied


# -- BM25 --------------------------------------------------------------------------------------------

VOCABULARY = (
    "apple banana cherry durian elder fig grape honeydew kiwi lemon mango nectarine orange papaya quince"
).split()
K1, B = 1.2, 0.75


def corpus(seed: int, n: int) -> list[str]:
    rnd = random.Random(seed)
    return [
        " ".join([f"doc{seed}x{i}"] + rnd.choices(VOCABULARY[: 6 + i % 10], k=rnd.randint(2, 14))) for i in range(n)
    ]


def reference_bm25(docs: dict[int, str], query: str) -> dict[int, float]:
    """Okapi BM25 with Lucene's IDF, straight from the textbook formula."""
    tokens = {i: tokenize(d) for i, d in docs.items()}
    n = len(docs)
    avgdl = sum(len(t) for t in tokens.values()) / n
    df = Counter(term for t in tokens.values() for term in set(t))
    scores: dict[int, float] = {}
    for i, doc in tokens.items():
        tf = Counter(doc)
        score = 0.0
        for term, qtf in Counter(tokenize(query)).items():
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += qtf * idf * tf[term] * (K1 + 1) / (tf[term] + K1 * (1 - B + B * len(doc) / avgdl))
        if score > 0:
            scores[i] = score
    return scores


@pytest.fixture
def bm25_corpus(system):
    docs = corpus(seed=5, n=30)
    ids = system.store_many(
        [{"content": d, "tenant": "t", "memory_type": "fact" if i % 3 == 0 else "general"} for i, d in enumerate(docs)]
    ).ids
    # Another tenant's documents must not change this tenant's statistics.
    system.store_many([{"content": d, "tenant": "u"} for d in corpus(seed=6, n=20)])
    return dict(zip(ids, docs))


@pytest.mark.parametrize("query", ["mango kiwi", "apple apple durian", "fig", "banana zebra lemon cherry"])
def test_bm25_matches_the_reference_formula(system, bm25_corpus, query):
    expected = reference_bm25(bm25_corpus, query)
    hits = run(system, BM25Worker(), processed(query), limit=100)

    assert {h.memory_id for h in hits} == set(expected)
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.memory_id], rel=1e-6)
    ranked = sorted(expected, key=lambda i: (-expected[i], i))
    assert [h.memory_id for h in hits][:10] == ranked[:10]


def test_bm25_statistics_of_one_shard(system, bm25_corpus):
    fact_docs = {mid: d for n, (mid, d) in enumerate(bm25_corpus.items()) if n % 3 == 0}  # stored as "fact"
    expected = reference_bm25(fact_docs, "mango kiwi")
    hits = run(system, BM25Worker(), processed("mango kiwi"), shards=[Shard("fact")], limit=100)
    assert {h.memory_id: h.score for h in hits} == pytest.approx(expected, rel=1e-6)


def test_bm25_limit_keeps_the_best(system, bm25_corpus):
    expected = reference_bm25(bm25_corpus, "apple banana")
    hits = run(system, BM25Worker(), processed("apple banana"), limit=3)
    assert [h.memory_id for h in hits] == sorted(expected, key=lambda i: (-expected[i], i))[:3]


# -- phrase ------------------------------------------------------------------------------------------


def test_phrase_matches_adjacent_words_in_order(system):
    ids = system.store_many(
        [
            {"content": c, "tenant": "t"}
            for c in (
                "I was in New York today",
                "York is new to me",
                "new york pizza is the best",
                "A new day dawns in York",
                "Newark is near New  York",
            )
        ]
    ).ids
    hits = run(system, PhraseWorker(), processed("trip", phrases=["New York"]))
    assert {h.memory_id for h in hits} == {ids[0], ids[2], ids[4]}
    assert all(h.detail["phrases"] == ["New York"] for h in hits)


def test_a_workers_statement_is_prepared_at_its_first_run(system):
    # A rare worker (phrase, attribute) would otherwise be parsed and planned anew on each pooled
    # connection until psycopg's prepare_threshold (5 runs there): its cold runs cost a plan each.
    system.store_many([{"content": "I was in New York today", "tenant": "t"}])
    query = processed("trip", phrases=["New York"])
    ctx = WorkerContext(
        query=query, embedding=np.zeros(system.config.embedding_dim, dtype=np.float32), shards=(ALL,),
        limit=10, graph_limit=10, graph_depth=1, config=system.config, graph_backend=system.graph_backend,
    )  # fmt: skip
    with system.db.transaction("t") as conn:
        # A new pool (the fixture's): the phrase worker has never run on this connection.
        assert [h.memory_id for h in PhraseWorker().run(conn, ctx)]
        prepared = [r[0] for r in conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()]
    assert any(s.lstrip().startswith("-- Phrase worker") for s in prepared), prepared


def test_phrase_ranks_memories_matching_more_phrases_first(system):
    both, one = system.store_many(
        [
            {"content": "From New York we flew to San Francisco", "tenant": "t"},
            {"content": "New York in the rain", "tenant": "t"},
        ]
    ).ids
    hits = run(system, PhraseWorker(), processed("x", phrases=["New York", "San Francisco"]))
    assert [h.memory_id for h in hits] == [both, one]
    assert hits[0].detail["matched"] == 2


def test_phrase_checks_at_most_phrase_candidates_memories_per_phrase(system):
    """The anchor term's postings are read in impact order (the term in the shortest memories first),
    at most phrase_candidates of them: the longer memories are never checked."""
    fillers = ["", " one", " one two", " one two three", " one two three four"]
    ids = system.store_many([{"content": f"quarterly review{f}", "tenant": "t"} for f in fillers]).ids
    phrase = processed("x", phrases=["quarterly review"])
    assert {h.memory_id for h in run(system, PhraseWorker(), phrase)} == set(ids)
    capped = run(system, PhraseWorker(), phrase, config=system.config.replace(phrase_candidates=2))
    assert {h.memory_id for h in capped} == set(ids[:2])
    assert [
        h.memory_id for h in run(system, PhraseWorker(), phrase, config=system.config.replace(phrase_candidates=2))
    ] == [h.memory_id for h in capped]


def _phrase_rows_to_read(system: MemorySystem, query: ProcessedQuery, shard: Shard) -> list[int]:
    """The memories whose rows the phrase statement reads and checks: its `kept` candidates (the
    statement's CTEs, then a SELECT of that one)."""
    ctx = WorkerContext(
        query=query, embedding=np.zeros(system.config.embedding_dim, dtype=np.float32), shards=(shard,),
        limit=50, graph_limit=50, graph_depth=1, config=system.config, graph_backend=system.graph_backend,
    )  # fmt: skip
    worker = PhraseWorker()
    text = shard_sql(worker.sql_name, shard)
    ctes = text[: text.index("SELECT m.id AS memory_id")]
    with system.db.transaction(query.tenant) as conn:
        rows = conn.execute(ctes + "SELECT memory_id FROM kept ORDER BY memory_id", worker.params(ctx, shard))
        return [r["memory_id"] if isinstance(r, dict) else r[0] for r in rows.fetchall()]


@pytest.mark.parametrize("shard", [ALL, Shard("general")])
def test_phrase_reads_only_the_rows_holding_the_companion_term(system, monkeypatch, shard):
    """The anchor (rarest term) finds six memories; only the three that also hold the phrase's other
    term (its companion) are read and checked, and the matches are those of reading all six."""
    from memoria_pg.query.workers import phrase

    both = ["Wendy Zimmermann joined the board", "a note from Wendy Zimmermann", "Wendy met Zimmermann twice"]
    alone = ["Zimmermann alone here", "Zimmermann again", "the Zimmermann file"]
    wendy = [f"Wendy and item {i}" for i in range(5)]  # the companion is commoner than the anchor
    ids = system.store_many([{"content": c, "tenant": "t"} for c in both + alone + wendy]).ids
    query = processed("x", phrases=["Wendy Zimmermann"])
    matches = {ids[0], ids[1]}  # "Wendy met Zimmermann" holds both words, not the phrase

    assert {h.memory_id for h in run(system, PhraseWorker(), query, shards=(shard,))} == matches
    assert _phrase_rows_to_read(system, query, shard) == sorted(ids[:3])
    monkeypatch.setattr(phrase, "COMPANION_POSTINGS", 0)  # no companion is rare enough: each candidate read
    assert {h.memory_id for h in run(system, PhraseWorker(), query, shards=(shard,))} == matches
    assert _phrase_rows_to_read(system, query, shard) == sorted(ids[:6])


# -- attribute ---------------------------------------------------------------------------------------


def test_attribute_exact_subject_and_attribute_have_distance_zero(system):
    alice, bob, _ = system.store_many(
        [
            {"content": c, "tenant": "t"}
            for c in ("Alice's favourite colour is blue", "Bob's favourite colour is green", "Alice lives in Paris")
        ]
    ).ids
    hits = run(system, AttributeWorker(), processed("x", subject="Alice", attribute="favourite colour"))
    assert [h.memory_id for h in hits] == [alice]
    assert hits[0].score == 0.0
    assert hits[0].detail == {"value": "blue", "current": 1.0}
    assert bob not in {h.memory_id for h in hits}


def test_attribute_near_spelling_matches_with_a_distance(system):
    # The subject matches case-insensitively (an indexable equality under row-level security);
    # the attribute may be spelled differently and then carries a trigram distance.
    alice = system.store("Alice's favourite colour is blue", tenant="t")
    hits = run(system, AttributeWorker(), processed("x", subject="ALICE", attribute="Favourite Colours"))
    assert [h.memory_id for h in hits] == [alice]
    assert 0.0 < hits[0].score < 1.0
    other = run(system, AttributeWorker(), processed("x", subject="Alicia", attribute="favourite colour"))
    assert other == []


def test_attribute_subject_lookup_is_an_index_condition_under_row_level_security(system):
    """lower(subject) = ... could not be one (lower() is not leakproof); the stored subject_lower can."""
    system.store("Alice's favourite colour is blue", tenant="t")
    ctx = WorkerContext(
        query=processed("x", subject="ALICE", attribute="favourite colour"),
        embedding=np.zeros(384, np.float32),
        shards=(ALL,),
        limit=10,
        graph_limit=10,
        graph_depth=1,
        config=system.config,
    )
    with system.db.transaction("t") as conn:
        conn.execute("SET LOCAL enable_seqscan = off")
        [(statement, params)] = AttributeWorker().statements(ctx)
        text = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, params))
    conds = [line for line in text.splitlines() if "Index Cond" in line]
    assert any("subject_lower = 'alice'" in line for line in conds), text


# -- graph -------------------------------------------------------------------------------------------


def test_the_graph_walk_runs_on_generic_plans_for_typed_shards_and_small_tenants(system):
    """Planned each time the walk of a large tenant's whole table was faster than on its generic plan, a
    typed walk and a small tenant's walk slower (GraphWorker.plans_generic); AGE's call keeps custom plans."""
    ctx = WorkerContext(
        query=processed("x"), embedding=np.zeros(384, dtype=np.float32), shards=(ALL,), limit=10,
        graph_limit=10, graph_depth=2, config=system.config,
    )  # fmt: skip
    assert not GraphWorker().plans_generic(ctx)
    assert GraphWorker().plans_generic(dataclasses.replace(ctx, shards=(Shard("fact"), Shard("general"))))
    assert not GraphWorker().plans_generic(dataclasses.replace(ctx, shards=(Shard("fact"), ALL)))
    assert not GraphWorker().plans_generic(dataclasses.replace(ctx, shards=(Shard("fact"),), graph_backend="age"))
    small = {"general": GENERIC_MAX_ROWS - 1, "fact": 1}  # the tenant's memories of every type count
    assert GraphWorker().plans_generic(dataclasses.replace(ctx, tenant_rows=small))
    assert not GraphWorker().plans_generic(dataclasses.replace(ctx, tenant_rows={**small, "fact": 2}))
    assert not GraphWorker().plans_generic(dataclasses.replace(ctx, tenant_rows=small, graph_backend="age"))


@pytest.fixture
def chain(system):
    """Alice - Bob - Carol - Dave, linked by co-occurrence in three memories; Eve stands alone."""
    ids = system.store_many(
        [
            {"content": "first meeting", "tenant": "t", "entities": ["Alice", "Bob"]},
            {"content": "second meeting", "tenant": "t", "entities": ["Bob", "Carol"]},
            {"content": "third meeting", "tenant": "t", "entities": ["Carol", "Dave"]},
            {"content": "tea time", "tenant": "t", "entities": ["Eve"]},
            {"content": "other tenant", "tenant": "u", "entities": ["Alice"]},
        ]
    ).ids
    return ids


@pytest.mark.parametrize("depth, expected_hops", [(1, [1]), (2, [1, 2]), (3, [1, 2, 3])])
def test_graph_depth_bounds_the_walk(system, chain, depth, expected_hops):
    hits = run(system, GraphWorker(), processed("about alice", entities=["Alice"]), graph_depth=depth)
    assert {h.memory_id: h.detail["hops"] for h in hits} == dict(zip(chain, expected_hops))
    assert [h.memory_id for h in hits] == chain[:depth]


def test_graph_entities_match_case_insensitively(system, chain):
    hits = run(system, GraphWorker(), processed("x", entities=["alice", "EVE"]), graph_depth=1)
    assert {h.memory_id for h in hits} == {chain[0], chain[3]}


def graph_rows(system, entities, depth, memory_type=None, limit=50, **bounds) -> list[tuple]:
    """The graph statement's raw rows over the plain tables (sql/workers/graph.sql); on a server with
    the AGE graph, memoria.graph_walk (sql/workers/graph_age.sql) must return the very same rows."""
    rows = {}
    for backend in ("sql", "age") if system.graph_backend == "age" else ("sql",):
        ctx = WorkerContext(
            query=processed("x", tenant="hub", entities=entities),
            embedding=np.zeros(384, np.float32),
            shards=(Shard(memory_type),),
            limit=limit,
            graph_limit=limit,
            graph_depth=depth,
            config=system.config.replace(**bounds),
            graph_backend=backend,
        )
        with system.db.transaction("hub") as conn:
            rows[backend] = [
                tuple(r)
                for statement, params in GraphWorker().statements(ctx)
                for r in conn.execute(statement, params).fetchall()
            ]
    assert rows.get("age", rows["sql"]) == rows["sql"]
    return rows["sql"]


@pytest.fixture
def hub(system):
    """Hub is mentioned by 12 memories (fact and general in turn); Center co-occurs with N1 three times,
    N2 twice, N3 and N4 once (N3 created first), and each N has one memory of its own."""
    records = [
        {"content": f"hub note {i}", "tenant": "hub", "entities": ["Hub"], "memory_type": ("fact", "general")[i % 2]}
        for i in range(12)
    ]
    for name, times in (("N1", 3), ("N2", 2), ("N3", 1), ("N4", 1)):
        records += [
            {"content": f"center with {name} {i}", "tenant": "hub", "entities": ["Center", name]} for i in range(times)
        ]
    records += [{"content": f"only {name}", "tenant": "hub", "entities": [name]} for name in ("N1", "N2", "N3", "N4")]
    ids = system.store_many(records, batch_size=len(records)).ids
    return {"hub": ids[:12], "center": ids[12:19], "only": dict(zip(("N1", "N2", "N3", "N4"), ids[19:]))}


def test_graph_offers_the_most_recent_memories_of_each_entity(system, hub):
    """An entity with more memories than graph_entity_memories offers that many, the most recent first,
    whatever the limit; a typed walk takes the most recent of that type."""
    unbounded = graph_rows(system, ["Hub"], 1)
    assert [r[0] for r in unbounded] == sorted(hub["hub"], reverse=True)  # hops, hits, then most recent
    rows = graph_rows(system, ["Hub"], 1, graph_entity_memories=5)
    assert [r[0] for r in rows] == sorted(hub["hub"], reverse=True)[:5]
    assert all(r[2:] == (1, 1) for r in rows)
    assert graph_rows(system, ["Hub"], 1, graph_entity_memories=5) == rows  # deterministic
    assert [r[0] for r in graph_rows(system, ["Hub"], 1, graph_entity_memories=5, limit=3)] == [r[0] for r in rows[:3]]
    facts = [r[0] for r in graph_rows(system, ["Hub"], 1, memory_type="fact", graph_entity_memories=4)]
    assert facts == sorted(hub["hub"][0::2], reverse=True)[:4]


def hub_walk(system, *, depth: int, limit: int, backend: str, **bounds) -> WorkerContext:
    """An untyped graph walk from Hub, as the worker gets it."""
    return WorkerContext(
        query=processed("x", tenant="hub", entities=["Hub"]),
        embedding=np.zeros(384, np.float32),
        shards=(ALL,),
        limit=limit,
        graph_limit=limit,
        graph_depth=depth,
        config=system.config.replace(**bounds),
        graph_backend=backend,
    )


def test_an_untyped_walk_reads_only_the_memories_an_entity_offers(system, hub):
    """The mentions step of an untyped walk reads graph_entity_memories index entries per reached entity
    (the primary key, INCLUDE memory_type: migration 0019), not that many per memory type: Hub's 12
    memories are facts and generals, so a read per type took 5 + 5 entries to offer 5."""
    ctx = hub_walk(system, depth=1, limit=50, backend="sql", graph_entity_memories=5)

    def read(node: dict) -> int:
        own = node["Actual Rows"] * node["Actual Loops"] if node.get("Relation Name") == "memory_entities" else 0
        return own + sum(read(child) for child in node.get("Plans", ()))

    with system.db.transaction("hub") as conn:
        params = GraphWorker().params(ctx, ALL)
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + GraphWorker().sql(ctx), params).fetchone()[0]
        rows = conn.execute(GraphWorker().sql(ctx), params).fetchall()
    assert [r[0] for r in rows] == sorted(hub["hub"], reverse=True)[:5]
    assert read(plan[0]["Plan"]) == 5


def test_pooled_connections_run_without_jit(system, hub):
    """JIT compilation cost 300 ms for a graph walk of 2 ms on a fresh database (estimates multiply)."""
    ctx = hub_walk(system, depth=2, limit=10, backend=system.graph_backend)
    with system.db.transaction("hub") as conn:
        assert conn.execute("SELECT current_setting('jit')").fetchone()[0] == "off"
        conn.execute("SET LOCAL jit_above_cost = 0")  # any statement would be compiled if JIT were on
        plan = "\n".join(
            r[0] for r in conn.execute("EXPLAIN (ANALYZE) " + GraphWorker().sql(ctx), GraphWorker().params(ctx, ALL))
        )
    assert "JIT:" not in plan, plan


def test_graph_follows_the_strongest_edges_first(system, hub):
    """Each frontier entity follows graph_fanout edges: weight desc, then entity id (N3 before N4)."""

    def reached(fanout):
        rows = graph_rows(system, ["Center"], 2, graph_fanout=fanout)
        assert {r[0] for r in rows if r[2] == 1} == set(hub["center"])  # the seed's own memories
        return {name for name, memory_id in hub["only"].items() if (memory_id, "general", 2, 1) in rows}

    assert reached(1) == {"N1"}
    assert reached(2) == {"N1", "N2"}
    assert reached(3) == {"N1", "N2", "N3"}
    assert reached(10) == {"N1", "N2", "N3", "N4"}
    # a memory's entity_hits counts the reached entities that offered it: "center with N2" mentions
    # Center and N2, both reached with fanout 2, and only Center with fanout 1
    both = {r[0]: r[3] for r in graph_rows(system, ["Center"], 2, graph_fanout=2)}
    one = {r[0]: r[3] for r in graph_rows(system, ["Center"], 2, graph_fanout=1)}
    n2 = hub["center"][3]
    assert (both[n2], one[n2]) == (2, 1)


# -- fusion ------------------------------------------------------------------------------------------


@pytest.fixture
def fusion_corpus(system):
    """`lexical` shares the query's words, `semantic` the query's vector; fillers have neither."""
    vecs = unit_vectors(32, seed=21)
    records = [
        {"content": "zebra quartz zebra", "tenant": "t", "embedding": vecs[0]},
        {"content": "unrelated words entirely", "tenant": "t", "embedding": vecs[1]},
    ]
    records += [
        {"content": f"filler {i} zebra" if i % 4 == 0 else f"filler {i}", "tenant": "t", "embedding": vecs[i + 2]}
        for i in range(30)
    ]
    ids = system.store_many(records).ids
    return {"lexical": ids[0], "semantic": ids[1], "query_vector": vecs[1]}


def test_fusion_returns_ids_from_both_sources(system, fusion_corpus):
    hits = run(system, FusionWorker(), processed("zebra quartz"), embedding=fusion_corpus["query_vector"])
    by_id = {h.memory_id: h for h in hits}
    assert by_id[fusion_corpus["lexical"]].detail["bm25_rank"] == 1
    assert by_id[fusion_corpus["semantic"]].detail["vector_rank"] == 1
    assert by_id[fusion_corpus["semantic"]].detail["bm25_rank"] is None


def test_fusion_with_weight_one_is_vector_order(system, fusion_corpus):
    cfg = system.config.replace(fusion_semantic_weight=1.0)
    query = processed("zebra quartz")
    fused = run(system, FusionWorker(), query, embedding=fusion_corpus["query_vector"], config=cfg)
    vector = run(system, VectorWorker(), query, embedding=fusion_corpus["query_vector"], limit=FUSION_DEPTH)
    semantic = [h.memory_id for h in fused if h.detail["vector_rank"] is not None]
    assert semantic == [h.memory_id for h in vector]
    assert fused[: len(semantic)] == [h for h in fused if h.memory_id in set(semantic)]
    assert all(h.score == 0 for h in fused if h.detail["vector_rank"] is None)


def test_fusion_with_weight_zero_is_bm25_order(system, fusion_corpus):
    cfg = system.config.replace(fusion_semantic_weight=0.0)
    query = processed("zebra quartz")
    fused = run(system, FusionWorker(), query, embedding=fusion_corpus["query_vector"], config=cfg)
    lexical = run(system, BM25Worker(), query, limit=FUSION_DEPTH)
    assert [h.memory_id for h in fused if h.detail["bm25_rank"] is not None] == [h.memory_id for h in lexical]
    assert fused[0].memory_id == fusion_corpus["lexical"]


# -- hostile input -----------------------------------------------------------------------------------

NASTY = [
    "O'Brien's \"quoted\" name",
    "'; DROP TABLE memoria.memories; --",
    "Robert'); DELETE FROM memoria.entities; --",
    "$$ dollar $$ quoting $body$",
    "back\\slash \\' \\\\ escapes",
    "{braces} {vector} {0} {bm25}",
    "semi;colon;separated",
    "%s %(limit)s %% percent",
    "Zoë Ünïcödé 東京 🚀",
    "tab\tand newline\nsplit",
]


@pytest.mark.parametrize("text", NASTY)
def test_metacharacters_are_plain_data_to_every_worker(system, dsn, text):
    memory_id = system.store(f"note: {text}", tenant="t", entities=[text], attributes=[[text, text, text]])
    system.store("an ordinary memory", tenant="t")
    query = processed(text, entities=[text], phrases=[text], subject=text, attribute=text)

    found = {name: {h.memory_id for h in run(system, cls(), query)} for name, cls in WORKERS.items()}

    assert memory_id in found["vector"]
    assert memory_id in found["phrase"]
    assert memory_id in found["attribute"]
    assert memory_id in found["graph"]
    assert memory_id in found["bm25"] and memory_id in found["fusion"]
    response = system.query(text, tenant="t", workers=list(WORKERS))
    assert not response.diagnostics.failed_sources, response.diagnostics.worker_errors
    assert memory_id in {c.memory_id for c in response.candidates}
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM memoria.entities").fetchone()[0] >= 1
