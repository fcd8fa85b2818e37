"""QueryPipeline: the query path, stage by stage in the spec's order (V4), and the V3 fallback.

    process -> embed -> route -> relevance pool -> shard selection -> workers (scheduler) ->
    final CTE -> cross-encoder -> type filter  |  ranking (or retrieval-only) -> response

Retrieval ends at the type filter (`retrieve` returns a Retrieval); ranking starts after it. Every
collaborator is handed in by MemorySystem; each stage is a method a caller may run on its own
(the benchmarks time them one by one).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import contextvars
import dataclasses
import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg

from ..config import Config
from ..core import validation
from ..core.embedding import QueryEmbedder
from ..core.text import normalize, normalize_entity
from ..core.types import VALID_NOW, CandidateRecord, ProcessedQuery, Route, SourceHit, Validity
from ..db import Database, load_sql, schema_current
from ..db.budget import current_budget, query_budget
from ..db.replicas import ReadRouter, ReadTarget, Replica, ReplicaFailed, lsn_text, server_failure
from ..errors import MemoriaError, first_line
from ..ranking import RankingStage
from .candidates import (
    Candidates,
    V3Result,
    build_candidates,
    build_v3_candidates,
    candidate_statement,
    filter_by_type,
    prefer_current_facts,
    retrieval_order,
    v3_statement,
)
from .diagnostics import Diagnostics
from .processor import EntityLookup, PrefetchedLookup, QueryProcessor, TableLookup, candidate_ngrams
from .relevance import relevance_pool
from .response import QueryResponse
from .routing import Router, submitted_workers
from .scheduler import Parts, Running, Scheduler, SchedulerResult, Task
from .shards import ALL as ALL_SHARD
from .shards import per_shard_limit, populated, select_shards, tenant_rows
from .time_window import time_window
from .tracing import persist_trace
from .workers import Worker, WorkerContext, WorkerRegistry
from .workers.bm25 import query_terms
from .workers.registry import NO_FEEDBACK
from .workers.vector import VectorWorker
from .workers.vector import exact as exact_search

ProcessorFactory = Callable[[Collection[str], EntityLookup], QueryProcessor]
_log = logging.getLogger(__name__)
ACCESS_LOCK_TIMEOUT_MS = 100  # how long the access upsert waits for a row lock (best effort)
# At most this many blocks ending in the background (each holding a pooled connection) before a ranked
# query waits for its access write after all: writes slowed by lock waits must not pin the pool.
WRITE_BEHIND_MAX = 8
# The server the running query reads from (QueryPipeline.read_db): set by `run` for its reads only.
_READ_DB: contextvars.ContextVar[Database | None] = contextvars.ContextVar("memoria_read_db", default=None)
_NO_VECTOR = np.zeros(0, dtype=np.float32)  # the context of the workers that start before the query is embedded


@dataclass(frozen=True)
class QueryRequest:
    """One query with every option resolved (MemorySystem.query fills in the configured defaults)."""

    text: str
    tenant: str
    top_k: int
    memory_type: str | None = None
    embedding: Sequence[float] | np.ndarray | None = None
    workers: tuple[str, ...] | None = None  # overrides the route's workers
    ranking: bool = True
    v4: bool = True
    trace: bool = False
    as_of: dt.datetime | None = None  # answer as of this time (None: now)
    include_invalid: bool = False  # also memories invalidated by then
    # the time "last week" and "four weeks ago" count back from (None: as_of, else now): time_window.py
    reference_time: dt.datetime | None = None
    candidates: bool = True  # the response carries every candidate (False: only what it returns)


@dataclass
class Retrieval:
    """What retrieval hands to ranking: the type-filtered candidates, retrieval order."""

    query: ProcessedQuery
    route: Route | None  # None on the V3 path
    candidates: list[CandidateRecord]
    submitted: list[str]


class QueryPipeline:
    """The query path over its collaborators; `run` is what MemorySystem.query calls."""

    def __init__(
        self,
        *,
        db: Database,
        config: Config,
        memory_types: Collection[str],
        processor_factory: ProcessorFactory,
        embedder: QueryEmbedder,
        router: Router,
        scheduler: Scheduler,
        registry: WorkerRegistry,
        ranking: RankingStage | None,
        graph_backend: str,
        reads: ReadRouter | None = None,
    ) -> None:
        self.db = db  # the primary: writes (access statistics, traces)
        self.reads = reads or ReadRouter(db, ())
        self.config = config
        self.memory_types = memory_types  # KnownTypes in a MemorySystem: a name it lacks is looked up
        self.processor_factory = processor_factory
        self.embedder = embedder
        self.router = router
        self.scheduler = scheduler
        # Config.lexical_feedback off: the registry's fusion without its lexical feedback.
        self.registry = registry if config.lexical_feedback else registry.with_feedback(NO_FEEDBACK)
        self.ranking = ranking
        self.graph_backend = graph_backend
        self._in_flight = 0  # queries reading now (read): finish_overlapped's spare cores
        self._access_failures = AccessFailures()  # the access writes that end after their queries
        self._in_flight_lock = threading.Lock()

    @property
    def read_db(self) -> Database:
        """The server the running query's reads go to: the one `run` chose, else the primary."""
        db = _READ_DB.get()
        return self.db if db is None else db

    def run(self, request: QueryRequest) -> QueryResponse:
        """The query, its statements under one budget (config.query_timeout_ms, db/budget.py)."""
        t_start = time.perf_counter()
        with query_budget(self.config.query_timeout_ms):
            retrieval, diag = self.read(request)
            returned = self.rank(retrieval, request, diag)
            return self.respond(retrieval, returned, request, diag, t_start)

    def read(self, request: QueryRequest) -> tuple[Retrieval, Diagnostics]:
        """Retrieval, on the server the read router chooses for the tenant (db/replicas.py): a standby
        that fails during it (connection lost, backend terminated, recovery conflict, no connection) is
        left out and the retrieval runs again on another standby or the primary, in what remains of
        the budget. A failure on the primary is raised."""
        with self._in_flight_lock:
            self._in_flight += 1
        try:
            return self._read(request)
        finally:
            with self._in_flight_lock:
                self._in_flight -= 1

    def _read(self, request: QueryRequest) -> tuple[Retrieval, Diagnostics]:
        failed: list[Replica] = []
        notes: list[str] = []
        while True:
            diag = Diagnostics(path="v4" if request.v4 else "v3", graph_backend=self.graph_backend)
            with self.reads.reading(request.tenant, failed) as target:
                _note_target(diag, target, notes)
                token = _READ_DB.set(target.db)
                try:
                    return self.retrieval(request, diag), diag
                except Exception as exc:
                    if target.replica is None or not server_failure(exc):
                        raise
                    why = f"{type(exc).__name__}: {next(iter(str(exc).strip().splitlines()), '')}"
                    self.reads.failed(target.replica, f"failed during a query ({why})")
                    failed.append(target.replica)
                    notes.append(f"{target.name} failed during the query ({why}); run again")
                finally:
                    _READ_DB.reset(token)

    def retrieval(self, request: QueryRequest, diag: Diagnostics) -> Retrieval:
        """Processing, embedding and retrieval (V4 or V3): every read of the query. A V4 query the
        library embeds is embedded beside its processing and starts its workers that need no vector
        before the embedding is in hand (Config.overlap_embedding: retrieval_overlapped)."""
        if not request.v4:
            return self.retrieval_v3(request, diag)
        if request.embedding is None and self.config.overlap_embedding:
            return self.retrieval_overlapped(request, diag)
        query, rows = self.process(request, diag)
        vector = self.embed_unbudgeted(query.normalized, request.embedding, diag)
        return self.retrieve(query, vector, rows, request, diag)

    def retrieval_overlapped(self, request: QueryRequest, diag: Diagnostics) -> Retrieval:
        """`retrieval` of a V4 query the library embeds. Once the request is checked, this thread embeds
        its normalized text while one of the scheduler's threads processes the query (the analysis, the
        entity lookup's round trip), routes it and starts the workers that need no vector
        (start_overlapped); the vector worker starts when the embedding is done (finish_overlapped).
        The model runs outside the interpreter's lock, so the two go on side by side, and the embedding
        does not wait for another thread to be scheduled. A typed query the relevance pool may answer
        starts no worker before it has the vector (relevance_applies). A processor whose normalized
        text is not `normalize(text)` (a subclass's) has its own text embedded afterwards: the vector is
        always that of query.normalized."""
        self.validate(request)
        validation.query_text(request.text, self.config.max_query_chars)  # before the text goes to the model
        normalized = normalize(request.text)
        started = self.scheduler.submit(self._process_and_start, request, normalized, diag)
        try:
            vector = self.embed_unbudgeted(normalized, None, diag)
        except BaseException:
            _abandon(started)  # cancels the workers it started, if any; the embedding's error is the query's
            raise
        overlap = started.result()  # processing's error is the query's
        if overlap.running is None:  # the relevance pool first, or another normalized text: no worker started
            if overlap.query.normalized != normalized:
                diag.embedding_beside_processing = False
                vector = self.embed_unbudgeted(overlap.query.normalized, None, diag)
            q, route, names, rows = overlap.query, overlap.route, overlap.names, overlap.rows
            return self.retrieve_routed(q, route, names, vector, rows, request, diag)
        return self.finish_overlapped(overlap, vector, request, diag)

    def _process_and_start(self, request: QueryRequest, normalized: str, diag: Diagnostics) -> _Overlap:
        """retrieval_overlapped's other thread: processing and routing, then the workers that need no
        vector started (unless the relevance pool may answer, or the processor normalized otherwise)."""
        diag.embedding_beside_processing = True
        query, rows = self.process(request, diag)
        query, route, names = self.route(query, request.workers, diag)
        names = self.leave_out_auxiliary(names, query, rows, request, diag)
        if query.normalized != normalized or self.relevance_applies(query):
            return _Overlap(query, route, tuple(names), rows)
        return self.start_overlapped(query, route, names, rows, diag)

    def retrieval_v3(self, request: QueryRequest, diag: Diagnostics) -> Retrieval:
        """V3's reads in one transaction. The query is checked and embedded first (the embedding reads
        only its normalized text). With the built-in vector worker, the search, the final CTE and the
        processor's entity lookup are then one statement (candidates.v3_statement), and processing
        runs on its answer (PrefetchedLookup); a tenant above the exact bound, which the statement
        leaves out, and another vector worker are searched after processing by the worker
        (retrieve_v3_in)."""
        self.validate(request)
        validation.query_text(request.text, self.config.max_query_chars)  # before embedding it
        normalized = normalize(request.text)
        vector = self.embed_unbudgeted(normalized, request.embedding, diag)
        # Generic plans for every statement: the V3 search reads every shard (no partition to prune),
        # and planning the final CTE each time cost more than its generic plan
        # (docs/measurements.md, "Why these defaults").
        with self.read_db.transaction(request.tenant, generic_plans=True, implicit=True, background_end=True) as conn:
            if type(self.registry["vector"]()) is not VectorWorker:
                t0 = time.perf_counter()
                query, rows = self.process_in(conn, request)
                diag.query_processing_ms = _ms(t0)
                self.read_db.renew_budget(conn)
                return self.retrieve_v3_in(
                    conn, query, vector, rows, request.top_k, diag, embeddings=self.reads_vectors(request)
                )  # fmt: skip
            grams = candidate_ngrams(normalized)
            validity = Validity(request.as_of, request.include_invalid)
            t0 = time.perf_counter()
            found = self._v3_statement(
                conn, vector, request.top_k, validity, self.reads_vectors(request), grams, self.fetch_limit(request)
            )
            diag.database_ms = _ms(t0)
            t1 = time.perf_counter()
            self.read_db.renew_budget(conn)  # in case processing asks the table after all
            lookup = PrefetchedLookup(grams, found.known_entities, TableLookup(conn))
            processor = self.processor_factory(self.memory_types, lookup)
            query = processor.process(request.text, tenant=request.tenant, memory_type=request.memory_type)
            query.validity = validity
            diag.query_processing_ms = _ms(t1)
            if found.hits == 0:  # nothing, or a tenant above the exact bound: the vector worker's search
                searched = self._v3_worker_search(
                    conn, query, vector, None, request.top_k, diag, self.reads_vectors(request)
                )
                if searched is not None:
                    return searched
        return self._v3_retrieval(query, found, diag)

    def embed_unbudgeted(
        self, normalized: str, embedding: Sequence[float] | np.ndarray | None, diag: Diagnostics
    ) -> np.ndarray:
        """`embed` outside the query's budget: it may load a model, which is not the statements' time."""
        budget = current_budget()
        with budget.paused() if budget is not None else contextlib.nullcontext():
            return self.embed(normalized, embedding, diag)

    # -- query processing and embedding ---------------------------------------------------------
    def process(self, request: QueryRequest, diag: Diagnostics) -> tuple[ProcessedQuery, dict[str, int]]:
        """The validated, analysed query, and the tenant's memories per memory type (shard sizes),
        read in one statement with the entity lookup."""
        t0 = time.perf_counter()
        self.validate(request)
        # Generic plans: the lookup reads two unpartitioned tables, and planning it each time cost
        # as much as running it (0.37 against 0.18 ms on LoCoMo).
        with self.read_db.transaction(request.tenant, generic_plans=True, implicit=True, background_end=True) as conn:
            query, rows = self.process_in(conn, request)
        diag.query_processing_ms = _ms(t0)
        return query, rows

    def validate(self, request: QueryRequest) -> None:
        """The request's memory type, workers and tenant (before it becomes a transaction's setting);
        the processor checks the text."""
        validation.memory_type(request.memory_type, self.memory_types)
        validation.requested_workers(request.workers, self.registry.names)
        validation.tenant(request.tenant)

    def process_in(self, conn: psycopg.Connection, request: QueryRequest) -> tuple[ProcessedQuery, dict[str, int]]:
        """`process` in the caller's tenant transaction."""
        lookup = TableLookup(conn)  # the entity lookup reads the shard sizes too (sql/query_lookup)
        processor = self.processor_factory(self.memory_types, lookup)
        query = processor.process(request.text, tenant=request.tenant, memory_type=request.memory_type)
        if lookup.rows is not None:
            rows = lookup.rows
        else:  # nothing looked up (no n-gram, or a processor that does not call the lookup)
            self.read_db.renew_budget(conn)
            rows = tenant_rows(conn)
        query.validity = Validity(request.as_of, request.include_invalid)
        query.time_window = time_window(
            request.text, request.reference_time or request.as_of or dt.datetime.now(dt.UTC)
        )
        return query, rows

    def embed(self, normalized: str, embedding: Sequence[float] | np.ndarray | None, diag: Diagnostics) -> np.ndarray:
        """The query's vector: the caller's (checked), or the embedder's for the normalized text."""
        t0 = time.perf_counter()
        if embedding is not None:
            vector = validation.vector(embedding, self.config.embedding_dim, "query embedding")
        else:
            vector = self.embedder.embed_query(normalized)
        diag.embedding_ms = _ms(t0)
        return vector

    # -- retrieval (V4) ---------------------------------------------------------------------------
    def retrieve(
        self,
        query: ProcessedQuery,
        vector: np.ndarray,
        rows: Mapping[str, int],
        request: QueryRequest,
        diag: Diagnostics,
    ) -> Retrieval:
        """Route, relevance pool, shards, workers, final CTE, cross-encoder and type filter."""
        query, route, names = self.route(query, request.workers, diag)
        names = self.leave_out_auxiliary(names, query, rows, request, diag)
        return self.retrieve_routed(query, route, names, vector, rows, request, diag)

    def retrieve_routed(
        self,
        query: ProcessedQuery,
        route: Route,
        names: Sequence[str],
        vector: np.ndarray,
        rows: Mapping[str, int],
        request: QueryRequest,
        diag: Diagnostics,
    ) -> Retrieval:
        """`retrieve` once routed: relevance pool, shards, workers, final CTE, cross-encoder, type filter."""
        ctx = self.context(query, route, vector, rows)
        diag.shards = [s.memory_type or "*" for s in ctx.shards]
        t0 = time.perf_counter()
        hits = self.relevance(query, vector, request.top_k, diag)
        if diag.relevance_fast_path:
            names, diag.skipped_sources = [], []  # no worker runs: the pool answers
        hits.update(self.run_workers(names, ctx, diag))
        return self.finish_retrieval(query, route, hits, t0, diag, request, ctx)

    def start_overlapped(
        self, query: ProcessedQuery, route: Route, names: Sequence[str], rows: Mapping[str, int], diag: Diagnostics
    ) -> _Overlap:
        """The workers that need no vector, started before the query is embedded (retrieval_overlapped);
        finish_overlapped adds the others (vector) and finishes the run under the completion policy,
        its deadline counted from then. Only where the relevance pool cannot answer (relevance_applies):
        its fast path needs the vector before any worker."""
        early = [n for n in names if not getattr(self.registry[n], "uses_embedding", True)]
        late = tuple(n for n in names if n not in early)
        ctx = self.context(query, route, _NO_VECTOR, rows)
        diag.shards = [s.memory_type or "*" for s in ctx.shards]
        if self.config.enable_relevance_pool:
            diag.relevance_pool_count, diag.relevance_fast_path = 0, False
        t0, db = time.perf_counter(), self.read_db
        deadline = self.config.retrieval_deadline_ms
        running = self.scheduler.start(self.tasks(early, ctx), tenant=query.tenant, deadline_ms=deadline, db=db)
        return _Overlap(query, route, tuple(names), rows, late, ctx, running, db, t0)

    def finish_overlapped(
        self, overlap: _Overlap, vector: np.ndarray, request: QueryRequest, diag: Diagnostics
    ) -> Retrieval:
        """start_overlapped's run with the vector: its other workers added, the run finished, the final CTE.
        The vector search starts after the others had a head start: with no other query of the process
        in flight (alone) it may take two statements (WorkerContext.spare_cores, VectorWorker.parts)."""
        running, ctx, db = overlap.running, overlap.ctx, overlap.db
        if running is None or ctx is None or db is None:
            raise RuntimeError("finish_overlapped needs a run start_overlapped started")
        query, route, names = overlap.query, overlap.route, overlap.names
        try:
            ctx = dataclasses.replace(ctx, embedding=vector, spare_cores=self.alone())
            running.add(self.tasks(overlap.late, ctx))  # QueryTimeout if the budget is spent by now
        except BaseException:
            running.abandon()  # cancels what still runs; the budget's error is the query's
            raise
        diag.embedding_overlapped = True
        if not names:
            running.finish()
            return self.finish_retrieval(query, route, self._no_workers(diag), overlap.t0, diag, request, ctx)
        result = running.finish()
        result.states = {name: result.states[name] for name in names}  # the route's order, as submitted
        hits = self._record(result, db, diag)
        return self.finish_retrieval(query, route, dict(hits), overlap.t0, diag, request, ctx)

    def alone(self) -> bool:
        """Whether no other query of this pipeline is reading now: the cores are this query's, as far as
        the process can tell (other processes and the server's other clients it cannot see)."""
        with self._in_flight_lock:
            return self._in_flight <= 1

    def finish_retrieval(
        self,
        query: ProcessedQuery,
        route: Route,
        hits: dict[str, list[SourceHit]],
        t0: float,
        diag: Diagnostics,
        request: QueryRequest,
        ctx: WorkerContext,
    ) -> Retrieval:
        """After the workers: the final CTE, current facts first, the cross-encoder and the type filter.
        Where the auxiliary workers were left out (leave_out_auxiliary) and their candidates could be
        among those returned after all, they run now and the final CTE runs again with their hits."""
        diag.worker_hits = {k: len(v) for k, v in hits.items()}
        diag.retrieval_ms = _ms(t0)
        candidates = self.final_candidates(query, hits, diag, request)
        if diag.skipped_sources and not _decided_without_auxiliary(candidates, request.top_k, query, ctx):
            skipped, diag.skipped_sources = diag.skipped_sources, []
            hits = {**hits, **self.run_workers(skipped, ctx, diag, more=True)}
            diag.worker_hits = {k: len(v) for k, v in hits.items()}
            diag.retrieval_ms = _ms(t0)
            candidates = self.final_candidates(query, hits, diag, request)
        candidates = self.cross_encode(query, candidates, diag)
        candidates, diag.type_filter_applied = filter_by_type(candidates, query.memory_type_hint)
        return Retrieval(query, route, candidates, diag.submitted_sources)

    def final_candidates(
        self, query: ProcessedQuery, hits: dict[str, list[SourceHit]], diag: Diagnostics, request: QueryRequest
    ) -> list[CandidateRecord]:
        """The final CTE's candidates in retrieval order, current facts first."""
        found = self.candidates(
            hits, query.tenant, diag, query.validity, embeddings=self.reads_vectors(request),
            fetch=self.fetch_limit(request), prefer_type=query.memory_type_hint, terms=feedback_terms(query, hits),
        )  # fmt: skip
        return prefer_current_facts(retrieval_order(found))

    def leave_out_auxiliary(
        self,
        names: Sequence[str],
        query: ProcessedQuery,
        rows: Mapping[str, int],
        request: QueryRequest,
        diag: Diagnostics,
    ) -> list[str]:
        """The route's workers without its auxiliary ones (no weight in the retrieval score: graph,
        phrase) where nothing reads what they add. Such a worker changes a retrieval-only answer only
        through the candidates it alone finds, which rank after every candidate with a fused score or a
        vector distance (sql/final_candidates.sql's order), and through the type filter, which such a
        candidate of the hinted type can switch on. So for a query that returns its top_k memories and
        nothing else (fetch_limit), with no workers of the caller's, whose tenant holds at least top_k
        memories (a cheap bound: the check after the final CTE decides), they are left out
        (diagnostics: skipped_sources); should the answer then not be decided without them
        (_decided_without_auxiliary), they run after all
        (finish_retrieval). The memories returned, and their order and retrieval scores, are the same;
        their `sources` do not name the workers left out."""
        cfg = self.config
        if not cfg.skip_auxiliary_workers or request.workers is not None:
            return list(names)
        if self.fetch_limit(request) is None or "vector" not in names:
            return list(names)
        weights = self.registry.weights(cfg.fusion_method)
        auxiliary = [n for n in names if n != "vector" and weights.get(n, 0.0) == 0.0]
        if not auxiliary or sum(rows.values()) < request.top_k:
            return list(names)
        diag.skipped_sources = auxiliary
        return [n for n in names if n not in auxiliary]

    def route(
        self, query: ProcessedQuery, workers: Sequence[str] | None, diag: Diagnostics
    ) -> tuple[ProcessedQuery, Route, list[str]]:
        """The query as the routing hooks left it, its Route (with the caller's workers, if any),
        and the route's workers whose preconditions hold."""
        query, route = self.router.route_query(query)
        diag.route = route.name
        if workers:
            route = Route(
                route.name, tuple(workers), route.graph_depth, route.signals, route.pool, route.fallback_pools
            )
        return query, route, submitted_workers(route, query, self.config, self.registry)

    def context(
        self, query: ProcessedQuery, route: Route, vector: np.ndarray, rows: Mapping[str, int]
    ) -> WorkerContext:
        """The selected shards and the per-shard limits every worker of this query runs with.

        `rows`: the tenant's memories per memory type (sql/tenant_rows); shards where it has none
        are not read, so the limits go to the shards that can return something."""
        cfg = self.config
        shards = populated(
            select_shards(route, query.memory_type_hint, tuple(self.memory_types), sharding=cfg.enable_sharding), rows
        )
        return WorkerContext(
            query=query,
            embedding=vector,
            shards=shards,
            limit=per_shard_limit(cfg.worker_limit, shards),
            graph_limit=per_shard_limit(cfg.graph_candidate_limit, shards),
            graph_depth=route.graph_depth,
            config=cfg,
            graph_backend=self.graph_backend,
            tenant_rows=rows,
            as_of=query.validity.as_of,
        )

    def relevance(
        self, query: ProcessedQuery, vector: np.ndarray, top_k: int, diag: Diagnostics
    ) -> dict[str, list[SourceHit]]:
        """The relevance pool's hits as a source; a pool of top_k or more is the fast path."""
        cfg = self.config
        if not cfg.enable_relevance_pool:
            return {}
        pool = relevance_pool(
            self.read_db,
            query,
            vector,
            top_k=top_k,
            limit=cfg.ranking_candidate_limit,
            default_type=cfg.default_memory_type,
        )
        diag.relevance_pool_count = len(pool)
        diag.relevance_fast_path = len(pool) >= top_k
        return {"relevance": pool} if pool else {}

    def tasks(self, names: Sequence[str], ctx: WorkerContext) -> dict[str, Task | Parts]:
        """One scheduler task per worker, bound to the query's context."""
        return {name: _bind(self.registry[name](), ctx) for name in names}

    def run_workers(
        self, names: Sequence[str], ctx: WorkerContext, diag: Diagnostics, *, more: bool = False
    ) -> dict[str, list[SourceHit]]:
        """The workers, concurrently under the completion policy; the completed ones' hits. `more`:
        workers run after others of the query (finish_retrieval), recorded beside them."""
        if not names:
            return self._no_workers(diag)
        db = self.read_db
        result = self.scheduler.run(
            self.tasks(names, ctx), tenant=ctx.query.tenant, deadline_ms=self.config.retrieval_deadline_ms, db=db
        )
        return self._record(result, db, diag, more=more)

    def _no_workers(self, diag: Diagnostics) -> dict[str, list[SourceHit]]:
        diag.retrieval_policy = self.scheduler.policy.name
        diag.retrieval_finish_reason = "relevance_fast_path" if diag.relevance_fast_path else "no_workers"
        diag.policy_satisfied = True
        return {}

    def _record(
        self, result: SchedulerResult, db: Database, diag: Diagnostics, *, more: bool = False
    ) -> dict[str, list[SourceHit]]:
        diag.record_scheduler(result, more=more)
        if result.broken and db is not self.db:  # a standby failed under them: QueryPipeline.read runs again
            raise ReplicaFailed(f"workers {', '.join(result.broken)} lost their standby connection")
        return result.hits

    def relevance_applies(self, query: ProcessedQuery) -> bool:
        """Whether the relevance pool may hold memories for this query (relevance.py: a typed query
        whose type is not the default one), so that it must run, with the vector, before the workers."""
        hint = query.memory_type_hint
        return self.config.enable_relevance_pool and bool(hint) and hint != self.config.default_memory_type

    def candidates(
        self,
        hits: Mapping[str, Sequence[SourceHit]],
        tenant: str,
        diag: Diagnostics,
        validity: Validity = VALID_NOW,
        *,
        embeddings: bool = True,
        fetch: int | None = None,
        prefer_type: str | None = None,
        terms: Sequence[str] = (),
    ) -> Candidates:
        """Merge, dedup, fuse, cap and fetch in the final CTE (on its cached generic plan); without
        `embeddings` the candidates carry no vectors (a retrieval-only query: only ranking reads them);
        with `fetch`, only the rows that can be among the first `fetch` after the type filter
        (`prefer_type`) are read (build_candidates); `terms`: the BM25 worker's, for the lexical
        feedback (given where it and the vector worker completed: feedback_terms)."""
        t0 = time.perf_counter()
        with self.read_db.transaction(tenant, generic_plans=True, implicit=True, background_end=True) as conn:
            candidates = build_candidates(
                conn, hits, self.registry, validity=validity, embeddings=embeddings, fetch=fetch,
                prefer_type=prefer_type, terms=terms, **self._fusion(),
            )  # fmt: skip
        diag.database_ms = _ms(t0)
        diag.candidate_count = candidates.total
        return candidates

    def fetch_limit(self, request: QueryRequest) -> int | None:
        """How many candidate rows the final CTE reads: every one (None), unless nothing reads more
        than the top_k it returns: a retrieval-only query (no ranking, no cross-encoder) whose caller
        asked for no candidate list (query(..., candidates=False)) and no trace."""
        cfg = self.config
        if request.candidates or request.trace or self.ranks(request):
            return None
        if cfg.enable_cross_encoder and cfg.cross_encoder_model:
            return None
        return request.top_k

    def candidate_statement(
        self, hits: Mapping[str, Sequence[SourceHit]], validity: Validity = VALID_NOW, terms: Sequence[str] = ()
    ) -> tuple[str, dict[str, Any]]:
        """The final CTE and its parameters as `candidates` runs them (for EXPLAIN)."""
        return candidate_statement(hits, self.registry, validity=validity, terms=terms, **self._fusion())

    def _fusion(self) -> dict[str, Any]:
        """The final CTE's configured cap and fusion (build_candidates' and candidate_statement's)."""
        cfg = self.config
        return {
            "cap": cfg.ranking_candidate_limit,
            "rrf_k": cfg.rrf_k,
            "depth": cfg.rrf_depth,
            "method": cfg.fusion_method,
            "bm25": (cfg.bm25_k1, cfg.bm25_b),
        }

    def cross_encode(
        self, query: ProcessedQuery, candidates: list[CandidateRecord], diag: Diagnostics
    ) -> list[CandidateRecord]:
        """The optional cross-encoder over the head of the retrieval order."""
        cfg = self.config
        if not (cfg.enable_cross_encoder and cfg.cross_encoder_model):
            return candidates
        from .cross_encoder import load_cross_encoder, rerank

        diag.cross_encoder_applied = True
        return rerank(load_cross_encoder(cfg.cross_encoder_model), query, candidates, cfg.cross_encoder_top_n)

    # -- retrieval (V3) ---------------------------------------------------------------------------
    def retrieve_v3(
        self,
        query: ProcessedQuery,
        vector: np.ndarray,
        rows: Mapping[str, int],
        top_k: int,
        diag: Diagnostics,
        *,
        embeddings: bool = True,
    ) -> Retrieval:
        """V3: vector search -> fetch -> candidates in one transaction; no scheduler."""
        # Generic plans for both statements: the V3 search reads every shard (no partition to prune),
        # and planning the final CTE each time cost more than its generic plan
        # (docs/measurements.md, "Why these defaults").
        with self.read_db.transaction(query.tenant, generic_plans=True, implicit=True, background_end=True) as conn:
            return self.retrieve_v3_in(conn, query, vector, rows, top_k, diag, embeddings=embeddings)

    def retrieve_v3_in(
        self,
        conn: psycopg.Connection,
        query: ProcessedQuery,
        vector: np.ndarray,
        rows: Mapping[str, int],
        top_k: int,
        diag: Diagnostics,
        *,
        embeddings: bool = True,
    ) -> Retrieval:
        """`retrieve_v3` in the caller's tenant transaction (on generic plans). With the built-in
        vector worker the exact search and the final CTE are one statement (candidates.v3_statement),
        its time in `database_ms`, for a tenant within the exact bound; for a larger one (the statement
        answers nothing) and for another vector worker, the worker runs (with `rows`, the tenant's
        memories per type), then the final CTE on its hits."""
        worker = self.registry["vector"]()
        if type(worker) is VectorWorker:
            t0 = time.perf_counter()
            found = self._v3_statement(conn, vector, top_k, query.validity, embeddings, [])
            diag.database_ms = _ms(t0)
            if found.hits == 0:  # nothing, or a tenant above the exact bound: the vector worker's search
                searched = self._v3_worker_search(conn, query, vector, rows, top_k, diag, embeddings)
                if searched is not None:
                    return searched
            return self._v3_retrieval(query, found, diag)
        return self._v3_worker_retrieval(conn, worker, query, vector, rows, top_k, diag, embeddings)

    def _v3_worker_search(
        self,
        conn: psycopg.Connection,
        query: ProcessedQuery,
        vector: np.ndarray,
        rows: Mapping[str, int] | None,
        top_k: int,
        diag: Diagnostics,
        embeddings: bool,
    ) -> Retrieval | None:
        """V3 for a tenant above the exact bound, whose rows V3's one statement leaves out: the vector
        worker searches it (per memory type, on the tenant's own HNSW indexes where it has them:
        VectorWorker.split_search), on custom plans, which alone can take a per-tenant index, then the final
        CTE runs on its hits. None when the tenant is within the bound (the statement's empty answer
        stands). `rows`: the tenant's memories per type, read here when None."""
        rows = tenant_rows(conn) if rows is None else rows
        if not self.v3_above_bound(rows):
            return None
        worker = self.registry["vector"]()
        return self._v3_worker_retrieval(conn, worker, query, vector, rows, top_k, diag, embeddings)

    def v3_above_bound(self, rows: Mapping[str, int]) -> bool:
        """Whether V3's one statement leaves the tenant (its memories per type: `rows`) to the vector
        worker: above vector_exact_max_rows (sql/v3_search.sql's rule), or always when it is 0."""
        bound = self.config.vector_exact_max_rows
        return bound <= 0 or not exact_search(rows, ALL_SHARD, bound)

    def _v3_worker_retrieval(
        self,
        conn: psycopg.Connection,
        worker: Worker,
        query: ProcessedQuery,
        vector: np.ndarray,
        rows: Mapping[str, int],
        top_k: int,
        diag: Diagnostics,
        embeddings: bool,
    ) -> Retrieval:
        """V3 through a vector worker's run: its hits, then the final CTE on them, on its generic plan.
        The transaction's statements run on generic plans; a worker that wants custom ones (the vector
        worker's HNSW form: only a custom plan naming the tenant takes the tenant's own index) gets
        them for its run. `database_ms` adds the final CTE's time to what it holds (V3's statement)."""
        ctx = self._v3_context(query, vector, rows, top_k)
        custom = not worker.plans_generic(ctx)
        t0 = time.perf_counter()
        if custom:
            conn.execute("SELECT set_config('plan_cache_mode', 'force_custom_plan', true)")
        vector_hits = worker.run(conn, ctx)
        if custom:
            conn.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
        diag.retrieval_ms = _ms(t0)
        t1 = time.perf_counter()
        self.read_db.renew_budget(conn)
        candidates = build_candidates(
            conn, {"vector": vector_hits}, self.registry, validity=query.validity, embeddings=embeddings,
            **self._fusion(),
        )  # fmt: skip
        diag.database_ms += _ms(t1)
        return self._v3_retrieval(query, V3Result(candidates, len(vector_hits), None, candidates.total), diag)

    def _v3_statement(
        self,
        conn: psycopg.Connection,
        vector: np.ndarray,
        top_k: int,
        validity: Validity,
        embeddings: bool,
        grams: Sequence[str],
        fetch: int | None = None,
    ) -> V3Result:
        """V3's one statement (candidates.build_v3_candidates) with the configured limits."""
        cfg = self.config
        statement = v3_statement(
            vector, self.registry, limit=max(cfg.worker_limit, top_k), exact_max_rows=cfg.vector_exact_max_rows,
            norms=[normalize_entity(g) for g in grams], validity=validity, embeddings=embeddings, fetch=fetch,
            **self._fusion(),
        )  # fmt: skip
        return build_v3_candidates(conn, statement, self.registry)

    def _v3_retrieval(self, query: ProcessedQuery, found: V3Result, diag: Diagnostics) -> Retrieval:
        """V3's diagnostics and retrieval order (inverse distance) over its candidates."""
        diag.submitted_sources = ["vector"]
        diag.completed_sources = ["vector"]
        diag.worker_hits = {"vector": found.hits}
        diag.candidate_count = found.total
        candidates = sorted(found.candidates, key=lambda c: (-c.base_score, c.memory_id))
        for c in candidates:
            c.final_score = c.base_score
        return Retrieval(query, None, candidates, ["vector"])

    def _v3_context(
        self, query: ProcessedQuery, vector: np.ndarray, rows: Mapping[str, int], top_k: int
    ) -> WorkerContext:
        """V3's one shard (the whole table) and its vector limit."""
        shards = select_shards(Route("v3", ("vector",)), None, self.memory_types, sharding=False)
        return WorkerContext(
            query=query,
            embedding=vector,
            shards=shards,
            limit=max(self.config.worker_limit, top_k),
            graph_limit=0,
            graph_depth=0,
            config=self.config,
            tenant_rows=rows,
            as_of=query.validity.as_of,
        )

    # -- ranking and the response -----------------------------------------------------------------
    def ranks(self, request: QueryRequest) -> bool:
        """Whether the query runs the ranking stage."""
        return request.ranking and self.ranking is not None

    def reads_vectors(self, request: QueryRequest) -> bool:
        """Whether the query's candidates need their vectors: only a ranking stage that reads them
        does (RankingStage: MMR, signal plugins, or a stage of the caller's that does not say)."""
        return self.ranks(request) and bool(getattr(self.ranking, "reads_embeddings", True))

    def rank(self, retrieval: Retrieval, request: QueryRequest, diag: Diagnostics) -> list[CandidateRecord]:
        """The ranking stage's top_k, or the retrieval order's (retrieval-only)."""
        t0 = time.perf_counter()
        if request.ranking and self.ranking is not None:
            boost = retrieval.route.signals if retrieval.route is not None else ()
            returned = self.ranking.rank(
                retrieval.query, list(retrieval.candidates), request.top_k, retrieval.submitted, boost=boost
            )
            diag.ranking_skipped = False
        else:
            returned = retrieval.candidates[: request.top_k]
            diag.ranking_skipped = True
        diag.ranking_ms = _ms(t0)
        return returned

    def respond(
        self,
        retrieval: Retrieval,
        returned: list[CandidateRecord],
        request: QueryRequest,
        diag: Diagnostics,
        t_start: float,
    ) -> QueryResponse:
        """Access statistics (ranked queries), the trace (when asked), and the response."""
        t0 = time.perf_counter()
        diag.returned_count = len(returned)
        if returned and request.ranking:
            diag.access_error = self.record_access(retrieval.query.tenant, returned)
        if request.trace:
            diag.total_ms = _ms(t_start)
            diag.trace_id = persist_trace(
                self.db, retrieval.query, retrieval.route, retrieval.candidates, returned, diag
            )
        diag.response_ms = _ms(t0)
        diag.total_ms = _ms(t_start)
        return QueryResponse(
            query=retrieval.query,
            route=retrieval.route,
            memories=returned,
            diagnostics=diag,
            candidates=retrieval.candidates,
        )

    def record_access(self, tenant: str, returned: Sequence[CandidateRecord]) -> str | None:
        """The access statistics of the returned memories, best effort: a row lock not granted within
        ACCESS_LOCK_TIMEOUT_MS, a spent budget or a server error leave them as they were, never raised:
        the answer is computed by then. By default the query does not wait for the write: the statement
        is sent and the server's answer and commit are awaited in the background (Database.transaction's
        write_behind), a failure logged as a warning (AccessFailures); Diagnostics.access_error holds
        only what failed before the statement went (a spent budget, no connection). The query waits,
        and access_error holds any failure, with `access_statistics_wait`, with standbys (the tenant's
        next query must find the counts wherever it reads: ReadRouter.wrote first), and when
        WRITE_BEHIND_MAX blocks are already ending in the background. It commits asynchronously
        (synchronous_commit off): no wait for a WAL flush, and a server crash may lose the counts of the
        last fraction of a second (at most three wal_writer_delay). On its cached generic plan: no
        partition key to prune by, and planning it each time doubled its cost (1.3 against 0.6 ms on
        LoCoMo)."""
        waits = self.config.access_statistics_wait or self.reads.enabled or self.db.ending() >= WRITE_BEHIND_MAX
        behind = None if waits else self._access_failures.outcome
        try:
            with (
                self.db.transaction(
                    tenant,
                    lock_timeout_ms=ACCESS_LOCK_TIMEOUT_MS,
                    synchronous_commit=False,
                    generic_plans=True,
                    implicit=True,  # one statement: the Sync commits it
                    tenant_lock="shared",  # after a delete under way, which removes the deleted memories' rows
                    write_behind=behind,
                ) as conn,
                schema_current(),
            ):
                conn.execute(load_sql("record_access"), {"ids": [c.memory_id for c in returned]})
        except (psycopg.Error, MemoriaError) as exc:
            first = next(iter(str(exc).strip().splitlines()), "")
            return f"{type(exc).__name__}: {first}".strip()
        if behind is None:
            # A write of the tenant like any other: its next query (on a standby that has replayed it, or
            # the primary) ranks with these counts; its position is the WAL insert position, since its
            # commit record may not be written yet. Nothing without standbys.
            self.reads.wrote(tenant, asynchronous=True)
        return None


