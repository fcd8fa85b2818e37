"""The plugin example from the README: a post-routing hook that keeps only vector + BM25."""

from memoria_pg import Route


def register(registry) -> None:
    @registry.register_post_routing
    def keywords_only(query, route):
        return Route(
            "example-keywords-only",
            ("vector", "bm25"),
            route.graph_depth,
            route.signals,
            route.pool,
            route.fallback_pools,
        )
