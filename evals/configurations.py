"""The query configurations an evaluation compares, and the in-process references beside them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memoria_pg import InputError

from .reference import DESCRIPTIONS, REFERENCES


@dataclass(frozen=True)
class Configuration:
    """How MemorySystem.query is called; `overrides` are Config changes (a second system)."""

    name: str
    description: str
    v4: bool = True
    ranking: bool | None = False  # None: the Config's enable_ranking
    workers: tuple[str, ...] | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    static_weights: bool = False  # the fusion's declared weights, without the per-query shift (issue #14)

    def query_kwargs(self) -> dict[str, Any]:
        return {"v4": self.v4, "ranking": self.ranking, "workers": list(self.workers) if self.workers else None}


SQL_CONFIGURATIONS: tuple[Configuration, ...] = (
    Configuration("v3", "V3 path: vector search, then ranking as configured (query(v4=False))", v4=False, ranking=None),
    Configuration("vector", "V4, vector worker only, retrieval-only", workers=("vector",)),
    Configuration(
        "vector_hnsw",
        "V4, vector worker only, HNSW forced (vector_exact_max_rows=0, every tenant its own index): the HNSW recall check",
        workers=("vector",),
        overrides={"vector_exact_max_rows": 0},
    ),
    Configuration("bm25", "V4, BM25 worker only, retrieval-only", workers=("bm25",)),
    Configuration("v4", "V4 retrieval-only: the route's workers, ranking off"),
    Configuration(
        "v4_static",
        "V4 retrieval-only, score fusion with the declared weights only (before issue #14's per-query shift)",
        static_weights=True,
    ),
    Configuration(
        "v4_rrf",
        "V4 retrieval-only with reciprocal-rank fusion instead of score fusion",
        overrides={"fusion_method": "rrf"},
    ),
    Configuration("v4_ranking", "V4 with the ranking pipeline", ranking=True),
    Configuration(
        "v4_cross_encoder",
        "V4 retrieval-only with the cross-encoder (--cross-encoder)",
        overrides={"enable_cross_encoder": True},
    ),
)
CROSS_ENCODER = "v4_cross_encoder"
ALL_NAMES = tuple(c.name for c in SQL_CONFIGURATIONS) + REFERENCES


def configuration(name: str) -> Configuration:
    for c in SQL_CONFIGURATIONS:
        if c.name == name:
            return c
    raise KeyError(name)


def describe(name: str) -> str:
    return DESCRIPTIONS.get(name) or configuration(name).description


def check_names(names: tuple[str, ...]) -> tuple[str, ...]:
    unknown = sorted(set(names) - set(ALL_NAMES))
    if unknown:
        raise InputError(f"unknown configurations {unknown}; choose from {list(ALL_NAMES)}")
    return tuple(n for n in ALL_NAMES if n in names)  # a fixed order keeps tables comparable
