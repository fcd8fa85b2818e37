"""MemorySystem: the library's entry point (store, store_many, query) over one connection pool."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from . import migrate, server
from .config import Config, default_data_dir
from .db import Database
from .diagnostics import Diagnostics
from .embedding import CachedQueryEmbedder, Embedder
from .errors import InputError
from .ingest import Ingestor, MemoryRecord, StoreResult, batched, normalize_entity
from .query_processor import QueryProcessor
from .routing import Router
from .scheduler import Scheduler
from .types import CandidateRecord, ProcessedQuery, Route
from .workers import WORKERS


@dataclass
class QueryResponse:
    query: ProcessedQuery
    route: Route | None
    memories: list[CandidateRecord]
    diagnostics: Diagnostics
    candidates: list[CandidateRecord] = field(default_factory=list)  # the whole type-filtered set

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": {"text": self.query.text, "normalized": self.query.normalized, "tokens": self.query.tokens,
                      "tenant": self.query.tenant, "memory_type_hint": self.query.memory_type_hint,
                      "entities": self.query.entities, "phrases": self.query.phrases,
                      "subject": self.query.subject, "attribute": self.query.attribute,
                      "metadata": self.query.metadata},
            "route": None if self.route is None else {
                "name": self.route.name, "workers": list(self.route.workers),
                "graph_depth": self.route.graph_depth, "signals": list(self.route.signals),
                "pool": self.route.pool, "fallback_pools": list(self.route.fallback_pools)},
            "memories": [_memory_dict(m) for m in self.memories],
            "diagnostics": self.diagnostics.as_dict(),
        }


def _memory_dict(c: CandidateRecord) -> dict[str, Any]:
    return {"id": c.memory_id, "memory_type": c.memory_type, "content": c.content, "metadata": c.metadata,
            "importance": c.importance, "created_at": c.created_at.isoformat(), "sources": c.sources,
            "scores": c.scores, "base_score": c.base_score, "retrieval_score": c.retrieval_score,
            "final_score": c.final_score, "explanation": c.explanation}


class MemorySystem:
    """Long-term memory in PostgreSQL. With no DSN, starts the embedded server (and migrates it)."""

    def __init__(self, config: Config | None = None, *, embedder: Embedder | None = None,
                 auto_migrate: bool | None = None, ranking=None, plugins=None) -> None:
        self.config = config or Config.from_env()
        cfg = self.config
        embedded = cfg.dsn is None
        if embedded:
            data_dir = Path(cfg.data_dir) if cfg.data_dir else default_data_dir()
            self.dsn = server.start(data_dir, keep_running=False)
        else:
            self.dsn = cfg.dsn
        if auto_migrate if auto_migrate is not None else embedded:
            migrate.upgrade(self.dsn, memory_types=cfg.memory_types, use_age=cfg.use_age)
        self.db = Database(self.dsn, min_size=cfg.pool_min_size, max_size=cfg.pool_max_size,
                           timeout=cfg.pool_timeout, statement_timeout_ms=cfg.statement_timeout_ms,
                           ef_search=cfg.hnsw_ef_search)
        self.memory_types = self._load_memory_types()
        self._embedder = embedder
        self._query_embedder: CachedQueryEmbedder | None = None
        self.plugins = plugins if plugins is not None else _load_plugins(cfg)
        plugins = self.plugins
        self.expander = None
        if cfg.enable_query_expansion:
            from .expansion import LexiconExpander

            self.expander = LexiconExpander()
        self.router = Router(
            workers_to_use=cfg.workers_to_use,
            pre_hooks=tuple(getattr(plugins, "pre_routing", ())),
            post_hooks=tuple(getattr(plugins, "post_routing", ())),
        )
        self.scheduler = Scheduler(self.db, max_workers=max(len(WORKERS) * 2, cfg.pool_max_size))
        self.ranking = ranking if ranking is not None else _default_ranking(plugins)
        self.graph_backend = "age" if (cfg.use_age and self.db.capabilities.age) else "sql"
        self.ingestor = Ingestor(
            self.db, embedder=lambda: self.embedder, memory_types=self.memory_types, default_type=cfg.default_memory_type,
            default_tenant=cfg.default_tenant, dim=cfg.embedding_dim, max_chars=cfg.max_content_chars,
            k1=cfg.bm25_k1, b=cfg.bm25_b, graph_writer=self._graph_writer())

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        self.scheduler.close()
        self.db.close()

    def __enter__(self) -> "MemorySystem":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from .embedding import SentenceTransformerEmbedder

            self._embedder = SentenceTransformerEmbedder(self.config.embedding_model,
                                                         batch_size=self.config.embedding_batch_size)
        if self._embedder.dim != self.config.embedding_dim:
            raise InputError(f"the embedder makes {self._embedder.dim}-dimensional vectors but the schema "
                             f"stores {self.config.embedding_dim}; use a {self.config.embedding_dim}-dimensional model")
        return self._embedder

    def embed_query(self, text: str) -> np.ndarray:
        if self._query_embedder is None or self._query_embedder.inner is not self.embedder:
            self._query_embedder = CachedQueryEmbedder(self.embedder, self.config.query_cache_size)
        return self._query_embedder.embed_query(text)

    def _load_memory_types(self) -> tuple[str, ...]:
        with self.db.connection() as conn:
            rows = conn.execute("SELECT name FROM memoria.memory_types ORDER BY name").fetchall()
        return tuple(r[0] for r in rows)

    def _graph_writer(self) -> Callable | None:
        # Keep the AGE mirror in sync whenever it exists, even if the graph worker does not use it.
        if not self.db.capabilities.age:
            return None
        from .graph_age import sync_batch

        return sync_batch

    # -- ingestion -------------------------------------------------------------------------------
    def store(self, content: str, **fields: Any) -> int | None:
        """Store one memory; returns its id, or None when it was already stored (same content/external id)."""
        # One record: written in this thread (store_many would start writer threads for it).
        return self.ingestor.store_batch([MemoryRecord(content=content, **fields)]).ids[0]

    def store_many(self, records: Iterable[MemoryRecord | Mapping[str, Any]], *,
                   batch_size: int | None = None, progress: Callable[[int], None] | None = None,
                   wheres: Iterable[str] | None = None, writers: int | None = None,
                   return_ids: bool = True) -> StoreResult:
        """Store records in batches; each batch is all-or-nothing. Embeds records without vectors.

        `return_ids=False` leaves StoreResult.ids empty (the counts stay): memory then stays flat
        however long the stream (the per-record id list costs ~36 bytes a record: 36 MB at 1M).

        The next batch is validated and embedded while earlier ones are written by up to
        `writers` (default `config.ingest_writers`) pooled connections; see Ingestor.store_batches.
        """
        where_iter = iter(wheres) if wheres is not None else None
        size = batch_size or self.config.ingest_batch_size

        def batches():
            done = 0
            for batch in batched(records, size):
                batch_wheres = [next(where_iter) for _ in batch] if where_iter is not None else \
                    [f"record {done + i + 1}" for i in range(len(batch))]
                done += len(batch)
                yield batch, batch_wheres

        # Never more writers than pooled connections: a writer waiting for one could time out.
        writers = min(writers or self.config.ingest_writers, self.config.pool_max_size)
        return self.ingestor.store_batches(batches(), writers=writers, progress=progress, return_ids=return_ids)

    def add_memory_type(self, name: str) -> bool:
        created = migrate.add_memory_type(self.dsn, name)
        self.memory_types = self._load_memory_types()
        self.ingestor.memory_types = self.memory_types
        return created

    # -- queries ---------------------------------------------------------------------------------
    def query_processor(self, tenant: str, conn: psycopg.Connection | None = None) -> QueryProcessor:
        """A QueryProcessor whose entity recognition consults this tenant's entity table, through
        `conn` (a transaction already set to the tenant) or a transaction of its own."""

        def lookup(grams: list[str]) -> list[str]:
            if not grams:
                return []
            if conn is not None:
                return _entity_names(conn, grams)
            with self.db.transaction(tenant) as own:
                return _entity_names(own, grams)

        return QueryProcessor(self.memory_types, entity_lookup=lookup, max_chars=self.config.max_query_chars,
                              expander=self.expander)

    def query(self, text: str, *, tenant: str | None = None, memory_type: str | None = None,
              top_k: int | None = None, embedding: Sequence[float] | None = None,
              workers: Sequence[str] | None = None, ranking: bool | None = None,
              v4: bool | None = None, trace: bool | None = None) -> QueryResponse:
        """Retrieve memories for `text` through the V4 path (or V3 when disabled)."""
        from .pipeline import run_query

        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise InputError(f"top_k must be a positive integer, got {top_k!r}")
        return run_query(self, text, tenant=tenant or self.config.default_tenant, memory_type=memory_type,
                         top_k=top_k or self.config.top_k, embedding=embedding, workers=workers,
                         ranking=self.config.enable_ranking if ranking is None else ranking,
                         v4=self.config.enable_v4 if v4 is None else v4,
                         trace=self.config.enable_tracing if trace is None else trace)


def _load_plugins(cfg: Config):
    from .plugins import PluginRegistry

    registry = PluginRegistry()
    if cfg.load_plugin_entry_points:
        registry.load_entry_points()
    if cfg.plugins:
        registry.load_from_config(cfg.plugins)
    return registry


def _default_ranking(plugins):
    from .ranking import RankingPipeline

    signals = tuple(getattr(plugins, "ranking_signals", ()))
    try:
        return RankingPipeline(signal_plugins=signals)
    except TypeError:
        return RankingPipeline()


def _entity_names(conn: psycopg.Connection, grams: list[str]) -> list[str]:
    rows = conn.execute("SELECT name FROM memoria.entities WHERE tenant = current_setting('memoria.tenant') "
                        "AND norm_name = ANY(%s)", ([normalize_entity(g) for g in grams],)).fetchall()
    return [r[0] for r in rows]