class AccessFailures:
    """The outcome of the access-statistics writes that end after their queries returned: a failure is
    logged as a warning at once, then at most once every LOG_EVERY_S seconds with how many failed
    meanwhile (under contention a best-effort statistic can fail often, and the log is no place for
    each of them); `failed` counts them all."""

    LOG_EVERY_S = 60.0

    def __init__(self) -> None:
        self.failed = 0
        self._unlogged = 0
        self._logged_at: float | None = None
        self._lock = threading.Lock()

    def outcome(self, error: Exception | None) -> None:
        if error is None:
            return
        now = time.monotonic()
        with self._lock:
            self.failed += 1
            self._unlogged += 1
            if self._logged_at is not None and now - self._logged_at < self.LOG_EVERY_S:
                return
            count, self._unlogged, self._logged_at = self._unlogged, 0, now
        _log.warning(
            "the access statistics of %s not recorded (best effort; the answers were not affected): %s: %s",
            "a ranked query were" if count == 1 else f"{count} ranked queries were", type(error).__name__,
            first_line(error),
        )  # fmt: skip


def _note_target(diag: Diagnostics, target: ReadTarget, notes: Sequence[str]) -> None:
    diag.server, diag.routing_ms = target.name, target.routing_ms
    diag.server_note = "; ".join([*notes, target.note] if target.note else notes) or None
    diag.read_your_writes_lsn = lsn_text(target.required_lsn) if target.required_lsn else None


