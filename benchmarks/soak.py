"""Soak test: 8 query clients and 2 writers share one MemorySystem for a given duration.

It loads a synthetic corpus (benchmarks/corpus.py, HashEmbedder vectors supplied, so no model runs),
then runs the clients and writers concurrently and reports, per 5-second window, the operations, the
errors and the latency percentiles of queries and writes. At the end it checks that every write the
library acknowledged (an id returned by store/store_many) is in the database and that no row exists
that was not acknowledged. Exit status 1 when there was any error or lost write, 0 otherwise.

    python benchmarks/soak.py --n 100000 --duration 600   # the full run
    python benchmarks/soak.py --ci                         # 2k memories for 20 s (the test suite runs it)

Loopback only: the DSN must name 127.0.0.1, ::1, localhost or a Unix socket. The database (--db-name)
is dropped and created, and dropped again at the end unless --keep.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import os
import random
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import corpus
import numpy as np
import psycopg
from psycopg import sql

from memoria_pg import Config, HashEmbedder, MemorySystem, normalize

DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:55432/postgres"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
WINDOW_S = 5.0


@dataclass
class Op:
    kind: str  # "query" | "write"
    end: float  # seconds since the start of the run
    ms: float
    error: str | None = None
    degraded: bool = False  # a query answered with a pending or failed worker


@dataclass
class Ledger:
    """Every operation, and the ids the library acknowledged, shared by all threads."""

    ops: list[Op] = field(default_factory=list)
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)  # memory id -> (writer, seq)
    attempted: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def with_db(dsn: str, dbname: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**params)


def require_loopback(dsn: str) -> None:
    hosts = (psycopg.conninfo.conninfo_to_dict(dsn).get("host") or "").split(",")
    for host in hosts:
        if host and host not in LOOPBACK and not host.startswith("/"):
            raise SystemExit(f"soak.py runs against loopback only; the DSN names host {host!r}")


def fresh_database(admin: str, name: str) -> str:
    """A new, empty database (MemorySystem migrates it: auto_migrate)."""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_db(admin, name)


def drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def load(system: MemorySystem, args, world: corpus.Universe) -> float:
    embedder = HashEmbedder()
    t0 = time.perf_counter()
    records = corpus.memories(
        args.n,
        seed=args.seed,
        n_tenants=args.tenants,
        world=world,
        embed=lambda text: embedder.embed([normalize(text)])[0],
    )
    result = system.store_many(records)
    elapsed = time.perf_counter() - t0
    log(f"loaded {result.inserted} memories ({result.duplicates} duplicates) in {elapsed:.1f}s")
    with psycopg.connect(system.dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    return elapsed


# -- the load --------------------------------------------------------------------------------------


def query_client(
    system: MemorySystem,
    queries: list,
    vectors: np.ndarray,
    ledger: Ledger,
    start: float,
    stop: threading.Event,
    client: int,
) -> None:
    i = client * 7919
    while not stop.is_set():
        q, vector = queries[i % len(queries)], vectors[i % len(queries)]
        i += 1
        t0 = time.perf_counter()
        try:
            response = system.query(
                q.text, tenant=q.tenant, memory_type=q.memory_type, embedding=vector, ranking=bool(i % 2)
            )  # ranked queries also write access counts
            d = response.diagnostics
            ledger.record(
                Op(
                    "query",
                    time.perf_counter() - start,
                    (time.perf_counter() - t0) * 1000,
                    degraded=bool(d.pending_sources or d.failed_sources),
                )
            )
        except Exception as exc:  # any exception is an error of the run: report it, keep going
            ledger.record(
                Op("query", time.perf_counter() - start, (time.perf_counter() - t0) * 1000, error=_describe(exc))
            )


def writer(
    system: MemorySystem, world: corpus.Universe, args, ledger: Ledger, start: float, stop: threading.Event, number: int
) -> None:
    embedder = HashEmbedder()
    rng = random.Random(f"soak-writer-{number}")
    generated = corpus.memories(10**9, seed=args.seed + 1000 + number, n_tenants=args.tenants, world=world)
    seq = 0
    while not stop.is_set():
        batch = []
        for _ in range(1 if rng.random() < 0.5 else rng.randint(2, 20)):
            record = next(generated)
            seq += 1
            # A marker keeps every write unique (never a duplicate) and findable.
            record["content"] += f" [soak w{number} #{seq}]"
            record["metadata"] = {**record["metadata"], "soak_writer": number, "soak_seq": seq}
            record["embedding"] = embedder.embed([normalize(record["content"])])[0]
            batch.append(record)
        with ledger.lock:
            ledger.attempted += len(batch)
        t0 = time.perf_counter()
        try:
            ids = [system.store(**batch[0])] if len(batch) == 1 else system.store_many(batch).ids
            with ledger.lock:
                for memory_id, record in zip(ids, batch):
                    if memory_id is not None:
                        ledger.acked[memory_id] = (number, record["metadata"]["soak_seq"])
            ledger.record(
                Op(
                    "write",
                    time.perf_counter() - start,
                    (time.perf_counter() - t0) * 1000,
                    error=None if None not in ids else "a unique record was reported as a duplicate",
                )
            )
        except Exception as exc:
            ledger.record(
                Op("write", time.perf_counter() - start, (time.perf_counter() - t0) * 1000, error=_describe(exc))
            )


def _describe(exc: Exception) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    return f"{type(exc).__name__}: {str(exc).strip()[:300]}{where}"


def run(system: MemorySystem, args, world: corpus.Universe, ledger: Ledger) -> float:
    queries = corpus.queries(args.queries, seed=args.seed, n_tenants=args.tenants, world=world)
    vectors = HashEmbedder().embed([normalize(q.text) for q in queries])
    stop = threading.Event()
    start = time.perf_counter()
    with cf.ThreadPoolExecutor(args.clients + args.writers, thread_name_prefix="soak") as pool:
        futures = [
            pool.submit(query_client, system, queries, vectors, ledger, start, stop, c) for c in range(args.clients)
        ]
        futures += [pool.submit(writer, system, world, args, ledger, start, stop, w) for w in range(args.writers)]
        reported = 0
        while time.perf_counter() - start < args.duration:
            time.sleep(max(0.0, min(1.0, args.duration - (time.perf_counter() - start))))
            elapsed = time.perf_counter() - start
            if int(elapsed // WINDOW_S) > reported:
                reported = int(elapsed // WINDOW_S)
                with ledger.lock:
                    n, errors = len(ledger.ops), sum(op.error is not None for op in ledger.ops)
                log(f"{elapsed:5.1f}s: {n} operations, {errors} errors")
        stop.set()
        for f in futures:
            f.result()  # the threads catch everything; this re-raises only a bug in soak.py itself
    return time.perf_counter() - start


# -- the checks and the report ---------------------------------------------------------------------------


def verify_writes(dsn: str, ledger: Ledger) -> dict:
    """Acknowledged ids missing from the table (lost) and marked rows nobody acknowledged (phantoms)."""
    with psycopg.connect(dsn) as conn:  # the superuser: every tenant
        stored = dict(
            conn.execute(
                "SELECT id, ((metadata->>'soak_writer')::int, (metadata->>'soak_seq')::int)::text FROM memoria.memories "
                "WHERE metadata ? 'soak_writer'"
            ).fetchall()
        )
    acked = {memory_id: f"({w},{s})" for memory_id, (w, s) in ledger.acked.items()}
    lost = sorted(set(acked) - set(stored))
    phantoms = sorted(set(stored) - set(acked))
    mismatched = sorted(i for i in set(acked) & set(stored) if acked[i] != stored[i])
    return {
        "attempted": ledger.attempted,
        "acknowledged": len(acked),
        "stored": len(stored),
        "lost": len(lost),
        "phantoms": len(phantoms),
        "mismatched": len(mismatched),
        "lost_ids": lost[:20],
        "phantom_ids": phantoms[:20],
    }


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "max": float(max(values))}


def windows(ops: list[Op], duration: float) -> list[dict]:
    by_window: dict[int, list[Op]] = collections.defaultdict(list)
    for op in ops:
        by_window[min(int(op.end // WINDOW_S), max(0, int(np.ceil(duration / WINDOW_S)) - 1))].append(op)
    rows = []
    for w in sorted(by_window):
        window_ops = by_window[w]
        row = {"window": f"{w * WINDOW_S:.0f}-{(w + 1) * WINDOW_S:.0f}s"}
        for kind in ("query", "write"):
            done = [op for op in window_ops if op.kind == kind]
            ok = [op.ms for op in done if op.error is None]
            row[kind] = {"ops": len(done), "errors": len(done) - len(ok), **percentiles(ok)}
        row["query"]["degraded"] = sum(op.degraded for op in window_ops if op.kind == "query")
        rows.append(row)
    return rows


def report(rows: list[dict], ledger: Ledger, writes: dict, elapsed: float, args) -> str:
    lines = [
        f"soak: {args.clients} query clients, {args.writers} writers, {elapsed:.1f}s over {args.n} memories",
        "",
        (
            "window    | queries  err  degr   p50 ms   p95 ms   p99 ms   max ms "
            "| writes  err   p50 ms   p95 ms   p99 ms   max ms"
        ),
        "-" * 10 + "+" + "-" * 54 + "+" + "-" * 47,
    ]
    for row in rows:
        q, w = row["query"], row["write"]
        lines.append(
            f"{row['window']:<9} | {q['ops']:7d} {q['errors']:4d} {q['degraded']:5d} {q['p50']:8.1f} "
            f"{q['p95']:8.1f} {q['p99']:8.1f} {q['max']:8.1f} | {w['ops']:6d} {w['errors']:4d} "
            f"{w['p50']:8.1f} {w['p95']:8.1f} {w['p99']:8.1f} {w['max']:8.1f}"
        )
    errors = collections.Counter(op.error for op in ledger.ops if op.error)
    queries = [op for op in ledger.ops if op.kind == "query"]
    lines += [
        "",
        (
            f"queries: {len(queries)} ({len(queries) / elapsed:.1f}/s), "
            f"degraded (a pending or failed worker): {sum(op.degraded for op in queries)}"
        ),
        (
            f"writes: {writes['attempted']} records attempted, {writes['acknowledged']} acknowledged, "
            f"{writes['stored']} stored; lost {writes['lost']}, unacknowledged rows {writes['phantoms']}, "
            f"mismatched {writes['mismatched']}"
        ),
        f"errors: {sum(errors.values())}",
    ]
    lines += [f"  {count} x {message}" for message, count in errors.most_common(10)]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dsn",
        default=os.environ.get("MEMORIA_BENCH_DSN", DEFAULT_ADMIN_DSN),
        help="superuser DSN of a loopback server (a database of its own is created)",
    )
    p.add_argument("--db-name", default="memoria_soak", help="database to (re)create")
    p.add_argument("--keep", action="store_true", help="keep the database at the end")
    p.add_argument("--n", type=int, default=100_000, help="memories in the corpus")
    p.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    p.add_argument("--ci", action="store_true", help="short mode: 2,000 memories for 20 s")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--writers", type=int, default=2)
    p.add_argument("--tenants", type=int, default=10)
    p.add_argument("--queries", type=int, default=400, help="distinct queries the clients cycle through")
    p.add_argument("--pool-max-size", type=int, default=48)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args(argv)
    if args.ci:
        args.n, args.duration = 2000, 20.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_loopback(args.dsn)
    dsn = fresh_database(args.dsn, args.db_name)
    try:
        # The default memory types, and the AGE graph when the server has it.
        config = Config(dsn=dsn, pool_min_size=2, pool_max_size=args.pool_max_size)
        world = corpus.universe(args.seed, args.tenants)
        with MemorySystem(config, embedder=HashEmbedder(), auto_migrate=True) as system:
            load_s = load(system, args, world)
            ledger = Ledger()
            elapsed = run(system, args, world, ledger)
        writes = verify_writes(dsn, ledger)
        rows = windows(ledger.ops, elapsed)
        print(report(rows, ledger, writes, elapsed, args))
        errors = sum(op.error is not None for op in ledger.ops)
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "args": vars(args),
                        "load_s": load_s,
                        "elapsed_s": elapsed,
                        "windows": rows,
                        "writes": writes,
                        "errors": errors,
                    },
                    indent=2,
                )
            )
    finally:
        if not args.keep:
            drop_database(args.dsn, args.db_name)
    failed = errors or writes["lost"] or writes["phantoms"] or writes["mismatched"]
    print("SOAK FAILED" if failed else "SOAK PASSED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
