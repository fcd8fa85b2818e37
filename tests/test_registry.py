"""The worker registry: a new retrieval source is its module, its SQL and a registry entry, nothing else.

The toy worker below is written as a user would add one: it declares its name, precondition, fusion
weights, score direction and score name, and brings its statement; it is handed to MemorySystem in a
registry. Routing, the scheduler, the final CTE, the candidates' scores and the diagnostics pick it
up from what it declares.
"""

from __future__ import annotations

from typing import Any

import pytest

from memoria_pg import DEFAULT_WORKERS, Config, ConfigError, MemorySystem, Worker, WorkerRegistry
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.core.types import ProcessedQuery, Route, Shard
from memoria_pg.query.workers import FusionWeights, WorkerContext

# Memories containing the query's first token; the shortest first (a "distance": lower is better).
TOY_SQL = """
SELECT m.id AS memory_id, m.memory_type, length(m.content)::float8 AS score
FROM memoria.memories m
WHERE m.tenant = current_setting('memoria.tenant')
  AND position(%(word)s IN lower(m.content)) > 0
  AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
ORDER BY score, m.id
LIMIT %(limit)s
"""


class ToyWorker(Worker):
    name = "toy"
    sql_name = "toy"  # its statement comes from sql() below instead of sql/toy.sql
    score_name = "toy_length"
    lower_is_better = True
    weights = FusionWeights(score=2.0, rrf=2.0)

    @classmethod
    def ready(cls, query: ProcessedQuery, route: Route, config: Config) -> bool:
        return bool(query.tokens) and query.tokens[0] != "skip"

    def sql(self, ctx: WorkerContext) -> str:
        return TOY_SQL

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        return {"word": ctx.query.tokens[0], "memory_type": shard.memory_type, "limit": ctx.limit}


@pytest.fixture
def toy_system(config: Config):
    registry = DEFAULT_WORKERS.replace(ToyWorker)
    with MemorySystem(config, embedder=HashEmbedder(), worker_registry=registry) as system:
        system.store_many(
            [
                {"content": "zebra", "tenant": "t"},
                {"content": "a zebra crossing near the old harbour bridge", "tenant": "t"},
                {"content": "the harbour at night", "tenant": "t"},
            ]
        )
        yield system


def test_a_registered_worker_runs_and_its_declarations_reach_the_candidates(toy_system: MemorySystem):
    response = toy_system.query("zebra", tenant="t", workers=["vector", "toy"], ranking=False)
    d = response.diagnostics
    assert d.submitted_sources == ["vector", "toy"] and d.completed_sources == ["vector", "toy"]
    assert d.worker_hits["toy"] == 2
    by_content = {m.content: m for m in response.candidates}
    short, long = by_content["zebra"], by_content["a zebra crossing near the old harbour bridge"]
    assert "toy" in short.sources and "toy" in long.sources
    assert "toy" not in by_content["the harbour at night"].sources
    assert short.scores["toy_length"] == 5.0 and short.scores["toy_rank"] == 1.0  # lower is better: rank 1
    assert long.scores["toy_rank"] == 2.0
    # weight 2.0 dominates the vector's 0.5: the toy's best hit is the best candidate
    assert response.memories[0].content == "zebra"
    assert short.retrieval_score > 2.0


def test_the_registry_decides_preconditions_routes_and_settings(toy_system: MemorySystem, config: Config):
    skipped = toy_system.query("skip zebra", tenant="t", workers=["vector", "toy"])
    assert skipped.diagnostics.submitted_sources == ["vector"]  # the toy's own precondition
    routed = toy_system.query("zebra", tenant="t")
    assert "toy" not in routed.diagnostics.submitted_sources  # in no route unless asked for
    with MemorySystem(
        config.replace(workers_to_use=("vector", "toy")),
        embedder=HashEmbedder(),
        worker_registry=DEFAULT_WORKERS.replace(ToyWorker),
    ) as system:
        assert system.query("zebra", tenant="t").diagnostics.submitted_sources == ["vector", "toy"]
    with pytest.raises(ConfigError, match=r"workers_to_use: unknown workers \['toy'\]"):
        MemorySystem(config.replace(workers_to_use=("vector", "toy")), embedder=HashEmbedder())


def test_a_source_that_does_not_declare_itself_is_refused_where_it_is_registered():
    class Undeclared(Worker):
        name = "undeclared"
        sql_name = "undeclared"

    with pytest.raises(ConfigError, match="does not declare 'score_name'"):
        WorkerRegistry([*DEFAULT_WORKERS.values(), Undeclared])

    class OneMethod(ToyWorker):
        name = "one_method"
        weights = {"score": 1.0}  # type: ignore[assignment]

    with pytest.raises(ConfigError, match=r"weights must be a FusionWeights \(one weight per fusion method"):
        DEFAULT_WORKERS.replace(OneMethod)


def test_the_default_registry_declares_every_table_the_final_cte_reads():
    assert DEFAULT_WORKERS.names == ("vector", "bm25", "graph", "phrase", "attribute", "fusion", "temporal")
    assert DEFAULT_WORKERS.weights("score") == {
        "vector": 0.5,
        "bm25": 0.5,
        "graph": 0.0,
        "phrase": 0.0,
        "attribute": 0.3,
        "fusion": 0.5,
        "temporal": 0.3,
        "relevance": 0.15,
    }
    assert set(DEFAULT_WORKERS.lower_is_better()) == {"vector", "graph", "attribute", "temporal", "relevance"}
    assert DEFAULT_WORKERS.score_names()["graph"] == "graph_hops"
    with pytest.raises(ValueError, match="fusion method"):
        DEFAULT_WORKERS.weights("borda")
