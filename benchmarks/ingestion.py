"""The ingestion measurement: store_many over the streamed corpus, timed per stage and statement."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

import corpus
import library
import psycopg
from psycopg import sql
from timing import log, peak_rss_mb, rss_mb

if TYPE_CHECKING:  # ingest_ab.py runs this module with other checkouts' libraries too
    from memoria_pg import MemorySystem

RSS_MARKS = (0.1, 0.5, 1.0)
_LOCK = threading.Lock()  # store_many's writer threads add to the same accumulators


def _add(acc: dict[str, float], key: str, seconds: float) -> None:
    with _LOCK:
        acc[key] = acc.get(key, 0.0) + seconds


def timed_calls(fn, acc: dict[str, float], key: str):
    def wrapper(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            _add(acc, key, time.perf_counter() - t0)

    return wrapper


def timed_iter(items, acc: dict[str, float], key: str):
    it = iter(items)
    while True:
        t0 = time.perf_counter()
        try:
            item = next(it)
        except StopIteration:
            _add(acc, key, time.perf_counter() - t0)
            return
        _add(acc, key, time.perf_counter() - t0)
        yield item


INGEST_SQL = (
    "stage",
    "insert_memories",
    "insert_terms",
    "update_docs",
    "update_df",
    "insert_entities",
    "insert_attributes",
)


def _ingest_statements() -> dict[str, str]:
    """Statement text -> name, for the files this library version has (older ones lack some)."""
    names = {}
    for n in INGEST_SQL:
        try:
            names[library.sql_text(f"ingest/{n}")] = n
        except FileNotFoundError:
            pass
    return names


class _TimedConnection:
    """Delegates to a psycopg connection, adding each ingest statement's time to `spent`."""

    def __init__(self, conn, spent: dict[str, float]) -> None:
        self._conn, self._spent = conn, spent
        self._names = _ingest_statements()

    def execute(self, query, params=None, **kw):
        name = self._names.get(query) if isinstance(query, str) else None
        name = name or (
            "truncate"
            if str(query).startswith("TRUNCATE")
            else "select_ids"
            if "row_no, memory_id" in str(query)
            else "other"
        )
        t0 = time.perf_counter()
        try:
            return self._conn.execute(query, params, **kw)
        finally:
            _add(self._spent, f"sql_{name}_s", time.perf_counter() - t0)

    def transaction(self, *a, **kw):
        return _TimedTransaction(self._conn.transaction(*a, **kw), self._spent)

    @contextlib.contextmanager
    def pipeline(self):
        # In pipeline mode a statement's execute() only queues it: the server's time shows at the end
        # of the block, when the results are read (benchmarks/ingest_explain.py splits it by statement).
        with self._conn.pipeline() as p:
            yield p
            t0 = time.perf_counter()
            p.sync()
            _add(self._spent, "sql_pipeline_s", time.perf_counter() - t0)

    def __getattr__(self, name):
        return getattr(self._conn, name)


class _TimedTransaction:
    def __init__(self, inner, spent: dict[str, float]) -> None:
        self._inner, self._spent = inner, spent

    def __enter__(self):
        return self._inner.__enter__()

    def __exit__(self, *exc):
        t0 = time.perf_counter()  # leaving the transaction block is the COMMIT
        try:
            return self._inner.__exit__(*exc)
        finally:
            _add(self._spent, "sql_commit_s", time.perf_counter() - t0)


class _TimedDatabase:
    def __init__(self, db, spent: dict[str, float]) -> None:
        self._db, self._spent = db, spent

    @contextlib.contextmanager
    def connection(self):
        with self._db.connection() as conn:
            yield _TimedConnection(conn, self._spent)

    def __getattr__(self, name):
        return getattr(self._db, name)


def profile(args) -> str:
    """The corpus profile a run measures: args.profile (--profile), else corpus.DEFAULT_PROFILE."""
    return getattr(args, "profile", None) or corpus.DEFAULT_PROFILE


