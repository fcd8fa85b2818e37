"""The vector worker's search of a large tenant as the library runs it (the tenant's own HNSW indexes,
memoria_pg/db/vector_indexes.py; a whole-table search in one statement, VectorWorker.split_search)
against the same typed searches as one statement each, side by side, each against the exact search:
recall and latency.

    python benchmarks/vector_indexes.py --db memoria_scale_1000000 [--queries 200] [--limit 50] [--bound N]

On a database `scale.py` built (and `memoria-pg db vector-indexes` indexed), for each of the scale
benchmark's queries (their HashEmbedder vectors) and each shard a query of its kind reads (its typed
shard, and the whole table), three forms in the tenant's transaction, in turn (the order rotates per
query): the exact search (sql/workers/vector_exact), the statements VectorWorker.statements_for gives
(sql/workers/vector: the tenant as a value, so the planner takes the tenant's own index; for the whole
table of a tenant above the bound, one statement searching each type the tenant has, exact or HNSW),
and the same typed searches as one statement per type, merged in the client (as the worker ran them
before the one-statement form). Since migration 0016 there is no shared HNSW index to compare with.
Reported per form: p50/p95 of the wall time, the server CPU (/proc/<pid>/schedstat of the backend), and
recall@10 and @limit against the exact search, by distance (distance_recall). Writes
results/scale/<timestamp>-vector-indexes.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import time
from pathlib import Path

import corpus
import library
import psycopg
from pgvector.psycopg import register_vector

from memoria_pg.config import Config
from memoria_pg.core.types import ProcessedQuery, Shard
from memoria_pg.query.shards import ALL
from memoria_pg.query.workers.base import WorkerContext, shard_sql
from memoria_pg.query.workers.vector import VectorWorker
from memoria_pg.query.workers.vector import exact as searched_exactly

ROOT = Path(__file__).resolve().parents[1]


def cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def distance_recall(hits: list[tuple[int, float]], exact: list[tuple[int, float]], k: int) -> float:
    """The share of the exact top k that `hits`' top k matches by distance: its hits no farther than
    the exact k-th. By distance, not id: the synthetic vectors tie often, and which of several memories
    at the same distance a search returns says nothing of its recall."""
    if not exact:
        return 1.0
    k = min(k, len(exact))
    bound = exact[k - 1][1] + 1e-6
    return min(k, sum(1 for _, d in hits[:k] if d <= bound)) / k


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", required=True)
    p.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:55432/postgres")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--ef-search", type=int, default=100)
    p.add_argument("--bound", type=int, default=0, help="vector_exact_max_rows (default: the configuration's)")
    p.add_argument("--out", default=str(ROOT / "results" / "scale"))
    args = p.parse_args()
    dsn = psycopg.conninfo.make_conninfo(args.dsn, dbname=args.db)
    queries = corpus.queries(args.queries, seed=7, n_tenants=10, world=corpus.universe(7, 10))
    embed = library.hash_embed()
    bound = args.bound or Config().vector_exact_max_rows

    worker = VectorWorker()

    def context(tenant: str, shard: Shard, vector, rows: dict[str, int]) -> WorkerContext:
        return WorkerContext(
            query=ProcessedQuery(text="", normalized="", tokens=[], tenant=tenant),
            embedding=vector,
            shards=(shard,),
            limit=args.limit,
            graph_limit=0,
            graph_depth=0,
            config=Config(vector_exact_max_rows=bound),
            tenant_rows=rows,
        )

    def library_form(ctx: WorkerContext) -> list[tuple[str, dict]]:
        """VectorWorker's statements for the shard, as the library runs them."""
        return [(text, params) for text, params in worker.statements_for(None, ctx)]  # type: ignore[arg-type]

    def per_type(ctx: WorkerContext) -> list[tuple[str, dict]]:
        """The same typed searches, one statement each (the whole table of a large tenant split)."""
        (shard,) = ctx.shards
        rows = ctx.tenant_rows or {}
        if shard.memory_type is not None or searched_exactly(rows, shard, bound):
            return library_form(ctx)
        return [
            (
                shard_sql(
                    "workers/vector_exact" if searched_exactly(rows, Shard(t), bound) else "workers/vector", Shard(t)
                ),
                worker.params(ctx, Shard(t)),
            )
            for t in sorted(rows)
            if rows[t] > 0
        ]

    forms = {
        "exact": lambda ctx: [(shard_sql("workers/vector_exact", ctx.shards[0]), worker.params(ctx, ctx.shards[0]))],
        "as the library runs it (one statement)": library_form,
        "one statement per type": per_type,
    }
    times: dict[str, list[float]] = {f: [] for f in forms}
    cpu: dict[str, list[float]] = {f: [] for f in forms}
    recall10: dict[str, list[float]] = {f: [] for f in forms}
    recall_n: dict[str, list[float]] = {f: [] for f in forms}
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        pid = conn.info.backend_pid
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(args.ef_search),))
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false)")
        conn.execute("SELECT set_config('plan_cache_mode', 'force_custom_plan', false)")
        own = conn.execute("SELECT count(*) FROM memoria.vector_indexes").fetchone()[0]
        sizes: dict[str, dict[str, int]] = {}
        for tenant, memory_type, n in conn.execute("SELECT tenant, memory_type, n_docs FROM memoria.bm25_docs"):
            sizes.setdefault(tenant, {})[memory_type] = int(n)
        loads = [os.getloadavg()[0]]
        for i, q in enumerate(queries):
            vector = embed(q.text)
            for shard in [getattr(q, "memory_type", None) or "episodic", None]:
                ctx = context(q.tenant, ALL if shard is None else Shard(shard), vector, sizes[q.tenant])
                order = list(forms)[i % 3 :] + list(forms)[: i % 3]
                found = {}
                for form in order:
                    statements = forms[form](ctx)
                    with conn.transaction():
                        conn.execute("SELECT set_config('memoria.tenant', %s, true)", (q.tenant,))
                        c0, t0 = cpu_ns(pid), time.perf_counter()
                        hits = [
                            (r[0], float(r[2]))
                            for text, params in statements
                            for r in conn.execute(text, params).fetchall()
                        ]
                        found[form] = sorted(hits, key=lambda h: (h[1], h[0]))[: args.limit]
                        times[form].append((time.perf_counter() - t0) * 1000)
                        cpu[form].append((cpu_ns(pid) - c0) / 1e6)
                exact = found["exact"]
                for form, hits in found.items():
                    recall10[form].append(distance_recall(hits, exact, 10))
                    recall_n[form].append(distance_recall(hits, exact, args.limit))
            if i % 50 == 0:
                loads.append(os.getloadavg()[0])
        n_rows = conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    lines = [
        f"# The vector worker's search of large tenants, one statement vs one per type ({dt.datetime.now():%Y-%m-%d %H:%M})",
        "",
        f"Database `{args.db}` ({n_rows:,} memories, {own} per-tenant indexes), commit {commit.strip()}, "
        f"{len(queries)} queries x 2 shards (the query's typed shard or episodic, and the whole table), "
        f"limit {args.limit}, ef_search {args.ef_search}, vector_exact_max_rows {bound}, the three forms in rotating "
        "order per query; "
        f"1-minute load {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs. Vectors: HashEmbedder "
        "(synthetic), queries and memories alike.",
        "",
        "| form | p50 ms | p95 ms | server CPU ms p50 | distance recall@10 vs exact | distance recall@limit vs exact |",
        "|---|---|---|---|---|---|",
    ]
    for form in forms:
        t = sorted(times[form])
        lines.append(
            f"| {form} | {statistics.median(t):.2f} | {t[int(0.95 * (len(t) - 1))]:.2f} | "
            f"{statistics.median(cpu[form]):.2f} | {statistics.mean(recall10[form]):.3f} | "
            f"{statistics.mean(recall_n[form]):.3f} |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{dt.datetime.now():%Y%m%dT%H%M%S}-{args.db}-vector-indexes.md").write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
