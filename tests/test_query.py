"""The query path end to end on a real server: submission preconditions, shards, V3 fallback,
diagnostics, tenants and persisted traces."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.core.types import Route, Shard
from memoria_pg.errors import InputError
from memoria_pg.query.processor import TableLookup
from memoria_pg.query.shards import ALL, per_shard_limit, populated, select_shards, tenant_rows
from memoria_pg.system import MemoryRecord, MemorySystem

ALL_WORKERS = ["vector", "bm25", "fusion", "graph", "phrase", "attribute"]
SPEC_DIAGNOSTICS = (
    "candidate_count",
    "returned_count",
    "query_processing_ms",
    "embedding_ms",
    "retrieval_ms",
    "database_ms",
    "ranking_ms",
    "response_ms",
    "total_ms",
    "retrieval_policy",
    "retrieval_finish_reason",
    "completed_task_count",
    "pending_task_count",
    "failed_task_count",
    "retrieval_wait_ms",
    "submitted_sources",
    "completed_sources",
    "pending_sources",
    "failed_sources",
    "ranking_skipped",
)


@pytest.fixture
def loaded(system):
    system.store_many(
        [
            {"content": c, "tenant": "t"}
            for c in (
                "Alice's favourite colour is blue",
                "Alice and Bob walked through New York in the snow",
                "Bob lives in Paris",
                "the weather was mild and sunny",
            )
        ]
    )
    return system


def submitted(system, text: str, **kw) -> list[str]:
    return system.query(text, tenant="t", workers=ALL_WORKERS, **kw).diagnostics.submitted_sources


# -- submission preconditions ------------------------------------------------------------------------


def test_plain_query_submits_only_vector_and_lexical_sources(loaded):
    assert submitted(loaded, "mild sunny weather") == ["vector", "bm25", "fusion"]


def test_entities_submit_graph(loaded):
    assert submitted(loaded, "Tell me about Bob") == ["vector", "bm25", "fusion", "graph"]


def test_known_entities_are_recognised_in_lower_case(loaded):
    response = loaded.query("tell me about bob", tenant="t", workers=ALL_WORKERS)
    assert "Bob" in response.query.entities
    assert "graph" in response.diagnostics.submitted_sources


def test_phrases_submit_phrase(loaded):
    sources = submitted(loaded, 'anything about "New York" snow')
    assert "phrase" in sources and "graph" in sources and "attribute" not in sources


def test_subject_and_attribute_submit_attribute(loaded):
    response = loaded.query("What is Alice's favourite colour?", tenant="t", workers=ALL_WORKERS)
    assert (response.query.subject, response.query.attribute) == ("Alice", "favourite colour")
    assert "attribute" in response.diagnostics.submitted_sources
    assert response.memories[0].content == "Alice's favourite colour is blue"
    assert response.memories[0].scores["attribute_distance"] == 0.0


def test_disabled_sources_are_not_submitted(config):
    cfg = config.replace(enable_graph=False, enable_phrase_index=False, enable_fusion=False)
    with MemorySystem(cfg, embedder=HashEmbedder()) as system:
        system.store("Alice visited New York", tenant="t")
        response = system.query('What is Alice\'s favourite "New York" bar?', tenant="t", workers=ALL_WORKERS)
    q = response.query
    assert q.entities and q.phrases and q.subject and q.attribute  # every precondition holds
    assert response.diagnostics.submitted_sources == ["vector", "bm25", "attribute"]


def test_explicit_workers_replace_the_route(loaded):
    d = loaded.query("Tell me about Bob", tenant="t", workers=["bm25"]).diagnostics
    assert d.submitted_sources == ["bm25"] and d.completed_sources == ["bm25"]


# -- shards ------------------------------------------------------------------------------------------


def test_per_shard_limit_divides_and_rounds_up():
    assert per_shard_limit(50, (ALL,)) == 50
    assert per_shard_limit(50, (Shard("a"), Shard("b"))) == 25
    assert per_shard_limit(51, (Shard("a"), Shard("b"))) == 26
    assert per_shard_limit(1, (Shard("a"), Shard("b"), Shard("c"))) == 1
    assert per_shard_limit(10, ()) == 10


def test_select_shards():
    known = ("general", "episodic", "fact", "semantic")
    episodic = Route("episodic", ("vector",), pool="episodic", fallback_pools=("general",))
    assert select_shards(episodic, "episodic", known, sharding=True) == (Shard("episodic"), Shard("general"))
    assert select_shards(episodic, "episodic", known, sharding=False) == (ALL,)
    general = Route("general", ("vector",))
    assert select_shards(general, None, known, sharding=True) == (ALL,)
    assert select_shards(general, "fact", known, sharding=True) == (Shard("fact"),)
    unknown = Route("x", ("vector",), pool="missing", fallback_pools=("missing_too",))
    assert select_shards(unknown, "missing", known, sharding=True) == (ALL,)


def test_populated_drops_the_tenants_empty_shards():
    shards = (Shard("episodic"), Shard("general"))
    assert populated(shards, {"episodic": 3, "general": 5}) == shards
    assert populated(shards, {"episodic": 0, "general": 5, "fact": 2}) == (Shard("general"),)
    assert populated(shards, {"fact": 2}) == (ALL,)  # none of them: the whole table, not nothing
    assert populated((ALL,), {}) == (ALL,)


def test_typed_query_reads_its_shards(system):
    vec = np.random.default_rng(4).normal(size=384).astype(np.float32)
    procedural = system.store("press the red button", tenant="t", memory_type="procedural", embedding=vec)
    general = system.store("the button was red", tenant="t", embedding=vec * 0.9 + 0.01)
    episodic = system.store("I pressed the red button", tenant="t", memory_type="episodic", embedding=vec * 0.8)

    typed = system.query("red button", tenant="t", memory_type="episodic", embedding=vec, workers=["vector"])
    assert typed.diagnostics.shards == ["episodic", "general"]
    assert typed.diagnostics.worker_hits["vector"] == 2  # both shards read, not the procedural one
    assert [c.memory_id for c in typed.candidates] == [episodic]  # then the type filter keeps the hinted type
    assert general not in {c.memory_id for c in typed.candidates}

    untyped = system.query("red button", tenant="t", embedding=vec, workers=["vector"])
    assert untyped.diagnostics.shards == ["*"]
    assert {c.memory_id for c in untyped.candidates} == {procedural, general, episodic}


def test_typed_query_gives_the_limit_to_shards_the_tenant_uses(config):
    # Episodic route (episodic pool, general fallback) for a tenant with general memories only: the
    # worker limit goes to the general shard alone instead of half of it to an empty shard.
    vec = np.random.default_rng(5).normal(size=384).astype(np.float32)
    with MemorySystem(config.replace(worker_limit=4), embedder=HashEmbedder()) as system:
        system.store_many(
            MemoryRecord(f"note {i} about the garden", tenant="t", embedding=vec + i * 0.01) for i in range(6)
        )
        system.store("an episode of another tenant", tenant="u", memory_type="episodic", embedding=vec)
        typed = system.query("garden", tenant="t", memory_type="episodic", embedding=vec, workers=["vector"])
        assert typed.diagnostics.shards == ["general"]
        assert typed.diagnostics.worker_hits == {"vector": 4}
        # No memory of the hinted type or its fallbacks: the whole table rather than nothing.
        system.store("press the red button", tenant="p", memory_type="procedural", embedding=vec)
        fact = system.query("red button", tenant="p", memory_type="fact", embedding=vec, workers=["vector"])
        assert fact.diagnostics.shards == ["*"]
        assert [c.memory_type for c in fact.candidates] == ["procedural"]


def test_the_entity_lookup_reads_the_shard_sizes_in_the_same_statement(config):
    # sql/query_lookup.sql: one statement gives the known entities and the tenant's memories per type;
    # a query with nothing to look up (stopwords only) reads the sizes alone (sql/tenant_rows.sql).
    vec = np.random.default_rng(6).normal(size=384).astype(np.float32)
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        system.store("Alice planted tulips", tenant="t", embedding=vec)
        system.store("Alice pressed the button", tenant="t", memory_type="procedural", embedding=vec)
        system.store("Bob met Carol", tenant="u", memory_type="episodic", embedding=vec)
        with system.db.transaction("t") as conn:
            lookup = TableLookup(conn)
            assert lookup.rows is None
            assert lookup(["alice", "tulips", "bob"]) == ["Alice"]  # tenant u's Bob is not t's
            assert lookup.rows == tenant_rows(conn) == {"general": 1, "procedural": 1}
            empty = TableLookup(conn)
            assert empty([]) == [] and empty.rows is None  # no statement
        for text in ("Alice", "what is it"):  # n-grams to look up; stopwords only
            typed = system.query(text, tenant="t", memory_type="procedural", embedding=vec, ranking=False)
            assert typed.diagnostics.shards == ["procedural", "general"]  # the sizes: tenant t's
            assert [c.memory_type for c in typed.candidates] == ["procedural"]
            v3 = system.query(text, tenant="t", embedding=vec, v4=False, ranking=False)
            assert sorted(c.memory_type for c in v3.candidates) == ["general", "procedural"]


def test_sharding_disabled_reads_the_whole_table(config):
    with MemorySystem(config.replace(enable_sharding=False), embedder=HashEmbedder()) as system:
        system.store("press the red button", tenant="t", memory_type="procedural")
        response = system.query("red button", tenant="t", memory_type="episodic", workers=["vector"])
    assert response.diagnostics.shards == ["*"]
    assert response.candidates[0].memory_type == "procedural"


# -- V4 and V3 diagnostics ---------------------------------------------------------------------------


def test_v4_diagnostics_carry_every_spec_field(loaded):
    response = loaded.query("Bob lives where", tenant="t")
    d = response.diagnostics.as_dict()
    assert set(SPEC_DIAGNOSTICS) <= set(d)
    assert d["path"] == "v4"
    assert d["retrieval_policy"] == "all_submitted_required_vector"
    assert d["retrieval_finish_reason"] == "all_completed" and d["policy_satisfied"] is True
    assert d["completed_sources"] == d["submitted_sources"] and d["completed_task_count"] == len(d["submitted_sources"])
    assert d["pending_sources"] == d["failed_sources"] == []
    assert d["returned_count"] == len(response.memories) <= d["candidate_count"]
    assert d["total_ms"] >= d["retrieval_ms"] > 0


def test_v3_diagnostics_have_no_scheduler_state(loaded):
    response = loaded.query("Bob lives in Paris", tenant="t", v4=False)
    d = response.diagnostics
    assert d.path == "v3"
    assert d.submitted_sources == ["vector"] and d.completed_sources == ["vector"]
    assert d.retrieval_policy is None and d.retrieval_finish_reason is None
    assert d.pending_sources == [] and d.failed_sources == []
    assert d.pending_task_count == d.failed_task_count == 0
    assert response.route is None
    assert all(c.sources == ["vector"] for c in response.candidates)
    assert response.memories[0].content == "Bob lives in Paris"


def test_retrieval_only_orders_by_retrieval_score(loaded):
    response = loaded.query("Alice Bob", tenant="t", ranking=False)
    assert response.diagnostics.ranking_skipped
    scores = [m.final_score for m in response.memories]
    assert scores == sorted(scores, reverse=True)


def test_clearing_access_statistics_counts_no_earlier_query_again(loaded, dsn):
    """clear_access_statistics removes the tenant's counts, those of queries that returned just before
    it included (their writes ended after them: it waits for those first), and no other tenant's."""
    for _ in range(3):
        loaded.query("Bob lives in Paris", tenant="t", top_k=2)
    loaded.query("anything", tenant="other", top_k=2)
    assert loaded.clear_access_statistics("t") >= 1
    assert loaded.settle(5)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tenant, count(*) FROM memoria.memory_access GROUP BY tenant").fetchall()
    assert "t" not in dict(rows)
    assert loaded.clear_access_statistics("t") == 0


