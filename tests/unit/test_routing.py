import dataclasses

import pytest

from memoria_pg.config import DEFAULT_MEMORY_TYPES, Config
from memoria_pg.core.types import ProcessedQuery, Route
from memoria_pg.errors import ConfigError
from memoria_pg.query.routing import PRESETS, ROUTES, Router, preset, submitted_workers
from memoria_pg.query.workers import DEFAULT_WORKERS
from memoria_pg.ranking import SIGNAL_NAMES

WORKER_NAMES = DEFAULT_WORKERS.names


def query(hint=None, **fields):
    defaults = dict(text="q", normalized="q", tokens=["q"], tenant="t", memory_type_hint=hint)
    return ProcessedQuery(**{**defaults, **fields})


def test_table_covers_default_types_with_known_workers_and_signals():
    assert set(DEFAULT_MEMORY_TYPES) <= set(ROUTES)
    for name, route in ROUTES.items():
        assert route.name == name
        assert route.workers and set(route.workers) <= set(WORKER_NAMES)
        assert "vector" in route.workers
        assert set(route.signals) <= set(SIGNAL_NAMES)
        if name != "general":
            assert route.pool == name and "general" in route.fallback_pools


def test_general_route_for_no_hint():
    route = Router().route(query(None))
    assert route.name == "general"
    assert set(route.workers) == {"vector", "bm25", "fusion", "graph", "phrase", "attribute", "temporal"}
    assert route.graph_depth == 2


@pytest.mark.parametrize("hint", ["episodic", "semantic", "procedural", "preference", "fact"])
def test_typed_routes(hint):
    route = Router().route(query(hint))
    assert route is ROUTES[hint]
    assert route.pool == hint


def test_unknown_type_gets_general_mix_over_own_pool():
    route = Router().route(query("recipes"))
    assert route.workers == ROUTES["general"].workers
    assert (route.name, route.pool, route.fallback_pools) == ("recipes", "recipes", ("general",))


def test_workers_to_use_overrides_every_route():
    router = Router(workers_to_use=("vector", "bm25"))
    for hint in (None, "episodic", "procedural"):
        route = router.route(query(hint))
        assert route.workers == ("vector", "bm25")
    assert router.route(query("episodic")).graph_depth == ROUTES["episodic"].graph_depth


def test_unknown_workers_rejected():
    with pytest.raises(ConfigError, match="unknown workers \\['faiss'\\]"):
        Router(workers_to_use=("faiss",))
    with pytest.raises(ConfigError, match="general"):
        Router(routes={"episodic": ROUTES["episodic"]})


def test_pre_hook_changes_hint():
    def force_procedural(q):
        return dataclasses.replace(q, memory_type_hint="procedural")

    router = Router(pre_hooks=[lambda q: None, force_procedural])
    original = query("episodic")
    routed, route = router.route_query(original)
    assert route.name == "procedural"
    assert routed.memory_type_hint == "procedural"
    assert original.memory_type_hint == "episodic"


def test_post_hooks_change_route_in_order():
    def deeper(q, route):
        return dataclasses.replace(route, graph_depth=route.graph_depth + 1)

    def no_change(q, route):
        return None

    def drop_graph_for_short_queries(q, route):
        if len(q.tokens) < 2:
            return dataclasses.replace(route, workers=tuple(w for w in route.workers if w != "graph"))
        return None

    router = Router(workers_to_use=("vector", "graph"), post_hooks=[deeper, no_change, drop_graph_for_short_queries])
    route = router.route(query(None))
    assert route.graph_depth == 3
    assert route.workers == ("vector",)


def test_post_hook_with_unknown_worker_rejected():
    def bad(q, route):
        return dataclasses.replace(route, workers=("magic",))

    with pytest.raises(ConfigError, match="bad"):
        Router(post_hooks=[bad]).route(query())


ALL_ON = {"config": Config(enable_fusion=True, enable_phrase_index=True, enable_graph=True)}
GENERAL = ROUTES["general"]


def test_submitted_all_when_everything_available():
    q = query(entities=["Bob"], phrases=["New York"], subject="Bob", attribute="location")
    assert submitted_workers(GENERAL, q, **ALL_ON) == ["vector", "bm25", "fusion", "graph", "phrase", "attribute"]


def test_preconditions_from_query():
    assert submitted_workers(GENERAL, query(), **ALL_ON) == ["vector", "bm25", "fusion"]
    assert "attribute" not in submitted_workers(GENERAL, query(subject="Bob"), **ALL_ON)
    assert "bm25" not in submitted_workers(GENERAL, query(tokens=[]), **ALL_ON)
    assert "fusion" not in submitted_workers(GENERAL, query(tokens=[]), **ALL_ON)


def test_preconditions_from_settings():
    q = query(entities=["Bob"], phrases=["New York"], subject="Bob", attribute="location")
    off = {"config": Config(enable_fusion=False, enable_phrase_index=False, enable_graph=False)}
    assert submitted_workers(GENERAL, q, **off) == ["vector", "bm25", "attribute"]


def test_fusion_needs_bm25_in_route_and_vector_goes_first():
    route = Route("x", ("fusion", "graph", "vector"))
    q = query(entities=["Bob"])
    assert submitted_workers(route, q, **ALL_ON) == ["vector", "graph"]
    route = Route("y", ("bm25", "fusion", "vector", "bm25"))
    assert submitted_workers(route, q, **ALL_ON) == ["vector", "bm25", "fusion"]


def test_graph_depth_zero_disables_graph():
    route = Route("x", ("vector", "graph"), graph_depth=0)
    assert submitted_workers(route, query(entities=["A"]), **ALL_ON) == ["vector"]


def test_presets():
    assert PRESETS["semantic"].workers == ("vector",)
    assert set(PRESETS["hybrid"].workers) == {"vector", "bm25", "fusion"}
    assert {"graph", "phrase", "attribute"} <= set(PRESETS["hybrid_graph"].workers)
    assert PRESETS["full"].cross_encoder and not PRESETS["hybrid_graph"].cross_encoder
    assert not PRESETS["retrieval_only"].ranking and PRESETS["full"].ranking
    for p in PRESETS.values():
        assert set(p.workers) <= set(WORKER_NAMES)
    assert preset("hybrid") is PRESETS["hybrid"]
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        preset("nope")


def test_preset_workers_feed_router():
    route = Router(workers_to_use=PRESETS["hybrid"].workers).route(query("episodic"))
    assert submitted_workers(route, query(entities=["A"]), **ALL_ON) == ["vector", "bm25", "fusion"]


def test_the_fusion_method_is_checked_and_read_from_the_environment():
    from memoria_pg.config import Config

    with pytest.raises(ConfigError, match="fusion_method must be one of"):
        Config(fusion_method="borda")
    assert Config.from_env({"MEMORIA_FUSION_METHOD": "rrf"}).fusion_method == "rrf"
    assert Config().fusion_method == "score"
