"""Soak test: 8 query clients, 2 writers and 2 changers share one MemorySystem for a given duration,
then the cancel race: short deadlines under a small pool, with ingest beside it.

The changers (issue 12, point 6) update, delete and invalidate memories while the writers ingest and
the clients query: half of what they touch is what the writers have just acknowledged (the same
tenants' shared rows: BM25 statistics, entities, co-occurrences), half the loaded corpus (what the
queries read); a delete may hit a memory the other changer is updating. At the end, beside the write
checks: no acknowledged delete left its memory behind, every memory a changer updated (and nobody
deleted) holds the content of its last acknowledged update, a NotFound only ever met a memory that was
deleted, and the BM25 document counts, lengths and document frequencies and the co-occurrence weights
equal a recount from the postings and mentions.

It loads a synthetic corpus (benchmarks/corpus.py, its short profile unless --profile realistic;
HashEmbedder vectors supplied, so no model runs), then runs the clients and writers concurrently and
reports, per 5-second window, the operations, the errors and the latency percentiles of queries and
writes. The cancel race (issue 15, point 1) follows on the same database: a second MemorySystem whose
retrieval deadline (--race-deadline-ms, 40; 10 with --ci) cancels workers all the time, on a pool (--race-pool, 4) too
small for its query clients (--race-clients, 6) and a writer, so that connections a cancel was meant for
are wanted by other callers at once. A cancel that reached another caller's statement shows as a query
or a write failing with QueryCanceled, or a worker failed by a cancel request; any of them is an error
of the run (a worker `pending` at the deadline, or `failed` with PoolTimeout on the small pool, is not).
At the end it checks that every write the library acknowledged (an id returned by store/store_many) is
in the database and that no row exists that was not acknowledged. Exit status 1 when there was any error
or lost write, 0 otherwise.

    python benchmarks/soak.py --n 100000 --duration 600   # the full run (then a 60 s cancel race)
    python benchmarks/soak.py --ci                         # 2k memories for 20 s, a 15 s race (the tests run it)
    python benchmarks/soak.py --changers 0 ...             # without the lifecycle load

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

from memoria_pg import Config, HashEmbedder, MemorySystem, NotFound, normalize

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
    loaded: list[int] = field(default_factory=list)  # the corpus's ids (the changers' other half)
    deleted: set[int] = field(default_factory=set)  # acknowledged deletes
    updated: dict[int, str] = field(default_factory=dict)  # memory id -> content of its last acknowledged update
    not_found: set[int] = field(default_factory=set)  # ids a change found missing (deleted by the other one?)
    tenant_of: dict[int, str] = field(default_factory=dict)
    changes: collections.Counter[str] = field(default_factory=collections.Counter)
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


def load(system: MemorySystem, args, world: corpus.Universe, ledger: Ledger) -> float:
    embedder = HashEmbedder()
    t0 = time.perf_counter()
    records = corpus.memories(
        args.n,
        seed=args.seed,
        n_tenants=args.tenants,
        world=world,
        embed=lambda text: embedder.embed([normalize(text)])[0],
        profile=args.profile,
    )
    tenants: list[str] = []  # in input order, as result.ids

    def tracked(rows):
        for row in rows:
            tenants.append(row["tenant"])
            yield row

    result = system.store_many(tracked(records))
    ledger.loaded = [i for i in result.ids if i is not None]
    ledger.tenant_of.update((i, t) for i, t in zip(result.ids, tenants) if i is not None)
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
                    error=_cancelled_worker(d.worker_errors),
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
    generated = corpus.memories(
        10**9, seed=args.seed + 1000 + number, n_tenants=args.tenants, world=world, profile=args.profile
    )
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
                        ledger.tenant_of[memory_id] = record["tenant"]
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


def changer(
    system: MemorySystem, world: corpus.Universe, args, ledger: Ledger, start: float, stop: threading.Event, number: int
) -> None:
    """Updates (its own ids: id % changers == number, so the last acknowledged update of an id is the one
    that committed last), deletes (any id) and invalidations, paced at --change-interval-ms."""
    embedder = HashEmbedder()
    rng = random.Random(f"soak-changer-{number}")
    texts = corpus.memories(
        10**9, seed=args.seed + 5000 + number, n_tenants=args.tenants, world=world, profile=args.profile
    )
    seq = 0
    while not stop.wait(args.change_interval_ms / 1000):
        with ledger.lock:
            recent = list(ledger.acked)[-200:]
            pool = recent if recent and rng.random() < 0.5 else ledger.loaded
            pool = [i for i in pool if i not in ledger.deleted]
        roll = rng.random()
        kind = "update" if roll < 0.6 else "delete" if roll < 0.9 else "invalidate"
        if kind != "delete":
            pool = [i for i in pool if i % args.changers == number]
        if not pool:
            continue
        memory_id = rng.choice(pool)
        tenant = ledger.tenant_of[memory_id]
        seq += 1
        content = f"{next(texts)['content']} [soak change c{number} #{seq}]"
        t0 = time.perf_counter()
        error = None
        try:
            if kind == "update":
                system.update(memory_id, tenant=tenant, content=content,
                              embedding=embedder.embed([normalize(content)])[0])  # fmt: skip
            elif kind == "delete":
                system.delete(memory_id, tenant=tenant)
            else:
                system.invalidate(memory_id, tenant=tenant)
            with ledger.lock:
                ledger.changes[kind] += 1
                if kind == "update":
                    ledger.updated[memory_id] = content
                elif kind == "delete":
                    ledger.deleted.add(memory_id)
        except NotFound:
            with ledger.lock:
                ledger.not_found.add(memory_id)
                ledger.changes["not found"] += 1
        except Exception as exc:
            error = _describe(exc)
        ledger.record(Op("change", time.perf_counter() - start, (time.perf_counter() - t0) * 1000, error=error))


def _cancelled_worker(worker_errors: dict[str, str]) -> str | None:
    """A worker failed by a cancel request: the scheduler cancels only at the deadline, after which a
    worker's outcome is not recorded, so a recorded one was another caller's cancel (its own
    server-side ceiling, a statement timeout, is not that)."""
    cancelled = sorted(
        name for name, error in worker_errors.items() if "QueryCanceled" in error and "user request" in error
    )
    return f"worker {cancelled[0]} failed: {worker_errors[cancelled[0]][:200]}" if cancelled else None


def _describe(exc: Exception) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    return f"{type(exc).__name__}: {str(exc).strip()[:300]}{where}"


@dataclass(frozen=True)
class Phase:
    name: str
    clients: int
    writers: int
    first_writer: int  # writer numbers (markers) start here: unique over the phases
    duration: float
    changers: int = 0


def run(system: MemorySystem, args, world: corpus.Universe, ledger: Ledger, phase: Phase) -> float:
    queries = corpus.queries(args.queries, seed=args.seed, n_tenants=args.tenants, world=world)
    vectors = HashEmbedder().embed([normalize(q.text) for q in queries])
    stop = threading.Event()
    start = time.perf_counter()
    writers = range(phase.first_writer, phase.first_writer + phase.writers)
    with cf.ThreadPoolExecutor(phase.clients + phase.writers + phase.changers, thread_name_prefix="soak") as pool:
        futures = [
            pool.submit(query_client, system, queries, vectors, ledger, start, stop, c) for c in range(phase.clients)
        ]
        futures += [pool.submit(writer, system, world, args, ledger, start, stop, w) for w in writers]
        futures += [pool.submit(changer, system, world, args, ledger, start, stop, c) for c in range(phase.changers)]
        reported = 0
        while time.perf_counter() - start < phase.duration:
            time.sleep(max(0.0, min(1.0, phase.duration - (time.perf_counter() - start))))
            elapsed = time.perf_counter() - start
            if int(elapsed // WINDOW_S) > reported:
                reported = int(elapsed // WINDOW_S)
                with ledger.lock:
                    n, errors = len(ledger.ops), sum(op.error is not None for op in ledger.ops)
                log(f"{phase.name} {elapsed:5.1f}s: {n} operations, {errors} errors")
        stop.set()
        for f in futures:
            f.result()  # the threads catch everything; this re-raises only a bug in soak.py itself
    return time.perf_counter() - start


# -- the checks and the report ---------------------------------------------------------------------------


def verify_writes(dsn: str, *ledgers: Ledger) -> dict:
    """Acknowledged ids missing from the table (lost) and marked rows nobody acknowledged (phantoms)."""
    ledger = Ledger(acked={k: v for one in ledgers for k, v in one.acked.items()})
    ledger.attempted = sum(one.attempted for one in ledgers)
    with psycopg.connect(dsn) as conn:  # the superuser: every tenant
        stored = dict(
            conn.execute(
                "SELECT id, ((metadata->>'soak_writer')::int, (metadata->>'soak_seq')::int)::text FROM memoria.memories "
                "WHERE metadata ? 'soak_writer'"
            ).fetchall()
        )
    acked = {memory_id: f"({w},{s})" for memory_id, (w, s) in ledger.acked.items()}
    deleted = set().union(*(one.deleted for one in ledgers))
    lost = sorted(set(acked) - set(stored) - deleted)
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


def verify_changes(dsn: str, ledger: Ledger) -> dict:
    """The changers' acknowledged deletes and updates against the table, and every derived statistic
    the lifecycle keeps against a recount (tenants and types together: one mismatch is one too many)."""
    with psycopg.connect(dsn) as conn:  # the superuser: every tenant
        ids = list(ledger.deleted | set(ledger.updated) | ledger.not_found)
        content = dict(conn.execute("SELECT id, content FROM memoria.memories WHERE id = ANY(%s)", (ids,)).fetchall())
        statistics = {name: conn.execute(query).fetchone()[0] for name, query in RECOUNTS.items()}
    return {
        "resurrected": len(ledger.deleted & set(content)),
        "stale updates": sum(content.get(i) != text for i, text in ledger.updated.items() if i not in ledger.deleted),
        "not found but never deleted": len(ledger.not_found - ledger.deleted),
        **statistics,
    }


# Rows of the derived tables that differ from a recount from what they derive from.
RECOUNTS = {
    "bm25_docs off": """
        SELECT count(*) FROM memoria.bm25_docs d FULL JOIN (
            SELECT tenant, memory_type, count(*) AS n, sum(doc_len) AS len FROM memoria.memories
            GROUP BY tenant, memory_type) m USING (tenant, memory_type)
        WHERE (d.n_docs, d.sum_len) IS DISTINCT FROM (m.n, m.len)""",
    "bm25_terms off": """
        SELECT count(*) FROM memoria.bm25_terms b FULL JOIN (
            SELECT tenant, memory_type, term, count(*) AS n FROM memoria.memory_terms
            GROUP BY tenant, memory_type, term) t USING (tenant, memory_type, term)
        WHERE b.df IS DISTINCT FROM t.n""",
    "entity_edges off": """
        SELECT count(*) FROM memoria.entity_edges e FULL JOIN (
            SELECT a.tenant, a.entity_id AS src_id, b.entity_id AS dst_id, count(*) AS n
            FROM memoria.memory_entities a JOIN memoria.memory_entities b
              ON b.tenant = a.tenant AND b.memory_id = a.memory_id AND b.entity_id > a.entity_id
             AND memoria.co_occurs(a.ordinal, b.ordinal)
            GROUP BY 1, 2, 3) p USING (tenant, src_id, dst_id)
        WHERE e.weight IS DISTINCT FROM p.n""",
    "entities unmentioned": """
        SELECT count(*) FROM memoria.entities e
        WHERE NOT EXISTS (SELECT 1 FROM memoria.memory_entities m WHERE m.tenant = e.tenant AND m.entity_id = e.id)""",
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


def report(rows: list[dict], ledger: Ledger, writes: dict | None, elapsed: float, title: str) -> str:
    lines = [
        f"{title}, {elapsed:.1f}s",
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
        f"writes: {sum(op.kind == 'write' for op in ledger.ops)} ({ledger.attempted} records attempted)",
        f"errors: {sum(errors.values())}",
    ]
    if writes is not None:
        lines.append(
            f"writes of every phase: {writes['attempted']} records attempted, {writes['acknowledged']} acknowledged, "
            f"{writes['stored']} stored; lost {writes['lost']}, unacknowledged rows {writes['phantoms']}, "
            f"mismatched {writes['mismatched']}"
        )
    lines += [f"  {count} x {message}" for message, count in errors.most_common(10)]
    return "\n".join(lines)


def change_report(ledger: Ledger, checks: dict) -> str:
    ms = [op.ms for op in ledger.ops if op.kind == "change" and op.error is None]
    p = percentiles(ms)
    done = ", ".join(f"{kind} {n}" for kind, n in sorted(ledger.changes.items()))
    return "\n".join([
        f"changes: {sum(op.kind == 'change' for op in ledger.ops)} ({done}); p50 {p['p50']:.1f} ms, p95 {p['p95']:.1f} ms, "
        f"errors {sum(op.kind == 'change' and op.error is not None for op in ledger.ops)}",
        "change checks: " + ", ".join(f"{name} {n}" for name, n in checks.items()),
    ])  # fmt: skip


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
    p.add_argument("--changers", type=int, default=2, help="threads updating, deleting and invalidating")
    p.add_argument("--change-interval-ms", type=float, default=50.0, help="each changer's pause between changes")
    p.add_argument("--tenants", type=int, default=10)
    p.add_argument("--queries", type=int, default=400, help="distinct queries the clients cycle through")
    p.add_argument("--pool-max-size", type=int, default=48)
    p.add_argument("--race-duration", type=float, default=60.0, help="seconds of the cancel race (0: none)")
    p.add_argument(
        "--race-deadline-ms", type=int, default=None, help="the race's retrieval deadline (40 ms; 10 with --ci)"
    )
    p.add_argument("--race-pool", type=int, default=4, help="the race's pool_max_size")
    p.add_argument("--race-clients", type=int, default=6)
    p.add_argument("--race-writers", type=int, default=1)
    p.add_argument("--seed", type=int, default=7)
    # Short memories by default: the soak checks correctness under concurrency (its --ci run is a test,
    # tests/test_soak_ci.py, with a time budget), not what a memory costs to ingest.
    corpus.add_profile_argument(p, default="short")
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args(argv)
    if args.ci:
        args.n, args.duration, args.race_duration = 2000, 20.0, 15.0
    if args.race_deadline_ms is None:
        # The --ci corpus's queries take a few ms: on a fast, quiet machine a 40 ms deadline cancelled
        # 0 to 2 of ~2,800 queries' workers in 15 s, and the race did not race; 10 ms cancels ~1,300.
        args.race_deadline_ms = 10 if args.ci else 40
    return args


def run_phases(dsn: str, args, world: corpus.Universe) -> dict:
    """Load, soak, then the cancel race on the same database; each phase's ledger and seconds."""
    config = Config(dsn=dsn, pool_min_size=2, pool_max_size=args.pool_max_size)
    phases = {
        "soak": Phase("soak", args.clients, args.writers, 0, args.duration, args.changers),
        "race": Phase("race", args.race_clients, args.race_writers, args.writers, args.race_duration),
    }
    soak, race = Ledger(), Ledger()
    # The default memory types, and the AGE graph when the server has it.
    with MemorySystem(config, embedder=HashEmbedder(), auto_migrate=True) as system:
        load_s = load(system, args, world, soak)
        soak_s = run(system, args, world, soak, phases["soak"])
    race_s = 0.0
    if phases["race"].duration > 0:
        small = config.replace(
            pool_min_size=1, pool_max_size=args.race_pool, retrieval_deadline_ms=args.race_deadline_ms
        )
        with MemorySystem(small, embedder=HashEmbedder()) as system:
            race_s = run(system, args, world, race, phases["race"])
    return {"load_s": load_s, "soak": (soak, soak_s), "race": (race, race_s)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_loopback(args.dsn)
    dsn = fresh_database(args.dsn, args.db_name)
    try:
        out = run_phases(dsn, args, world=corpus.universe(args.seed, args.tenants))
        (soak, soak_s), (race, race_s) = out["soak"], out["race"]
        writes = verify_writes(dsn, soak, race)
        changes = verify_changes(dsn, soak)
        titles = {
            "soak": f"soak: {args.clients} query clients, {args.writers} writers, {args.changers} changers over "
            f"{args.n} memories",
            "race": (
                f"cancel race: {args.race_clients} query clients and {args.race_writers} writer(s) on a pool of "
                f"{args.race_pool}, retrieval deadline {args.race_deadline_ms} ms"
            ),
        }
        results = {}
        for name, (ledger, seconds) in (("soak", (soak, soak_s)), ("race", (race, race_s))):
            if name == "race" and not ledger.ops:
                continue
            rows = windows(ledger.ops, seconds)
            print(report(rows, ledger, writes if name == "race" or not race.ops else None, seconds, titles[name]))
            if name == "soak" and args.changers:
                print(change_report(soak, changes))
            print()
            results[name] = {
                "elapsed_s": seconds,
                "windows": rows,
                "errors": sum(op.error is not None for op in ledger.ops),
            }
        errors = sum(r["errors"] for r in results.values()) + sum(changes.values())
        if args.json:
            payload = {
                "args": vars(args),
                "load_s": out["load_s"],
                "phases": results,
                "writes": writes,
                "changes": {"done": dict(soak.changes), "checks": changes},
                "errors": errors,
            }
            Path(args.json).write_text(json.dumps(payload, indent=2))
    finally:
        if not args.keep:
            drop_database(args.dsn, args.db_name)
    failed = errors or writes["lost"] or writes["phantoms"] or writes["mismatched"]
    print("SOAK FAILED" if failed else "SOAK PASSED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
