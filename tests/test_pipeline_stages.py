"""The stages around the retrieval boundary: relevance fast path, expansion, cross-encoder, plugins."""

from __future__ import annotations

import numpy as np
import pytest

from memoria_pg.config import Config
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.core.types import Route
from memoria_pg.plugins import PluginRegistry
from memoria_pg.system import MemorySystem

PREFS = [
    "Nina prefers window seats on trains.",
    "Nina likes her tea without milk.",
    "Nina prefers dark mode in every editor.",
    "Nina likes jazz more than rock.",
]
GENERAL = [
    "Nina visited the harbour on Monday.",
    "The harbour has a new ferry terminal.",
    "Nina's sister Ola moved to Oslo.",
    "Ola works as a nurse in Oslo.",
]


@pytest.fixture
def loaded(system: MemorySystem) -> MemorySystem:
    system.store_many(
        [{"content": c, "tenant": "t", "memory_type": "preference"} for c in PREFS]
        + [{"content": c, "tenant": "t"} for c in GENERAL]
    )
    return system


def test_relevance_fast_path_skips_workers_when_pool_has_top_k(loaded: MemorySystem):
    response = loaded.query("what does Nina prefer", tenant="t", memory_type="preference", top_k=3)
    d = response.diagnostics
    assert d.relevance_fast_path and d.relevance_pool_count == 4
    assert d.submitted_sources == [] and d.retrieval_finish_reason == "relevance_fast_path"
    assert {m.content for m in response.memories} <= set(PREFS)
    assert all(m.sources == ["relevance"] for m in response.memories)


def test_relevance_pool_too_small_runs_workers(loaded: MemorySystem):
    response = loaded.query("what does Nina prefer", tenant="t", memory_type="preference", top_k=10)
    d = response.diagnostics
    assert not d.relevance_fast_path and d.relevance_pool_count == 4
    assert "vector" in d.submitted_sources
    # The pool's ids are candidates next to the workers' hits.
    assert any("relevance" in c.sources for c in response.candidates)


def test_a_large_types_pool_is_its_pinned_and_important_memories(system: MemorySystem):
    """Beyond small_pool (3 x top_k) memories of the type, the pool is the pinned ones and those of
    importance >= 0.9, an importance stored as 0.9 included (it is a real: 0.9 as a double is above it),
    pinned first, nearest first; below it, every memory of the type."""
    filler = [
        {"content": f"Nina note {i}", "tenant": "t", "memory_type": "preference", "importance": 0.89} for i in range(12)
    ]
    chosen = [
        {"content": "Nina pinned note", "tenant": "t", "memory_type": "preference", "pinned": True, "importance": 0.1},
        {"content": "Nina important note", "tenant": "t", "memory_type": "preference", "importance": 0.9},
        {"content": "Nina very important note", "tenant": "t", "memory_type": "preference", "importance": 1.0},
    ]
    system.store_many(filler + chosen)
    big = system.query("Nina note", tenant="t", memory_type="preference", top_k=2, ranking=False)
    pool = [c for c in big.candidates if "relevance" in c.sources]
    assert big.diagnostics.relevance_pool_count == 3
    assert {c.content for c in pool} == {r["content"] for r in chosen}
    small = system.query("Nina note", tenant="t", memory_type="preference", top_k=5, ranking=False)
    assert small.diagnostics.relevance_pool_count == 15  # 15 memories <= 3 x 5: all of them


def test_general_queries_have_no_relevance_pool(loaded: MemorySystem):
    response = loaded.query("harbour ferry", tenant="t", top_k=3)
    assert response.diagnostics.relevance_pool_count == 0


def test_query_expansion_keeps_both_token_sets_and_feeds_bm25(config: Config):
    with MemorySystem(config.replace(enable_query_expansion=True), embedder=HashEmbedder()) as system:
        system.store_many(
            [
                {"content": "Ola is employed as a nurse; her occupation is demanding.", "tenant": "t"},
                {"content": "The weather was cold.", "tenant": "t"},
            ]
        )
        response = system.query("Ola job", tenant="t", workers=["bm25"], ranking=False)
    meta = response.query.metadata
    assert meta["original_tokens"] == ["ola", "job"]
    assert "occup" in meta["expanded_tokens"] and "job" in meta["expanded_tokens"]  # Snowball: occupation -> occup
    top = response.memories[0]
    assert "occupation" in top.content and top.scores["bm25"] > 0


