"""A mid-size tenant's vector search three ways, on real embeddings: the library's exact search over the
type partitions' covering index (what a tenant below `vector_exact_max_rows` per type gets), one HNSW
search of an index over all the tenant's memories (a layout the library does not have: the memories
are partitioned by type, so an index spans one type), and an HNSW search per type (what the library
does above the bound). Latency, server CPU, and recall against the exact search.

    python benchmarks/tenant_hnsw.py [--set longmemeval] [--tenant 14000] [--others 9] [--ef 40,100,200]

It answers one question for issue 17's 100k target: what an approximate search of a 7-14k-memory
tenant would save, and what it would cost in recall, before anyone builds the layout it needs. The
vectors are the evaluation's cached MiniLM embeddings (`memoria-pg eval` writes them: <cache>/<set>-
all-MiniLM-L6-v2[-onnx].npz, MEMORIA_EVAL_CACHE or ~/.cache/memoria-pg/eval), never copied into the
project; `--queries` of them, drawn at random, are held out as the queries. In a scratch database
(`--db`, dropped at the end unless `--keep`):
- `memoria.memories` (tenant, memory_type, id, embedding), LIST-partitioned by six memory types with
  the library's covering index `(tenant) INCLUDE (memory_type, id, embedding)` on each partition and a
  per-(tenant, type) HNSW index on each (db/vector_indexes.py's form: m 16, ef_construction 64); the
  measured tenant holds `--tenant` vectors, each of `--others` tenants as many again where the cache
  has them, the types drawn at random with the 100k scale corpus's shares;
- `bench_tenant_vectors`, the same rows unpartitioned, with one HNSW index over the measured tenant's
  rows (a partial index, `WHERE tenant = ...`).
Each query runs, in the tenant's transaction as a worker does (jit off, iterative scans in relaxed
order, the pool's settings), in turn (the order rotates per query): the library's exact statement
(sql/workers/vector_exact_bounded.sql, as VectorWorker runs it for a tenant of that size), the one HNSW
search, and the per-type HNSW searches as one statement (each type's nearest, merged and cut). Reported
per `--ef` (hnsw.ef_search; the library's default is 100): p50/p95 wall time, the backend's CPU
(/proc/<pid>/schedstat: the server must run on this machine), recall@10 and @limit against the exact
search, and the median per-query time ratio to the exact search. Writes results/scale/<timestamp>-tenant-hnsw.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import library
import numpy as np
import psycopg
from half_precision import cache_file, cpu_ns
from pgvector.psycopg import register_vector
from scratch import add_arguments, heading, scratch_database, write_report

from memoria_pg.query.workers.vector import bound_sample

ROOT = Path(__file__).resolve().parents[1]
# The 100k scale corpus's memories per type (results/scale/20261207T024546-n100000/report.md).
TYPES = {
    "episodic": 24874,
    "fact": 14958,
    "general": 24963,
    "preference": 15143,
    "procedural": 10013,
    "semantic": 10049,
}
TENANT = "measured"
PER_TYPE = (
    "SELECT memory_id, distance FROM ("
    + " UNION ALL ".join(
        f"(SELECT m.id AS memory_id, m.embedding <=> %(embedding)s AS distance FROM memoria.memories m "
        f"WHERE m.tenant = %(tenant)s::text AND m.memory_type = '{t}' ORDER BY m.embedding <=> %(embedding)s "
        "LIMIT %(limit)s)"
        for t in TYPES
    )
    + ") x ORDER BY distance, memory_id LIMIT %(limit)s"
)
TENANT_WIDE = (
    "WITH nearest AS MATERIALIZED (SELECT v.id AS memory_id, v.embedding <=> %(embedding)s AS distance "
    "FROM bench_tenant_vectors v WHERE v.tenant = %(tenant)s::text ORDER BY v.embedding <=> %(embedding)s "
    "LIMIT %(limit)s) SELECT memory_id, distance FROM nearest ORDER BY distance, memory_id"
)


def schema(conn: psycopg.Connection, dims: int) -> None:
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("CREATE SCHEMA memoria")
    conn.execute(
        f"CREATE TABLE memoria.memories (tenant text NOT NULL, memory_type text NOT NULL, id bigint NOT NULL, "
        f"embedding vector({dims}) NOT NULL, PRIMARY KEY (tenant, id, memory_type)) PARTITION BY LIST (memory_type)"
    )
    for t in TYPES:
        conn.execute(f"CREATE TABLE memoria.memories_{t} PARTITION OF memoria.memories FOR VALUES IN ('{t}')")
    conn.execute("CREATE INDEX ON memoria.memories (tenant) INCLUDE (memory_type, id, embedding)")
    conn.execute(
        f"CREATE TABLE bench_tenant_vectors (tenant text NOT NULL, id bigint NOT NULL, embedding vector({dims}) "
        "NOT NULL, PRIMARY KEY (tenant, id))"
    )


def load(conn: psycopg.Connection, vectors: np.ndarray, stored: np.ndarray, args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    shares = np.array(list(TYPES.values()), dtype=float)
    kinds = rng.choice(list(TYPES), size=len(stored), p=shares / shares.sum())
    tenants = [TENANT if k < args.tenant else f"other_{(k - args.tenant) // args.tenant}" for k in range(len(stored))]
    with conn.cursor().copy(
        "COPY memoria.memories (tenant, memory_type, id, embedding) FROM STDIN (FORMAT BINARY)"
    ) as cp:
        cp.set_types(["text", "text", "int8", "vector"])
        for k, i in enumerate(stored):
            cp.write_row((tenants[k], str(kinds[k]), int(i), vectors[i]))
    conn.execute(
        "INSERT INTO bench_tenant_vectors SELECT tenant, id, embedding FROM memoria.memories WHERE tenant = %s",
        (TENANT,),
    )
    conn.execute("SET maintenance_work_mem = '256MB'")  # as db/vector_indexes.py builds
    started = time.perf_counter()
    for t in TYPES:
        conn.execute(
            f"CREATE INDEX ON memoria.memories_{t} USING hnsw (embedding vector_cosine_ops) "
            f"WITH (m = 16, ef_construction = 64) WHERE tenant = '{TENANT}'"
        )
    per_type = time.perf_counter() - started
    started = time.perf_counter()
    conn.execute(
        "CREATE INDEX bench_tenant_hnsw ON bench_tenant_vectors USING hnsw (embedding vector_cosine_ops) "
        f"WITH (m = 16, ef_construction = 64) WHERE tenant = '{TENANT}'"
    )
    wide = time.perf_counter() - started
    conn.execute("VACUUM ANALYZE")
    counts: dict[str, int] = dict(
        conn.execute(
            "SELECT memory_type, count(*) FROM memoria.memories WHERE tenant = %s GROUP BY 1 ORDER BY 1", (TENANT,)
        ).fetchall()
    )
    return {"counts": counts, "others": len(set(tenants)) - 1, "build_per_type": per_type, "build_wide": wide}


def vectors_of(args: argparse.Namespace) -> tuple[str, np.ndarray]:
    """The evaluation's cached vectors of --set, or --scale-db's stored ones (as many as the run needs)."""
    if not args.scale_db:
        source = cache_file(args.set)
        return f"real MiniLM vectors ({source.name}, the evaluation's cache)", np.load(source)["vectors"].astype(
            np.float32
        )
    params = psycopg.conninfo.conninfo_to_dict(args.dsn)
    params["dbname"] = args.scale_db
    with psycopg.connect(psycopg.conninfo.make_conninfo(**params)) as conn:
        register_vector(conn)
        rows = conn.execute(
            "SELECT embedding FROM memoria.memories ORDER BY tenant, id LIMIT %s",
            (args.queries + args.tenant * (1 + args.others),),
        ).fetchall()
    return f"synthetic vectors ({args.scale_db}'s HashEmbedder ones)", np.array(
        [np.asarray(getattr(r[0], "to_numpy", lambda v=r[0]: v)()) for r in rows], dtype=np.float32
    )


def exact_statement(size: int, limit: int) -> tuple[str, dict[str, Any]]:
    """The statement VectorWorker runs for an untyped query of a tenant of `size` vectors."""
    sample = bound_sample(limit, size)
    name = "workers/vector_exact_bounded" if sample else "workers/vector_exact"
    return library.sql_text(name), ({"sample": sample} if sample else {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser, "memoria_tenant_hnsw")
    parser.add_argument("--set", default="longmemeval")
    parser.add_argument(
        "--scale-db",
        help="take the vectors from a database scale.py built instead (its HashEmbedder vectors, the first "
        "tenants' memories in id order) to compare with the synthetic vectors the scale benchmark measures on",
    )
    parser.add_argument("--tenant", type=int, default=14_000, help="the measured tenant's vectors")
    parser.add_argument("--others", type=int, default=9, help="other tenants of as many vectors (as the cache allows)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--ef", default="40,100,200")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    source, vectors = vectors_of(args)
    order = np.random.default_rng(args.seed).permutation(len(vectors))
    queries, stored = vectors[order[: args.queries]], order[args.queries :][: args.tenant * (1 + args.others)]
    if len(stored) < args.tenant:
        raise SystemExit(f"{source} hold {len(vectors):,} vectors: fewer than --tenant plus --queries")
    with scratch_database(args.dsn, args.db, keep=args.keep) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        schema(conn, vectors.shape[1])
        register_vector(conn)
        built = load(conn, vectors, stored, args)
        lines = measure(conn, args, source, built, queries)
    write_report(lines, args.out, "tenant-hnsw")


def measure(
    conn: psycopg.Connection, args: argparse.Namespace, source: str, built: dict[str, Any], queries: np.ndarray
) -> list[str]:
    size = sum(built["counts"].values())
    exact_sql, extra = exact_statement(size, args.limit)
    forms = {
        "exact (the library's statement)": (exact_sql, {"memory_type": None, **extra}),
        "HNSW, one index over the tenant": (TENANT_WIDE, {}),
        "HNSW, one index per type": (PER_TYPE, {}),
    }
    conn.execute("SET jit = off")
    conn.execute("SET hnsw.iterative_scan = 'relaxed_order'")
    conn.execute("SELECT set_config('memoria.tenant', %s, false)", (TENANT,))
    pid = conn.info.backend_pid
    lines = [
        heading(f"A {size:,}-vector tenant's search: exact, one HNSW index, an HNSW index per type"),
        "",
        f"{source[0].upper()}{source[1:]}: the tenant's {size:,} over six types "
        f"({', '.join(f'{t} {n:,}' for t, n in built['counts'].items())}) beside {built['others']} other tenants; "
        f"{len(queries)} held-out vectors as queries, the nearest {args.limit}; the exact statement with "
        f"{'a sample of ' + str(extra['sample']) if extra else 'no bound'}; HNSW m 16, ef_construction 64, "
        f"iterative scans in relaxed order; the forms in turn, the order rotating per query; load "
        f"{os.getloadavg()[0]:.1f} at the start, {os.cpu_count()} CPUs. Index builds: per type "
        f"{built['build_per_type']:.1f} s, one over the tenant {built['build_wide']:.1f} s.",
        "",
        f"| ef_search | form | p50 ms | p95 ms | server CPU ms (median) | recall@10 | recall@{args.limit} | "
        "median per-query time / exact |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = list(forms)
    for ef in [int(e) for e in args.ef.split(",")]:
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(ef),))
        wall: dict[str, list[float]] = {f: [] for f in names}
        cpu: dict[str, list[float]] = {f: [] for f in names}
        recall: dict[str, list[tuple[float, float]]] = {f: [] for f in names}
        for k, q in enumerate(queries):
            found = {}
            for form in names[k % 3 :] + names[: k % 3]:
                text, extra_params = forms[form]
                p = {"embedding": q, "tenant": TENANT, "limit": args.limit, **extra_params}
                c0, t0 = cpu_ns(pid), time.perf_counter()
                found[form] = [r[0] for r in conn.execute(text, p, prepare=True).fetchall()]
                wall[form].append((time.perf_counter() - t0) * 1000)
                cpu[form].append((cpu_ns(pid) - c0) / 1e6)
            truth = found[names[0]]
            for form in names:
                got = found[form]
                recall[form].append(
                    (len(set(got[:10]) & set(truth[:10])) / 10, len(set(got) & set(truth)) / len(truth))
                )
        for form in names:
            w = sorted(wall[form])
            ratio = statistics.median(a / b for a, b in zip(wall[form], wall[names[0]], strict=True))
            lines.append(
                f"| {ef} | {form} | {statistics.median(w):.2f} | {w[int(0.95 * (len(w) - 1))]:.2f} | "
                f"{statistics.median(cpu[form]):.2f} | {np.mean([r[0] for r in recall[form]]):.4f} | "
                f"{np.mean([r[1] for r in recall[form]]):.4f} | {ratio:.2f} |"
            )
    lines += ["", f"Load at the end: {os.getloadavg()[0]:.1f}."]
    return lines


if __name__ == "__main__":
    main()
