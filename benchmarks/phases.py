"""The query measurements: latency passes, side-by-side comparisons, throughput, the real model."""

from __future__ import annotations

import concurrent.futures as cf
import time
from typing import Any

import corpus
import psycopg
import report
from library import sql_text
from timing import log, ms_since

from memoria_pg import Config, Diagnostics, HashEmbedder, MemorySystem, QueryRequest, WorkerContext, normalize

DIM = 384


class Bench:
    def __init__(self, system: MemorySystem, queries: list[corpus.Query]) -> None:
        self.system = system
        self.queries = queries
        embedder = HashEmbedder(DIM)
        self.vectors = [embedder.embed([normalize(q.text)])[0] for q in queries]

    def query(self, i: int, *, v4: bool = True, ranking: bool = False, embedding: bool = True, candidates: bool = True):
        q = self.queries[i]
        return self.system.query(
            q.text,
            tenant=q.tenant,
            memory_type=q.memory_type,
            ranking=ranking,
            v4=v4,
            embedding=self.vectors[i] if embedding else None,
            candidates=candidates,
        )

    def context(self, i: int):
        """The query's bound worker tasks, built the way QueryPipeline.retrieve builds them."""
        system, q = self.system, self.queries[i]
        pipeline, diag = system.pipeline, Diagnostics()
        request = QueryRequest(text=q.text, tenant=q.tenant, top_k=system.config.top_k, memory_type=q.memory_type)
        query, rows = pipeline.process(request, diag)
        query, route, names = pipeline.route(query, None, diag)
        ctx = pipeline.context(query, route, self.vectors[i], rows)
        return query, route, ctx, pipeline.tasks(names, ctx)


def answered(response, q: corpus.Query) -> bool | None:
    """Whether a memory that states the fact is among the results (None: not an attribute question)."""
    if q.expect is None:
        return None
    if q.statements:
        return any(t.casefold() in m.content.casefold() for m in response.memories for t in q.statements)
    want = q.expect.casefold()
    return any(want in m.content.casefold() and q.subject.casefold() in m.content.casefold() for m in response.memories)


def record(q: corpus.Query, response) -> dict[str, Any]:
    d = response.diagnostics
    return {
        "text": q.text,
        "tenant": q.tenant,
        "category": q.category,
        "memory_type": q.memory_type,
        "route": d.route,
        "shards": d.shards,
        "total_ms": d.total_ms,
        "embedding_ms": d.embedding_ms,
        "processing_ms": d.query_processing_ms,
        "retrieval_ms": d.retrieval_ms,
        "database_ms": d.database_ms,
        "ranking_ms": d.ranking_ms,
        "worker_ms": dict(d.worker_ms),
        "worker_hits": dict(d.worker_hits),
        "finish": d.retrieval_finish_reason,
        "failed": dict(d.worker_errors),
        "relevance_fast_path": d.relevance_fast_path,
        "candidates": d.candidate_count,
        "answered": answered(response, q),
    }


def latency_passes(bench: Bench, hnsw: Bench | None = None) -> dict[str, list[dict[str, Any]]]:
    """V4 retrieval-only (with the candidate list, and without it: query(..., candidates=False), what a
    caller that reads only the memories runs), V3 retrieval-only and V4 with ranking, interleaved per
    query; with `hnsw` (a Bench on a system configured with vector_exact_max_rows=0), also V4
    retrieval-only with the vector worker on HNSW for every tenant: the vector search before the exact
    path existed."""
    modes = {
        "v4": (bench, dict(v4=True, ranking=False)),
        "v4_lean": (bench, dict(v4=True, ranking=False, candidates=False)),
        "v3": (bench, dict(v4=False, ranking=False)),
        "v4_ranked": (bench, dict(v4=True, ranking=True)),
    }
    if hnsw is not None:
        modes["v4_hnsw"] = (hnsw, dict(v4=True, ranking=False))
    out: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for i, q in enumerate(bench.queries):
        order = list(modes) if i % 2 == 0 else list(reversed(modes))
        for mode in order:
            runner, kw = modes[mode]
            out[mode].append(record(q, runner.query(i, **kw)))
    return out