def test_ranked_query_records_access(loaded, dsn):
    response = loaded.query("Bob lives in Paris", tenant="t", top_k=1)
    assert loaded.settle(5)  # the query did not wait for its access-statistics write (write-behind)
    with psycopg.connect(dsn) as conn:
        count, accessed = conn.execute(
            "SELECT access_count, last_accessed_at IS NOT NULL FROM memoria.memory_access WHERE memory_id = %s",
            (response.memories[0].memory_id,),
        ).fetchone()
        assert (count, accessed) == (1, True)
        # The memories themselves are not updated (their shards stay all-visible for index-only scans).
        assert conn.execute(
            "SELECT xmin = (SELECT xmin FROM memoria.memories WHERE id = %s) FROM memoria.memories WHERE id = %s",
            (response.memories[0].memory_id,) * 2,
        ).fetchone()[0]
    again = loaded.query("Bob lives in Paris", tenant="t", top_k=1)
    assert again.memories[0].memory_id == response.memories[0].memory_id
    assert again.candidates[0].access_count == 1  # read back by the final CTE


def transaction_options(monkeypatch) -> list[dict]:
    """The keyword options of every Database.transaction opened from now on, in order."""
    from memoria_pg.db import database

    seen: list[dict] = []
    transaction = database.Database.transaction

    def recording(self, tenant, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs)
        return transaction(self, tenant, **kwargs)

    monkeypatch.setattr(database.Database, "transaction", recording)
    return seen