def _bind(worker: Worker, ctx: WorkerContext) -> Task | Parts:
    parts = worker.parts(ctx)
    if parts:
        runs = tuple(Task(functools.partial(worker.run_part, statement=s), generic_plans=g) for s, g in parts)
        return Parts(runs, functools.partial(worker.merge, limit=ctx.limit))
    return Task(lambda conn: worker.run(conn, ctx), generic_plans=worker.plans_generic(ctx))


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def feedback_terms(query: ProcessedQuery, hits: Mapping[str, Sequence[SourceHit]]) -> list[str]:
    """The BM25 worker's terms, for the final CTE's lexical feedback, where it and the vector worker
    both completed (their hits are in, even none): the feedback re-scores a fusion of the two. None
    otherwise: a query whose caller chose one of them alone gets that source alone."""
    return query_terms(query) if "bm25" in hits and "vector" in hits else []


def _decided_without_auxiliary(
    candidates: Sequence[CandidateRecord], top_k: int, query: ProcessedQuery, ctx: WorkerContext
) -> bool:
    """Whether the first `top_k` memories returned are those of the query with its auxiliary workers too
    (leave_out_auxiliary): after the type filter there are that many, each with a fused score or a
    vector distance, so no candidate an auxiliary worker alone would find (no score, no distance)
    ranks before any of them; and a type filter that did not apply could not have applied with them
    (the tenant has no memory of the hinted type)."""
    hint = query.memory_type_hint
    kept, applied = filter_by_type(list(candidates), hint)
    if hint and not applied and (ctx.tenant_rows is None or ctx.tenant_rows.get(hint, 0) > 0):
        return False
    head = kept[:top_k]
    return len(head) >= top_k and all(c.retrieval_score > 0 or "vector_distance" in c.scores for c in head)


@dataclass(frozen=True)
class _Overlap:
    """What the processing thread of retrieval_overlapped hands back: the processed and routed query,
    and, when it started the workers that need no vector, their run (start_overlapped)."""

    query: ProcessedQuery
    route: Route
    names: tuple[str, ...]
    rows: Mapping[str, int]
    late: tuple[str, ...] = ()  # the workers to add once the vector is in hand
    ctx: WorkerContext | None = None
    running: Running | None = None
    db: Database | None = None
    t0: float = 0.0


def _abandon(started: cf.Future[_Overlap]) -> None:
    """After the embedding failed: once the processing thread is done, cancel the run it started."""
    try:
        overlap = started.result()
    except Exception:  # processing failed too: nothing was started
        return
    if overlap.running is not None:
        overlap.running.abandon()
