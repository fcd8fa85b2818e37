"""Migration 0021 under data: the BM25 terms become Snowball English stems. Every memory's postings,
document frequencies and lengths are derived again from its stored content and context, so that they
are what ingestion writes with the tokenizer of each side: at head exactly what a fresh ingest of the
same memories writes, at 0020 exactly what the light plural stemmer (the tokenizer before) gives; and
a query's BM25 answer at head finds a memory by another form of its words."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem
from memoria_pg.core.text import indexed_term_counts
from memoria_pg.db import migrate

MIGRATION = Path(__file__).resolve().parents[1] / "migrations" / "versions" / "0021_bm25_snowball_stems.py"
RECORDS = [
    {"content": "Melanie painted a sunrise over the lake last summer.", "tenant": "acme", "memory_type": "episodic"},
    {"content": "She loves hiking with her dogs.", "tenant": "acme", "memory_type": "general",
     "context": "Caroline: What do you do on weekends?"},
    {"content": "Paintings of cities hang in the hallway.", "tenant": "acme", "memory_type": "general"},
    {"content": "The committee's reviews were postponed.", "tenant": "globex", "memory_type": "fact"},
    {"content": "Running, swimming and cycling: the triathlon plan.", "tenant": "globex", "memory_type": "general",
     "context": "Coach: how are you training?"},
    {"content": "is", "tenant": "globex", "memory_type": "general"},  # only a stopword: no posting, length 0
]  # fmt: skip


def light_stem():
    spec = importlib.util.spec_from_file_location("migration_0021", MIGRATION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.light_stem


def bm25_rows(dsn: str) -> dict[str, object]:
    """The three tables as the superuser reads them (every tenant), impact rounded."""
    with psycopg.connect(dsn) as conn:
        return {
            "postings": conn.execute(
                "SELECT tenant, memory_type, term, memory_id, tf, doc_len, round(impact::numeric, 4) "
                "FROM memoria.memory_terms ORDER BY 1, 2, 3, 4"
            ).fetchall(),
            "df": conn.execute("SELECT tenant, memory_type, term, df FROM memoria.bm25_terms ORDER BY 1, 2, 3").fetchall(),
            "docs": conn.execute("SELECT tenant, memory_type, n_docs, sum_len FROM memoria.bm25_docs ORDER BY 1, 2").fetchall(),
        }  # fmt: skip


def expected(stem=None) -> tuple[Counter, dict]:
    """Per (tenant, type, term) the document frequency, and per (tenant, type) the summed length,
    from the records as the tokenizer (or `stem`) indexes them."""
    df: Counter = Counter()
    lengths: dict = {}
    for r in RECORDS:
        counts, doc_len = indexed_term_counts(r["content"], r.get("context"), stem=stem)
        for term in counts:
            df[(r["tenant"], r["memory_type"], term)] += 1
        key = (r["tenant"], r["memory_type"])
        lengths[key] = lengths.get(key, 0) + doc_len
    return df, lengths


@pytest.fixture
def stored(config: Config) -> str:
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        assert system.store_many(RECORDS).inserted == len(RECORDS)
    return config.dsn


def bm25_answer(dsn: str, text: str, tenant: str) -> list[str]:
    with MemorySystem(Config(dsn=dsn, pool_min_size=1, vector_index_auto=False), embedder=HashEmbedder()) as system:
        found = system.query(text, tenant=tenant, workers=["bm25"], ranking=False, top_k=3)
        return [m.content for m in found.memories]


def test_the_postings_are_derived_again_both_ways(stored: str):
    dsn = stored
    ingested = bm25_rows(dsn)
    df, lengths = expected()
    assert {(t, m, term): n for t, m, term, n in ingested["df"]} == dict(df)
    assert {(t, m): s for t, m, _, s in ingested["docs"]} == lengths
    assert ("acme", "episodic", "paint") in df and ("acme", "general", "hike") in df  # Snowball stems

    migrate.downgrade(dsn, "0020")
    light = bm25_rows(dsn)
    df_light, lengths_light = expected(light_stem())
    assert {(t, m, term): n for t, m, term, n in light["df"]} == dict(df_light)
    assert {(t, m): s for t, m, _, s in light["docs"]} == lengths_light
    assert [d[:3] for d in light["docs"]] == [d[:3] for d in ingested["docs"]]  # n_docs kept
    assert ("acme", "episodic", "painted") in df_light  # the light stemmer kept the word

    migrate.upgrade(dsn)
    assert bm25_rows(dsn) == ingested  # what ingestion wrote, impact included


def test_a_query_finds_another_form_of_the_words_after_the_upgrade(stored: str):
    dsn = stored
    migrate.downgrade(dsn, "0020")
    migrate.upgrade(dsn)
    assert set(bm25_answer(dsn, "paintings", "acme")) == {
        "Melanie painted a sunrise over the lake last summer.",
        "Paintings of cities hang in the hallway.",
    }
    assert bm25_answer(dsn, "hike", "acme") == ["She loves hiking with her dogs."]
    assert bm25_answer(dsn, "swim", "globex") == ["Running, swimming and cycling: the triathlon plan."]
