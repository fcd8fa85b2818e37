"""MemorySystem: the library's entry point, a thin facade over the two wings and one connection pool.

It builds the collaborators once (the pool, the embedder, the router, the scheduler, the ranking
stage, the worker registry) and hands them, typed, to the QueryPipeline and the Ingestor; neither
wing reaches back into it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import psycopg

from .config import Config, default_data_dir
from .core import validation
from .core.embedding import CachedQueryEmbedder, Embedder, LazyEmbedder
from .core.types import ForgetResult, HistoryEvent, KnownTypes, Memory, MemoryRecord, StoreResult
from .db import Database, embedded, translating, vector_indexes
from .db.database import server_errors
from .db.replicas import ReadRouter, ReplicaSettings
from .errors import ServerError, SyncRunning
from .ingest import Ingestor, RecordRules, ramped
from .lifecycle import MISSING, Lifecycle
from .plugins import PluginRegistry
from .query import QueryPipeline, QueryRequest, QueryResponse
from .query.processor import EntityLookup, QueryProcessor
from .query.routing import Router
from .query.scheduler import Scheduler
from .query.workers import DEFAULT_WORKERS, WorkerRegistry
from .ranking import RankingPipeline, RankingStage

Records = Iterable[MemoryRecord | Mapping[str, Any]]
MAX_NOTED_TENANTS = 10_000  # tenants store_many keeps for read-your-writes; past them, every tenant waits


log = logging.getLogger(__name__)


class MemorySystem:
    """Long-term memory in PostgreSQL. With no DSN, starts the embedded server (and migrates it).

    Injection points, all optional: `embedder` (an Embedder; default the packaged model, loaded on
    first use), `ranking` (a RankingStage, or False for none), `plugins` (a PluginRegistry; default
    from the configuration), `worker_registry` (the retrieval sources; default DEFAULT_WORKERS).
    """

    @translating
    def __init__(
        self,
        config: Config | None = None,
        *,
        embedder: Embedder | None = None,
        auto_migrate: bool | None = None,
        ranking: RankingStage | Literal[False] | None = None,
        plugins: PluginRegistry | None = None,
        worker_registry: WorkerRegistry | None = None,
    ) -> None:
        self.config = cfg = config or Config.from_env()
        self.dsn = self._start_server(cfg, auto_migrate)
        self.db = Database(
            self.dsn,
            min_size=cfg.pool_min_size,
            max_size=cfg.pool_max_size,
            timeout=cfg.pool_timeout,
            statement_timeout_ms=cfg.statement_timeout_ms,
            ef_search=cfg.hnsw_ef_search,
        )
        self.reads = self._read_router()
        self.known_types = KnownTypes(self._load_memory_types)  # a type added elsewhere is looked up
        self.plugins = plugins if plugins is not None else _load_plugins(cfg)
        self.worker_registry = worker_registry or DEFAULT_WORKERS
        self.graph_backend = "age" if (cfg.use_age and self.db.capabilities.age) else "sql"
        self._embedder = LazyEmbedder(embedder or functools.partial(_default_embedder, cfg), cfg.embedding_dim)
        self.query_embedder = CachedQueryEmbedder(self._embedder, cfg.query_cache_size)
        self.scheduler = Scheduler(self.db, max_workers=max(len(self.worker_registry) * 2, cfg.pool_max_size))
        self.pipeline = self._query_pipeline(ranking)
        self.ingestor = self._ingestor()
        self.lifecycle = Lifecycle(self.db, self.ingestor, self._embedder, graph=self.db.capabilities.age is not None)
        self._schema_head: str | None = None
        # a tenant grown past the exact-search bound gets its own HNSW index without a cron (0: never)
        self.index_keeper = (
            vector_indexes.IndexKeeper(
                self.db, self.dsn, cfg.vector_exact_max_rows, max_per_type=cfg.vector_index_max_per_type
            )
            if cfg.vector_index_auto and cfg.vector_exact_max_rows > 0
            else None
        )

    def _start_server(self, cfg: Config, auto_migrate: bool | None) -> str:
        dsn = cfg.dsn
        if dsn is None:
            dsn = embedded.start(Path(cfg.data_dir) if cfg.data_dir else default_data_dir(), keep_running=False)
        if auto_migrate if auto_migrate is not None else cfg.dsn is None:
            from .db import migrate

            before = migrate.current(dsn)
            migrate.upgrade(dsn, memory_types=cfg.memory_types, use_age=cfg.use_age)
            if before is not None and int(before) < vector_indexes.SHARED_HNSW_DROPPED:
                # the shards' shared HNSW index is gone (0016): large tenants get their own now
                try:
                    vector_indexes.sync(dsn, cfg.vector_exact_max_rows, max_per_type=cfg.vector_index_max_per_type)
                except SyncRunning:
                    log.warning("another vector-index sync is running; it builds the large tenants' indexes")
        return dsn

    def _read_router(self) -> ReadRouter:
        """The standbys of `replica_dsns` the query path reads from (none: the primary only)."""
        cfg = self.config
        settings = ReplicaSettings(
            max_lag_ms=cfg.replica_max_lag_ms,
            wait_ms=cfg.replica_wait_ms,
            retry_s=cfg.replica_retry_s,
            pool_min_size=cfg.pool_min_size,
            pool_max_size=cfg.pool_max_size,
            pool_timeout=cfg.pool_timeout,
            statement_timeout_ms=cfg.statement_timeout_ms,
            ef_search=cfg.hnsw_ef_search,
        )
        return ReadRouter(self.db, cfg.replica_dsns, settings)

    def _query_pipeline(self, ranking: RankingStage | Literal[False] | None) -> QueryPipeline:
        cfg = self.config
        router = Router(
            workers_to_use=cfg.workers_to_use,
            pre_hooks=tuple(self.plugins.pre_routing),
            post_hooks=tuple(self.plugins.post_routing),
            registry=self.worker_registry,
        )
        if ranking is None:
            ranking = RankingPipeline(signal_plugins=tuple(self.plugins.ranking_signals))
        expander = None
        if cfg.enable_query_expansion:
            from .query.expansion import LexiconExpander

            expander = LexiconExpander()

        def processor(memory_types: Collection[str], lookup: EntityLookup) -> QueryProcessor:
            return QueryProcessor(memory_types, entity_lookup=lookup, max_chars=cfg.max_query_chars, expander=expander)

        return QueryPipeline(
            db=self.db,
            config=cfg,
            memory_types=self.known_types,
            processor_factory=processor,
            embedder=self.query_embedder,
            router=router,
            scheduler=self.scheduler,
            registry=self.worker_registry,
            ranking=ranking or None,
            graph_backend=self.graph_backend,
            reads=self.reads,
        )

    def _ingestor(self) -> Ingestor:
        cfg = self.config
        rules = RecordRules(
            memory_types=self.known_types,
            default_type=cfg.default_memory_type,
            default_tenant=cfg.default_tenant,
            dim=cfg.embedding_dim,
            max_chars=cfg.max_content_chars,
        )
        # Keep the AGE mirror in sync whenever it exists, even if the graph worker does not use it.
        graph_writer = None
        if self.db.capabilities.age:
            from .db.graph_age import sync_batch

            graph_writer = sync_batch
        return Ingestor(
            self.db,
            embedder=self._embedder,
            rules=rules,
            k1=cfg.bm25_k1,
            b=cfg.bm25_b,
            graph_writer=graph_writer,
            single_valued=cfg.single_valued_attributes,
            statement_timeout_ms=cfg.ingest_statement_timeout_ms,
        )

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        if self.index_keeper is not None:
            self.index_keeper.close()  # cancels a build under way: the next sync builds it again
        self.scheduler.close()
        self.reads.close()
        self.db.close()

    def __enter__(self) -> MemorySystem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def embedder(self) -> Embedder:
        """The embedder (the model is loaded now if it was not yet)."""
        return self._embedder.resolve()

    def embed_query(self, text: str) -> np.ndarray:
        return self.query_embedder.embed_query(text)

    def _load_memory_types(self) -> tuple[str, ...]:
        with self.db.connection() as conn:
            rows = conn.execute("SELECT name FROM memoria.memory_types ORDER BY name").fetchall()
        return tuple(r[0] for r in rows)

    @translating
    def add_memory_type(self, name: str) -> bool:
        """Create the shard of a new memory type; False when it exists already."""
        from .db import migrate

        created = migrate.add_memory_type(self.dsn, name)
        self.reads.wrote(None)
        self.known_types.refresh()
        return created

    @property
    def memory_types(self) -> tuple[str, ...]:
        """The memory types this system knows (a type added by another process joins them when
        first named, or after `refresh_memory_types`)."""
        return self.known_types.names

    @translating
    def refresh_memory_types(self) -> tuple[str, ...]:
        """Read the memory types from the database again."""
        return self.known_types.refresh()

    @translating
    def sync_vector_indexes(
        self,
        tenants: Sequence[str] | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[vector_indexes.Action], None] | None = None,
    ) -> list[vector_indexes.Action]:
        """Give each tenant above `vector_exact_max_rows` memories of a type its own HNSW index there
        (built concurrently: writes go on), at most `vector_index_max_per_type` per type, the largest
        tenants' ("skip" for one left out), drop those whose tenant fell below half of it; `tenants`
        limits it to those. Needs the DSN of the user that owns the tables (db/vector_indexes.py)."""
        checked = None if tenants is None else [validation.tenant(t) for t in tenants]
        # the background builds of this system's IndexKeeper wait meanwhile (they would hold the lock)
        with self.index_keeper.paused() if self.index_keeper is not None else contextlib.nullcontext():
            cfg = self.config
            return vector_indexes.sync(
                self.dsn, cfg.vector_exact_max_rows, tenants=checked, dry_run=dry_run, progress=progress,
                max_per_type=cfg.vector_index_max_per_type,
            )  # fmt: skip

    # -- ingestion -------------------------------------------------------------------------------
    @translating
    def store(self, content: str, **fields: Any) -> int | None:
        """Store one memory; returns its id, or None when it was already stored (same content/external id)."""
        # One record: written in this thread (store_many would start writer threads for it). As a
        # mapping, so that a field MemoryRecord does not have is an InputError, not a TypeError.
        tenant = _tenant_of(fields, self.config.default_tenant)
        try:
            stored = self.ingestor.store_batch([{"content": content, **fields}]).ids[0]
        finally:  # also after a failure: the batch may have committed
            if tenant is not None:  # not a tenant ingestion accepts: nothing of it was written
                self.reads.wrote(tenant)
        if tenant is not None:  # only after a success: a server that is down would make the check wait
            self._indexes_grown([tenant], throttled=True)
        return stored

    @translating
    def store_many(
        self,
        records: Records,
        *,
        batch_size: int | None = None,
        progress: Callable[[int], None] | None = None,
        wheres: Iterable[str] | None = None,
        writers: int | None = None,
        return_ids: bool = True,
    ) -> StoreResult:
        """Store records in batches; each batch is all-or-nothing. Embeds records without vectors.

        Batches of `batch_size` records; without it, of `config.ingest_batch_size`, and in a stream
        longer than one batch the first ones smaller (`config.ingest_first_batch_size`, doubling), so
        that writing starts sooner.

        `return_ids=False` leaves StoreResult.ids empty (the counts stay): memory then stays flat
        however long the stream. The next batch is validated and embedded while earlier ones are
        written by up to `writers` (default `config.ingest_writers`) pooled connections; see
        Ingestor.store_batches.
        """
        if batch_size is None:  # the first batches smaller: writing starts sooner (ingest_first_batch_size)
            size, first = self.config.ingest_batch_size, self.config.ingest_first_batch_size
        else:
            size = first = validation.count(batch_size, "batch_size")
        writers = self.config.ingest_writers if writers is None else validation.count(writers, "writers")
        # Never more writers than pooled connections: a writer waiting for one could time out.
        writers = min(writers, self.config.pool_max_size)
        tenants: set[str] | None = set() if self.reads.enabled or self.index_keeper is not None else None
        try:
            result = self.ingestor.store_batches(
                _placed(_noting_tenants(records, tenants, self.config.default_tenant), size, first, wheres),
                writers=writers, progress=progress, return_ids=return_ids,
            )  # fmt: skip
        finally:
            noted = tenants if tenants is None or len(tenants) <= MAX_NOTED_TENANTS else None
            self.reads.wrote(noted)
        self._indexes_grown(noted)  # only after a success: a server that is down would make the check wait
        return result

    def _indexes_grown(self, tenants: Iterable[str] | None, *, throttled: bool = False) -> None:
        """After a write: the IndexKeeper checks whether these tenants crossed the exact-search bound
        (`throttled`: a single store, a tenant at most once a minute)."""
        if self.index_keeper is not None and tenants is not None:
            self.index_keeper.wrote(sorted(tenants), throttled=throttled)

    # -- the lifecycle ---------------------------------------------------------------------------
    @translating
    def get(self, memory_id: int | None = None, *, external_id: str | None = None, tenant: str | None = None) -> Memory:
        """The memory with that id (or external id) of the tenant; NotFound otherwise (also when it is
        another tenant's)."""
        return self.lifecycle.get(memory_id, external_id, self._tenant(tenant))

    @translating
    def list_memories(
        self, *, tenant: str | None = None, memory_type: str | None = None, where: dict[str, Any] | None = None,
        after: int = 0, limit: int = 100,
    ) -> list[Memory]:  # fmt: skip
        """A page of the tenant's memories in id order: those after the id `after` (a cursor)."""
        return self.lifecycle.page(self._tenant(tenant), memory_type=memory_type, where=where, after=after,
                                   limit=limit)  # fmt: skip

    @translating
    def export(
        self, *, tenant: str | None = None, memory_type: str | None = None, where: dict[str, Any] | None = None,
        embeddings: bool = False,
    ) -> Iterator[dict[str, Any]]:  # fmt: skip
        """The tenant's memories in id order as ingest records, which store_many and `memoria-pg
        ingest` read back (into this tenant or another, here or in another database): content, type,
        metadata, importance, created_at, valid_from and valid_to, context, external_id, pinned, and
        with `embeddings` the stored vector (an import then runs no model). What ingestion derives
        (entities, attributes, BM25 terms) is derived again on import; ids, history and access
        statistics are not exported. One snapshot, read as the iterator is (it holds a pooled
        connection until it is exhausted or closed); the arguments are checked at the call."""
        records = self.lifecycle.export(self._tenant(tenant), memory_type=memory_type, where=where,
                                        embeddings=embeddings)  # fmt: skip

        def translated() -> Iterator[dict[str, Any]]:
            with server_errors():
                yield from records

        return translated()

    @translating
    def update(
        self, memory_id: int, *, tenant: str | None = None, content: Any = MISSING, context: Any = MISSING,
        metadata: Any = MISSING, importance: Any = MISSING, pinned: Any = MISSING, memory_type: Any = MISSING,
        embedding: Sequence[float] | np.ndarray | None = None,
    ) -> Memory:  # fmt: skip
        """Change a memory in one transaction: a new text is re-embedded (unless `embedding` is given),
        re-tokenized and re-extracted, a new type moves it to that shard, and every derived statistic
        follows; its history records the previous values."""
        fields = {"content": content, "context": context, "metadata": metadata, "importance": importance,
                  "pinned": pinned, "memory_type": memory_type}  # fmt: skip
        with self._writing(tenant):
            return self.lifecycle.update(memory_id, self._tenant(tenant), fields, embedding)

    @translating
    def delete(self, memory_ids: int | Iterable[int], *, tenant: str | None = None) -> int:
        """Delete memories and everything derived from them; NotFound (nothing deleted) when one is missing."""
        with self._writing(tenant):
            return self.lifecycle.delete(memory_ids, self._tenant(tenant))

    @translating
    def forget(
        self, *, tenant: str | None = None, memory_type: str | None = None, before: Any = None,
        where: dict[str, Any] | None = None, dry_run: bool = False,
    ) -> ForgetResult:  # fmt: skip
        """Delete the tenant's memories that match every given filter (type, created before, metadata
        containing `where`) in one transaction; `dry_run` only counts them."""
        with self._writing(tenant):
            return self.lifecycle.forget(self._tenant(tenant), memory_type=memory_type, before=before,
                                         where=where, dry_run=dry_run)  # fmt: skip

    @translating
    def erase_tenant(self, tenant: str) -> dict[str, int]:
        """Remove every row of the tenant in every table (memories, postings, statistics, entities,
        edges, attributes, access, traces, history) and its AGE graph; rows removed per table."""
        with self._writing(tenant):
            return self.lifecycle.erase(tenant)

    @translating
    def history(self, memory_id: int, *, tenant: str | None = None) -> list[HistoryEvent]:
        """What happened to a memory, oldest first (also after it was deleted, until the tenant is erased)."""
        return self.lifecycle.history(memory_id, self._tenant(tenant))

    @translating
    def invalidate(self, memory_id: int, *, tenant: str | None = None, at: Any = None) -> Memory:
        """Retire a memory from `at` (default now), reversibly: queries leave it out from then on,
        unless asked for as of an earlier time or with include_invalid=True. Without `at`, a memory
        that has ended already keeps its end (a retried call changes nothing; one that would end
        later ends now); with it, the end moves there."""
        valid_to = validation.moment(at, "at") if at is not None else dt.datetime.now(dt.UTC)
        with self._writing(tenant):
            return self.lifecycle.set_validity(memory_id, self._tenant(tenant), valid_to, keep_end=at is None)

    @translating
    def restore(self, memory_id: int, *, tenant: str | None = None) -> Memory:
        """Undo `invalidate`: the memory holds again."""
        with self._writing(tenant):
            return self.lifecycle.set_validity(memory_id, self._tenant(tenant), None)

    def _tenant(self, tenant: str | None) -> str:
        return self.config.default_tenant if tenant is None else tenant

    @contextlib.contextmanager
    def _writing(self, tenant: str | None) -> Iterator[None]:
        """A write call of the tenant: afterwards (also when it failed: it may have committed) the
        primary's WAL position is kept for read-your-writes on the standbys (db/replicas.py)."""
        try:
            yield
        finally:
            if isinstance(tenant, str) or tenant is None:
                self.reads.wrote(self._tenant(tenant))

    # -- queries ---------------------------------------------------------------------------------
    @translating
    def query(
        self,
        text: str,
        *,
        tenant: str | None = None,
        memory_type: str | None = None,
        top_k: int | None = None,
        embedding: Sequence[float] | np.ndarray | None = None,
        workers: Sequence[str] | None = None,
        ranking: bool | None = None,
        v4: bool | None = None,
        trace: bool | None = None,
        as_of: Any = None,
        include_invalid: bool = False,
        candidates: bool = True,
        reference_time: Any = None,
    ) -> QueryResponse:
        """Retrieve memories for `text` through the V4 path (or V3 when disabled).

        `candidates=False`: the response's `candidates` need not hold every candidate, only what it
        returns; a V4 retrieval-only query (ranking off, no cross-encoder, no trace) then reads only the
        rows of the memories it can return, the same ones, in the same order.

        `reference_time`: the time the query is asked at, which relative expressions ("last week",
        "four weeks ago") count back from, so that the temporal worker searches the memories stored
        then (default: `as_of`, else now). Unlike `as_of` it leaves out no memory."""
        cfg = self.config
        request = QueryRequest(
            text=text,
            tenant=validation.tenant_or_default(tenant, cfg.default_tenant),  # "", 0, False: InputError
            memory_type=memory_type,
            top_k=cfg.top_k if top_k is None else validation.top_k(top_k),
            embedding=embedding,
            workers=validation.requested_workers(workers, self.worker_registry.names) or None,
            ranking=cfg.enable_ranking if ranking is None else ranking,
            v4=cfg.enable_v4 if v4 is None else v4,
            trace=cfg.enable_tracing if trace is None else trace,
            as_of=None if as_of is None else validation.moment(as_of, "as_of"),
            include_invalid=bool(include_invalid),
            candidates=bool(candidates),
            reference_time=None if reference_time is None else validation.moment(reference_time, "reference_time"),
        )
        return self.pipeline.run(request)

    def settle(self, timeout: float | None = None) -> bool:
        """Wait (at most `timeout` s) for the writes queries did not wait for (the access statistics of
        ranked queries, Config.access_statistics_wait) to end. True if they all have. `close` waits too."""
        return self.db.settle(timeout)

    def explain(self, response: QueryResponse) -> str:
        """`memoria-pg query --explain`: the route, each worker's SQL with its plan and time, the candidates."""
        from .query.explain import explain_query

        return explain_query(self.pipeline, response)

    def readiness(self) -> dict[str, Any]:
        """What a readiness probe reports: whether the database answers (on a connection of its own, so
        a busy pool cannot delay the answer), its schema revision and this library's newest one, and
        whether the embedding model is loaded (it loads on first use; `memory.embedder` loads it now)."""
        if self._schema_head is None:
            from .db import migrate

            self._schema_head = migrate.history(self.dsn)[-1][0]
        state: dict[str, Any] = {"database": True, "error": None, "schema": None, "schema_head": self._schema_head}
        try:
            from .db import migrate

            state["schema"] = migrate.current(self.dsn)
        except (psycopg.Error, ServerError) as exc:
            state.update(database=False, error=str(exc))
        state["model_loaded"] = self._embedder.loaded
        return state

    @translating
    def clear_access_statistics(self, tenant: str) -> int:
        """Forget which of the tenant's memories were returned and how often (the ranking's access
        signal); returns the number of memories whose statistics were removed. The writes of queries
        that returned before this call and did not wait for them (access_statistics_wait) end first,
        so that none of them counts again afterwards."""
        tenant = validation.tenant(tenant)
        self.db.settle(self.config.query_timeout_ms / 1000)
        with self._writing(tenant), self.db.transaction(tenant) as conn:
            return conn.execute(
                "DELETE FROM memoria.memory_access WHERE tenant = current_setting('memoria.tenant')"
            ).rowcount


def _noting_tenants(records: Records, tenants: set[str] | None, default: str) -> Iterator[Any]:
    """The records, each one's tenant added to `tenants` (None: not kept) for read-your-writes; at most
    MAX_NOTED_TENANTS + 1 (more: any tenant may have been written)."""
    for record in records:
        if tenants is not None and len(tenants) <= MAX_NOTED_TENANTS:
            found = _tenant_of(record, default)
            if found is not None:
                tenants.add(found)
        yield record


def _tenant_of(record: Any, default: str) -> str | None:
    """A record's tenant as ingestion reads it (a mapping's or a MemoryRecord's; default when absent);
    None for a value ingestion refuses (nothing of that record is written)."""
    tenant = record.get("tenant") if isinstance(record, Mapping) else getattr(record, "tenant", None)
    if tenant is None:
        return default
    return tenant if isinstance(tenant, str) else None


def _placed(
    records: Records, size: int, first: int, wheres: Iterable[str] | None
) -> Iterator[tuple[list[Any], list[str]]]:
    """The records in batches of `size`, the first ones smaller from `first` (ramped), each with its
    records' places ("record 7", or `wheres`)."""
    where_iter = iter(wheres) if wheres is not None else None
    done = 0
    for batch in ramped(records, size, first):
        if where_iter is not None:
            places = [next(where_iter) for _ in batch]
        else:
            places = [f"record {done + i + 1}" for i in range(len(batch))]
        done += len(batch)
        yield batch, places


def _default_embedder(cfg: Config) -> Embedder:
    from .core.embedding import HashEmbedder, SentenceTransformerEmbedder

    if cfg.embedding_model == "hash":  # MEMORIA_EMBEDDING_MODEL=hash: the deterministic test/demo embedder
        return HashEmbedder(cfg.embedding_dim)
    if cfg.embedding_backend != "torch":
        from .core.embedding_onnx import OnnxEmbedder

        quantized = cfg.embedding_backend == "onnx-int8"
        return OnnxEmbedder(cfg.embedding_model, quantized=quantized, batch_size=cfg.embedding_batch_size)
    return SentenceTransformerEmbedder(cfg.embedding_model, batch_size=cfg.embedding_batch_size)


def _load_plugins(cfg: Config) -> PluginRegistry:
    registry = PluginRegistry()
    if cfg.load_plugin_entry_points:
        registry.load_entry_points()
    if cfg.plugins:
        registry.load_from_config(cfg.plugins)
    return registry