def _tiny_cross_encoder(path) -> str:
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    words = sorted(
        {w.strip(".,;'").lower() for text in PREFS + GENERAL + ["what does nina prefer"] for w in text.split()}
    )
    vocab = path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = BertTokenizer(str(vocab))
    torch.manual_seed(7)
    model = BertForSequenceClassification(
        BertConfig(
            vocab_size=len(words) + 5,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
            num_labels=1,
        )
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_cross_encoder_reorders_top_n_ahead_of_the_rest(config: Config, tmp_path):
    from sentence_transformers import CrossEncoder

    model_path = _tiny_cross_encoder(tmp_path)
    cfg = config.replace(
        enable_cross_encoder=True, cross_encoder_model=model_path, cross_encoder_top_n=4, enable_relevance_pool=False
    )
    with MemorySystem(cfg, embedder=HashEmbedder()) as system:
        system.store_many([{"content": c, "tenant": "t"} for c in PREFS + GENERAL])
        response = system.query("what does Nina prefer", tenant="t", ranking=False, top_k=8)
    assert response.diagnostics.cross_encoder_applied
    reranked = [c for c in response.candidates if "cross_encoder" in c.scores]
    assert len(reranked) == 4
    assert response.candidates[:4] == reranked  # reranked candidates come first
    expected = CrossEncoder(model_path).predict([(response.query.normalized, c.content) for c in reranked])
    np.testing.assert_allclose([c.scores["cross_encoder"] for c in reranked], expected, rtol=1e-4, atol=1e-5)
    assert list(np.argsort(-np.asarray(expected), kind="stable")) == [0, 1, 2, 3]
    assert [c.base_score for c in reranked] == [c.scores["cross_encoder"] for c in reranked]


def test_cross_encoder_path_must_exist(config: Config):
    from memoria_pg.errors import ConfigError

    cfg = config.replace(enable_cross_encoder=True, cross_encoder_model="/nonexistent/model")
    with MemorySystem(cfg, embedder=HashEmbedder()) as system:
        system.store("Nina likes jazz.", tenant="t")
        with pytest.raises(ConfigError, match="not a directory"):
            system.query("jazz", tenant="t")


def test_post_routing_plugin_changes_the_route(config: Config):
    registry = PluginRegistry()

    @registry.register_post_routing
    def vector_only(query, route):
        return Route("plugin", ("vector",), route.graph_depth, route.signals, route.pool, route.fallback_pools)

    with MemorySystem(config, embedder=HashEmbedder(), plugins=registry) as system:
        system.store("Nina likes jazz.", tenant="t")
        response = system.query("does Nina like jazz", tenant="t")
    assert response.diagnostics.route == "plugin"
    assert response.diagnostics.submitted_sources == ["vector"]


def test_plugins_load_from_configuration(config: Config):
    cfg = config.replace(plugins="tests.plugin_example:register")
    with MemorySystem(cfg, embedder=HashEmbedder()) as system:
        system.store("Nina likes jazz.", tenant="t")
        response = system.query("does Nina like jazz", tenant="t")
    assert response.diagnostics.route == "example-keywords-only"
    assert set(response.diagnostics.submitted_sources) <= {"vector", "bm25"}


def test_the_relevance_pool_runs_on_its_cached_generic_plan(loaded: MemorySystem, monkeypatch):
    """Its statement prunes partitions by a value the generic plan prunes at executor start-up; planning it
    at each query cost more than running it: its transaction asks for generic plans, and gets them."""
    from memoria_pg.query import pipeline, relevance

    opened: list[dict] = []

    class Recording:
        def __init__(self, db):  # type: ignore[no-untyped-def]
            self.db = db

        def transaction(self, tenant, **options):  # type: ignore[no-untyped-def]
            opened.append(options)
            return self.db.transaction(tenant, **options)

    def recorded(db, *args, **kwargs):  # type: ignore[no-untyped-def]
        return relevance.relevance_pool(Recording(db), *args, **kwargs)

    monkeypatch.setattr(pipeline, "relevance_pool", recorded)
    response = loaded.query("what does Nina prefer", tenant="t", memory_type="preference", top_k=10)
    assert response.diagnostics.relevance_pool_count == 4
    assert [options.get("generic_plans") for options in opened] == [True]
    with loaded.db.transaction("t", generic_plans=True) as conn:
        assert conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0] == "force_generic_plan"