def cpu_cost(bench: Bench, meter) -> dict[str, dict[str, Any]]:
    """CPU per query (client + PostgreSQL backends), each mode as its own sequential pass."""
    out = {}
    for mode, kw in (
        ("v4", dict(v4=True, ranking=False)),
        ("v4_lean", dict(v4=True, ranking=False, candidates=False)),
        ("v3", dict(v4=False, ranking=False)),
        ("v4_ranked", dict(v4=True, ranking=True)),
    ):
        before = meter.snapshot()
        t0 = time.perf_counter()
        for i in range(len(bench.queries)):
            bench.query(i, **kw)
        wall = time.perf_counter() - t0
        cpu = meter.since(before)
        n = len(bench.queries)
        out[mode] = {
            "queries": n,
            "wall_ms": wall * 1000 / n,
            "client_cpu_ms": cpu["client_s"] * 1000 / n,
            "server_cpu_ms": None if cpu["server_s"] is None else cpu["server_s"] * 1000 / n,
        }
    return out


def concurrent_vs_sequential(bench: Bench) -> list[dict[str, Any]]:
    system, rows = bench.system, []
    scheduler = system.pipeline.scheduler
    for i, q in enumerate(bench.queries):
        _, _, _, tasks = bench.context(i)
        if not tasks:
            continue
        timings = {}
        noop = {name: (lambda conn: []) for name in tasks}
        t0 = time.perf_counter()
        scheduler.run(noop, tenant=q.tenant, deadline_ms=system.config.retrieval_deadline_ms)
        timings["noop_concurrent_ms"] = ms_since(t0)
        for way in ("concurrent", "sequential") if i % 2 == 0 else ("sequential", "concurrent"):
            t0 = time.perf_counter()
            if way == "concurrent":
                result = scheduler.run(tasks, tenant=q.tenant, deadline_ms=system.config.retrieval_deadline_ms)
                timings["concurrent_ms"] = ms_since(t0)
                timings["worker_sum_ms"] = sum(result.worker_ms.values())
            else:
                scheduler.run_sequential(tasks, q.tenant)
                timings["sequential_ms"] = ms_since(t0)
        rows.append({"category": q.category, "workers": list(tasks), **timings})
    return rows


def bm25_vs_tsrank(bench: Bench) -> list[dict[str, Any]]:
    """Our BM25 worker and the ts_rank_cd baseline on the same shards, tenant and limit."""
    system, rows = bench.system, []
    baseline = sql_text("workers/bm25_tsrank")
    bm25 = system.pipeline.registry["bm25"]
    for i, q in enumerate(bench.queries):
        query, _, ctx, _ = bench.context(i)
        if not query.tokens:
            continue
        tsrank = _tsrank_task(baseline, query.tokens, ctx)
        timings: dict[str, Any] = {"category": q.category, "tokens": list(query.tokens), "shards": len(ctx.shards)}
        for way in ("bm25", "tsrank") if i % 2 == 0 else ("tsrank", "bm25"):
            with system.db.transaction(q.tenant) as conn:
                t0 = time.perf_counter()
                hits = bm25().run(conn, ctx) if way == "bm25" else [r for rs in tsrank(conn) for r in rs]
                timings[f"{way}_ms"] = ms_since(t0)
                timings[f"{way}_hits"] = len(hits)
        rows.append(timings)
    return rows


def plan_modes(bench: Bench) -> list[dict[str, Any]]:
    """Each worker's statements under force_custom_plan and force_generic_plan, same connection.

    psycopg prepares a statement after 5 executions and the server may then settle on a generic
    plan, in which `(%(memory_type)s IS NULL OR memory_type = %(memory_type)s)` prunes no partition.
    """
    system, rows = bench.system, []
    for i, q in enumerate(bench.queries):
        query, _, ctx, tasks = bench.context(i)
        for name in tasks:
            worker = system.pipeline.registry[name]()
            row: dict[str, Any] = {
                "worker": name,
                "category": q.category,
                "typed": ctx.shards[0].memory_type is not None,
            }
            for mode in ("custom", "generic") if i % 2 == 0 else ("generic", "custom"):
                with system.db.transaction(q.tenant) as conn:
                    conn.execute(f"SET LOCAL plan_cache_mode = force_{mode}_plan")
                    t0 = time.perf_counter()
                    worker.run(conn, ctx)
                    row[f"{mode}_ms"] = ms_since(t0)
            rows.append(row)
    return rows


def admin_connection(dsn: str, config: Config) -> psycopg.Connection:
    """A superuser connection (row-level security does not apply) set up like the pool's connections."""
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(dsn, autocommit=True)
    register_vector(conn)
    conn.execute("SET search_path = memoria, public")
    conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(config.hnsw_ef_search),))
    conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false)")
    return conn