def ingest(system: MemorySystem, args, world: corpus.Universe) -> dict[str, Any]:
    embed = library.hash_embed()
    spent: dict[str, float] = {}
    ing = system.ingestor
    # Instance-level wrappers (the library is untouched) split the time into the Python side
    # (validation, tokenizing, entity and attribute rules) and the database side (COPY + SQL,
    # per statement).
    ing.prepare = timed_calls(ing.prepare, spent, "prepare_s")
    # Ingestor.write / copy_batch (named _write / _copy before the restructuring, in older checkouts)
    write, copy = ("write", "copy_batch") if hasattr(ing, "copy_batch") else ("_write", "_copy")
    setattr(ing, write, timed_calls(getattr(ing, write), spent, "write_s"))
    setattr(ing, copy, timed_calls(getattr(ing, copy), spent, "sql_copy_s"))
    ing.db = _TimedDatabase(ing.db, spent)
    records = timed_iter(
        corpus.memories(
            args.n, seed=args.seed, n_tenants=args.tenants, world=world, embed=embed, profile=profile(args)
        ),
        spent,
        "generate_s",
    )
    marks = [(m, max(1, round(args.n * m))) for m in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)]
    samples: list[dict[str, float]] = []
    done = 0
    rss_start = rss_mb()
    t0 = time.perf_counter()

    def progress(k: int) -> None:
        nonlocal done
        done += k
        while marks and done >= marks[0][1]:
            fraction, _ = marks.pop(0)
            samples.append(
                {
                    "fraction": fraction,
                    "done": done,
                    "elapsed_s": time.perf_counter() - t0,
                    "rss_mb": rss_mb(),
                    "peak_rss_mb": peak_rss_mb(),
                }
            )
            log(
                f"ingest {done}/{args.n} ({fraction:.0%}) {done / (time.perf_counter() - t0):.0f}/s "
                f"rss {rss_mb():.0f} MB"
            )

    result = system.store_many(records, batch_size=args.batch_size, progress=progress)
    elapsed = time.perf_counter() - t0
    deciles = []
    prev_done, prev_t = 0, 0.0
    for s in samples:
        if s["done"] > prev_done:  # one batch may cross several marks
            deciles.append({"fraction": s["fraction"], "rate": (s["done"] - prev_done) / (s["elapsed_s"] - prev_t)})
            prev_done, prev_t = s["done"], s["elapsed_s"]
    library_s = elapsed - spent.get("generate_s", 0.0)
    return {
        "records": args.n,
        "profile": profile(args),
        "inserted": result.inserted,
        "duplicates": result.duplicates,
        "copy_rows": result.copy_rows,
        "batch_size": args.batch_size or system.config.ingest_batch_size,
        "writers": getattr(system.config, "ingest_writers", 1),
        "elapsed_s": elapsed,
        "rate": args.n / elapsed,
        "library_s": library_s,
        "library_rate": args.n / library_s,
        "generate_s": spent.get("generate_s", 0.0),
        "prepare_s": spent.get("prepare_s", 0.0),
        "write_s": spent.get("write_s", 0.0),
        "write_steps_s": {k[4:-2]: v for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if k.startswith("sql_")},
        "rss_start_mb": rss_start,
        "rss": [s for s in samples if s["fraction"] in RSS_MARKS],
        "peak_rss_mb": peak_rss_mb(),
        "deciles": deciles,
    }


def vacuum_analyze(dsn: str) -> float:
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) ")
    return time.perf_counter() - t0


def corpus_stats(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:  # the admin user bypasses row-level security
        counts = {
            t: conn.execute(sql.SQL("SELECT count(*) FROM memoria.{}").format(sql.Identifier(t))).fetchone()[0]
            for t in (
                "memories",
                "memory_terms",
                "bm25_terms",
                "entities",
                "memory_entities",
                "entity_edges",
                "memory_attributes",
            )
        }
        by_type = dict(
            conn.execute("SELECT memory_type, count(*) FROM memoria.memories GROUP BY 1 ORDER BY 1").fetchall()
        )
        tenants = conn.execute(
            "SELECT min(n), max(n), count(*) FROM (SELECT count(*) n FROM memoria.memories GROUP BY tenant) s"
        ).fetchone()
        sizes = dict(
            conn.execute(
                "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'memoria' AND c.relkind IN ('r','p') "
                "ORDER BY 2 DESC"
            ).fetchall()
        )
        hnsw = conn.execute(
            "SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
            "WHERE a.amname = 'hnsw'"
        ).fetchone()[0]
        db_size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        max_df = conn.execute(
            "SELECT term, sum(df) FROM memoria.bm25_terms GROUP BY term ORDER BY 2 DESC LIMIT 8"
        ).fetchall()
    return {
        "counts": counts,
        "by_type": by_type,
        "tenants": {"min": tenants[0], "max": tenants[1], "count": tenants[2]},
        "db_size_mb": float(db_size) / 2**20,
        "hnsw_mb": float(hnsw) / 2**20,
        "largest_tables_mb": {k: v / 2**20 for k, v in list(sizes.items())[:8]},
        "most_common_terms": [(t, int(n)) for t, n in max_df],
    }
