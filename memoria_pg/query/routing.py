"""Router: picks a Route (workers, graph depth, signals, pool, fallback pools) from the memory-type hint.

ROUTES is the table of routes by hint; PRESETS are named retrieval mixes ("recipes") a caller can
choose by name. `submitted_workers` applies the spec's preconditions, so only workers that can
return something are submitted to the scheduler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..config import Config
from ..core import validation
from ..core.types import ProcessedQuery, Route
from ..errors import ConfigError
from .workers import DEFAULT_WORKERS, WorkerRegistry

PreRoutingHook = Callable[[ProcessedQuery], "ProcessedQuery | None"]
PostRoutingHook = Callable[[ProcessedQuery, Route], "Route | None"]

_ALL = ("vector", "bm25", "fusion", "graph", "phrase", "attribute", "temporal")

# Signals name ranking signals (memoria_pg.ranking.signals.SIGNAL_NAMES) the route wants emphasized;
# see RankingWeights.boosted. Depth is the graph's hop limit: deep walks pay off for facts and
# concepts linked through other entities, while episodes and procedures are about what they mention.
ROUTES: dict[str, Route] = {
    "general": Route("general", _ALL, graph_depth=2, signals=(), pool=None),
    "episodic": Route(
        "episodic",
        ("vector", "bm25", "fusion", "graph", "phrase", "temporal"),
        graph_depth=1,
        signals=("recency",),
        pool="episodic",
        fallback_pools=("general",),
    ),
    "semantic": Route(
        "semantic",
        ("vector", "bm25", "fusion", "graph", "attribute", "temporal"),
        graph_depth=2,
        signals=("importance",),
        pool="semantic",
        fallback_pools=("fact", "general"),
    ),
    "procedural": Route(
        "procedural",
        ("vector", "bm25", "fusion", "phrase", "temporal"),
        graph_depth=1,
        signals=("importance", "access"),
        pool="procedural",
        fallback_pools=("general",),
    ),
    "preference": Route(
        "preference",
        ("vector", "bm25", "fusion", "attribute", "graph", "temporal"),
        graph_depth=1,
        signals=("recency", "attribute_hit"),
        pool="preference",
        fallback_pools=("general",),
    ),
    "fact": Route(
        "fact",
        ("vector", "bm25", "fusion", "attribute", "graph", "phrase", "temporal"),
        graph_depth=2,
        signals=("importance", "attribute_hit"),
        pool="fact",
        fallback_pools=("semantic", "general"),
    ),
}


@dataclass(frozen=True)
class Preset:
    """A named retrieval mix: which workers run, whether ranking and the cross-encoder run."""

    name: str
    workers: tuple[str, ...]
    ranking: bool = True
    cross_encoder: bool = False


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("semantic", ("vector",)),  # the V3 shape: vector search, then ranking
        Preset("hybrid", ("vector", "bm25", "fusion")),
        Preset("hybrid_graph", _ALL),
        Preset("full", _ALL, cross_encoder=True),
        Preset("retrieval_only", _ALL, ranking=False),  # measures retrieval without ranking
    )
}


def preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}") from None


def apply_preset(config: Config, name: str) -> tuple[Config, bool]:
    """The configuration with the preset's workers and cross-encoder flag, and its ranking switch."""
    chosen = preset(name)
    changed = config.replace(
        workers_to_use=tuple(chosen.workers),
        enable_cross_encoder=chosen.cross_encoder and bool(config.cross_encoder_model),
    )
    return changed, chosen.ranking


class Router:
    """Maps a ProcessedQuery to a Route: pre-hooks, the ROUTES table, WORKERS_TO_USE, post-hooks."""

    def __init__(
        self,
        routes: Mapping[str, Route] = ROUTES,
        workers_to_use: Sequence[str] = (),
        pre_hooks: Sequence[PreRoutingHook] = (),
        post_hooks: Sequence[PostRoutingHook] = (),
        *,
        registry: WorkerRegistry = DEFAULT_WORKERS,
    ) -> None:
        if "general" not in routes:
            raise ConfigError("routes must include a 'general' route (used when the query has no hint)")
        self.registry = registry
        for name, route in routes.items():
            self.check(route.workers, f"route {name!r}")
        self.routes = dict(routes)
        self.workers_to_use = self.check(workers_to_use, "workers_to_use")
        self.pre_hooks = list(pre_hooks)
        self.post_hooks = list(post_hooks)

    def check(self, workers: Iterable[str], where: str) -> tuple[str, ...]:
        """The worker names, each a registered worker (ConfigError naming `where` otherwise)."""
        return validation.worker_names(workers, self.registry.names, where)

    def route(self, query: ProcessedQuery) -> Route:
        """The Route for `query` (pre-hooks may mutate the query in place; see route_query)."""
        return self.route_query(query)[1]

    def route_query(self, query: ProcessedQuery) -> tuple[ProcessedQuery, Route]:
        """The query as the pre-routing hooks left it, and its Route."""
        for pre in self.pre_hooks:
            query = pre(query) or query
        route = self.table_route(query.memory_type_hint)
        if self.workers_to_use:
            # Operator configuration replaces the table's mix; post-hooks still see and may adjust it.
            route = dataclasses.replace(route, workers=self.workers_to_use)
        for post in self.post_hooks:
            changed = post(query, route)
            if changed is not None:
                self.check(changed.workers, f"post-routing hook {getattr(post, '__name__', post)!r}")
                route = changed
        return query, route

    def table_route(self, hint: str | None) -> Route:
        """ROUTES entry for the hint; an unknown type gets the general mix over its own pool."""
        if hint is None or hint == "general":
            return self.routes["general"]
        if hint in self.routes:
            return self.routes[hint]
        return dataclasses.replace(self.routes["general"], name=hint, pool=hint, fallback_pools=("general",))


def submitted_workers(
    route: Route, query: ProcessedQuery, config: Config, registry: WorkerRegistry = DEFAULT_WORKERS
) -> list[str]:
    """The route's workers whose preconditions (each worker's `ready`) hold, vector first, each once."""
    workers = list(dict.fromkeys(validation.worker_names(route.workers, registry.names, f"route {route.name!r}")))
    if "vector" in workers:
        workers.remove("vector")
        workers.insert(0, "vector")
    return [w for w in workers if registry[w].ready(query, route, config)]