def rls_cost(bench: Bench, dsn: str) -> list[dict[str, Any]]:
    """Each worker's statements as memoria_app (row-level security) and as the superuser.

    Every worker statement also filters on the tenant itself, so both return the same rows. Under
    row-level security PostgreSQL uses only leakproof operators as index conditions: `@@` and
    pg_trgm's `%` are not, so their GIN indexes cannot serve the app role.
    """
    system, rows = bench.system, []
    baseline = sql_text("workers/bm25_tsrank")
    with admin_connection(dsn, system.config) as admin:
        for i, q in enumerate(bench.queries):
            query, _, ctx, tasks = bench.context(i)
            runs = dict(tasks)  # the same bound tasks the scheduler runs
            if query.tokens:
                runs["tsrank"] = _tsrank_task(baseline, query.tokens, ctx)
            for name, fn in runs.items():
                row: dict[str, Any] = {"worker": name, "category": q.category}
                for who in ("app", "owner") if i % 2 == 0 else ("owner", "app"):
                    if who == "app":
                        with system.db.transaction(q.tenant) as conn:
                            t0 = time.perf_counter()
                            fn(conn)
                            row["app_ms"] = ms_since(t0)
                    else:
                        with admin.transaction():
                            admin.execute("SELECT set_config('memoria.tenant', %s, true)", (q.tenant,))
                            t0 = time.perf_counter()
                            fn(admin)
                            row["owner_ms"] = ms_since(t0)
                rows.append(row)
    return rows


def _tsrank_task(baseline: str, tokens: list[str], ctx: WorkerContext):
    tsquery = " | ".join("'" + t.replace("'", "''") + "'" for t in tokens)
    return lambda conn: [
        conn.execute(baseline, {"tsquery": tsquery, "memory_type": shard.memory_type, "limit": ctx.limit}).fetchall()
        for shard in ctx.shards
    ]


def throughput(bench: Bench, levels: list[int], rounds: int) -> list[dict[str, Any]]:
    out = []
    jobs = [i for _ in range(rounds) for i in range(len(bench.queries))]
    for threads in levels:
        with cf.ThreadPoolExecutor(threads) as ex:
            list(ex.map(bench.query, jobs[: max(threads * 4, 16)]))  # warm the pool's connections
            t0 = time.perf_counter()
            diags = [r.diagnostics for r in ex.map(bench.query, jobs)]
            wall = time.perf_counter() - t0
        latencies = [d.total_ms for d in diags]
        failures = sum(1 for d in diags if d.worker_errors)
        out.append(
            {
                "threads": threads,
                "queries": len(jobs),
                "wall_s": wall,
                "qps": len(jobs) / wall,
                "latency": report.summary(latencies),
                "queries_with_failed_workers": failures,
            }
        )
        log(f"throughput {threads} threads: {len(jobs) / wall:.1f} q/s")
    return out


def with_model(config: Config, queries: list[corpus.Query]) -> dict[str, Any]:
    """End to end with the real query embedding: the library's own embedder as configured
    (`embedding_backend`, ONNX Runtime's int8 graph by default; all-MiniLM-L6-v2 on CPU), no vectors
    supplied and no query cache, so every query pays its embedding as a user's new question does. Three
    calls: retrieval-only without the candidate list (what REST, MCP and the CLI ask), retrieval-only
    with it, and with ranking (the library's default call)."""
    passes = (
        ("v4_lean", {"ranking": False, "candidates": False}),
        ("v4", {"ranking": False}),
        ("v4_ranked", {"ranking": True}),
    )
    try:
        system = MemorySystem(config.replace(query_cache_size=0), auto_migrate=False)
    except Exception as exc:  # the model is optional: report why it was skipped
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    with system:
        try:
            for text in ("warm up the model", "a second warm-up sentence", "and a third one"):
                system.embed_query(text)
        except Exception as exc:
            return {"skipped": f"{type(exc).__name__}: {exc}"}
        embedder = system.embedder
        rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode, _ in passes}
        for q in queries:  # the calls take turns query by query: the machine's drift falls on all alike
            for mode, kw in passes:
                r = system.query(q.text, tenant=q.tenant, memory_type=q.memory_type, **kw)
                rows[mode].append(record(q, r))
    return {
        "model": getattr(embedder, "name", "?"),
        "backend": config.embedding_backend,
        "int8_refused": getattr(embedder, "int8_refused", None),
        "rows": rows,
    }