def test_the_access_statistics_commit_asynchronously(loaded, dsn, monkeypatch):
    """The ranked query's access upsert does not wait for a WAL flush (best effort: a crash may lose
    the last fraction of a second of counts); the setting is the transaction's own."""
    seen = transaction_options(monkeypatch)
    loaded.query("Bob lives in Paris", tenant="t", top_k=1)
    asked = [options.get("synchronous_commit", True) for options in seen]
    assert asked[-1] is False and not any(v is False for v in asked[:-1])  # the access write alone
    monkeypatch.undo()
    with loaded.db.transaction("t", synchronous_commit=False) as conn:
        assert conn.execute("SELECT current_setting('synchronous_commit')").fetchone()[0] == "off"
    with loaded.db.transaction("t") as conn:
        assert conn.execute("SELECT current_setting('synchronous_commit')").fetchone()[0] == "on"


def test_a_ranked_querys_own_transactions_run_on_generic_plans(loaded, monkeypatch):
    """Processing (the entity lookup), the final CTE and the access write read or write no partition
    they could prune by a value: they run on cached generic plans (planning them each time cost as much
    as running them); the worker transactions set their own mode (tests/test_scheduler.py)."""
    seen = transaction_options(monkeypatch)
    response = loaded.query("Bob lives in Paris", tenant="t", top_k=1)
    assert response.memories and response.diagnostics.access_error is None
    assert [options.get("generic_plans", False) for options in seen] == [
        True,
        True,
        True,
    ]  # processing, the final CTE, the access write


# -- tenants and input -------------------------------------------------------------------------------


def test_query_sees_only_its_tenant(system):
    system.store_many(
        [{"content": "the vault code is 1234", "tenant": "a"}, {"content": "the vault code is 9876", "tenant": "b"}]
    )
    for tenant, digits in (("a", "1234"), ("b", "9876")):
        response = system.query("vault code", tenant=tenant, workers=ALL_WORKERS)
        assert [m.content for m in response.candidates] == [f"the vault code is {digits}"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"memory_type": "nope"}, "unknown memory_type"),
        ({"embedding": [0.1] * 3}, "query embedding has shape"),
    ],
)
def test_invalid_query_arguments(loaded, kwargs, message):
    with pytest.raises(InputError, match=message):
        loaded.query("anything", tenant="t", **kwargs)


@pytest.mark.parametrize("text", ["", "   ", "nul\x00byte"])
def test_invalid_query_text(loaded, text):
    with pytest.raises(InputError):
        loaded.query(text, tenant="t")


# -- traces ------------------------------------------------------------------------------------------


def test_trace_persists_candidates_with_sources_and_scores(loaded, dsn):
    response = loaded.query("What is Alice's favourite colour?", tenant="t", trace=True)
    trace_id = response.diagnostics.trace_id
    assert trace_id is not None

    with loaded.db.transaction("t") as conn:
        rows = conn.execute(
            "SELECT rank, memory_id, sources, scores, returned FROM memoria.query_trace_candidates "
            "WHERE trace_id = %s ORDER BY rank",
            (trace_id,),
        ).fetchall()
        query, diagnostics = conn.execute(
            "SELECT query, diagnostics FROM memoria.query_traces WHERE id = %s", (trace_id,)
        ).fetchone()
    assert query == "What is Alice's favourite colour?"
    assert diagnostics["candidate_count"] == response.diagnostics.candidate_count
    assert [r[1] for r in rows] == [c.memory_id for c in response.candidates]
    assert all(r[2] for r in rows)
    by_id = {r[1]: r for r in rows}
    top = by_id[response.memories[0].memory_id]
    assert "attribute" in top[2] and top[3]["attribute_distance"] == 0.0
    assert {r[1] for r in rows if r[4]} == {m.memory_id for m in response.memories}

    with loaded.db.transaction("someone-else") as conn:
        assert conn.execute("SELECT count(*) FROM memoria.query_trace_candidates").fetchone()[0] == 0
    with psycopg.connect(dsn) as conn:  # the superuser sees them too
        assert conn.execute(
            "SELECT count(*) FROM memoria.query_trace_candidates WHERE trace_id = %s", (trace_id,)
        ).fetchone()[0] == len(rows)


def test_untraced_query_writes_no_trace(loaded, dsn):
    assert loaded.query("Bob", tenant="t").diagnostics.trace_id is None
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memoria.query_traces").fetchone()[0] == 0
