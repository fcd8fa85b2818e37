"""The library's own overhead around its SQL (issue 17): per query, the wall time of `query()` minus
the time its statements spent in the server on the query's critical path.

    python benchmarks/overhead.py --db memoria_ab_locomo_snow --locomo /work/shared/eval [--queries 400]
    python benchmarks/overhead.py --db memoria_scale_100000 [--queries 200]

Queries run one at a time (vectors supplied, retrieval-only), each between two snapshots of
`pg_stat_statements` taken on a separate admin connection, so each statement's server time is known
per query, not only in aggregate. Each statement is put in its stage by the comment that opens its SQL
file: the entity lookup, the relevance pool, the workers (vector, BM25, ...), the final CTE, and the
settings each read block sends first. The stages run one after the other, the workers at the same
time, so the server's part of the critical path is

    settings + lookup + relevance pool + max(worker statements) + final CTE

and the overhead is the wall time minus that: the Python pipeline (query processing, routing, the
scheduler's threads, building the response), the driver, and the round trips. Counting every settings
statement and the relevance pool as sequential makes the overhead, if anything, smaller than it is.
The server must load pg_stat_statements (for the AGE server: `bash scripts/age-server.sh stop`, then
`MEMORIA_AGE_STAT_STATEMENTS=1 bash scripts/age-server.sh start`; off by default there, as it adds to every statement other benchmarks
time); the extension is created here if missing. Writes results/scale/<timestamp>-<db>-overhead.{md,json}.

pg_stat_statements counts a statement's execution only (ExecutorRun and ExecutorFinish): not its Bind,
in which the server parses the parameters, takes the plan from its cache and starts the executor on it
(for the final CTE's plan 0.27 ms at LoCoMo p50, 0.37 at 100k: more than the relevance pool's whole
run), nor a Parse. With `--server-log PATH` (the server's log file, which it writes to; the AGE server's
is /var/tmp/memoria-age-root/var/lib/memoria/postgresql.log) the database logs every statement's
duration for the run (ALTER DATABASE ... SET log_min_duration_statement = 0, reset at the end; this
script's own connection excepted), and the report adds the same critical path from those durations:
each statement's Parse + Bind + Execute as the server timed them, the overhead is then what is left
outside the server. Writing the log lines costs the server a little time that neither figure counts:
if anything, this overhead is larger than it is.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import corpus
import library
import psycopg
import psycopg.sql
from before_after import locomo_queries
from report import run_line, save_figures, summary
from scale import with_db

from memoria_pg import Config, MemorySystem

REPO = Path(__file__).resolve().parents[1]
# Each statement's stage, by the start of its text (the SQL files' first comment; the settings
# statement is built in db/database.py). Worker statements run concurrently, the others in sequence.
STAGES = (
    ("-- Query processing's one read", "lookup", False),
    ("-- Relevance pool", "relevance", False),
    ("/* memoria-pg: sql/final_candidates.sql", "final", False),
    ("SELECT set_config(", "settings", False),
    ("-- Vector worker", "vector", True),
    ("-- BM25 worker", "bm25", True),
    ("-- Phrase worker", "phrase", True),
    ("-- Attribute worker", "attribute", True),
    ("-- Graph worker", "graph", True),
    ("-- Temporal worker", "temporal", True),
    ("-- Fusion worker", "fusion", True),
)
SNAPSHOT = """
SELECT queryid, left(query, 400), calls, total_exec_time + total_plan_time
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT LIKE 'SELECT queryid, left(query, %'  -- this snapshot: the one before the query is counted after it
"""


def stage_of(text: str) -> tuple[str, bool] | None:
    text = text.lstrip()
    for prefix, stage, concurrent in STAGES:
        if text.startswith(prefix):
            return stage, concurrent
    if text.startswith("SELECT memory_id, memory_type, distance FROM (") and "-- Vector worker" in text:
        return "vector", True  # a large tenant's split search: a UNION ALL of typed searches (VectorWorker)
    return None


def snapshot(admin: psycopg.Connection) -> dict[int, tuple[str, int, float]]:
    try:
        rows = admin.execute(SNAPSHOT).fetchall()
    except psycopg.errors.ObjectNotInPrerequisiteState:
        raise SystemExit(
            "the server does not load pg_stat_statements: add it to shared_preload_libraries and restart it "
            "(the AGE server: bash scripts/age-server.sh stop; MEMORIA_AGE_STAT_STATEMENTS=1 bash scripts/age-server.sh start)"
        ) from None
    return {qid: (text, calls, ms) for qid, text, calls, ms in rows}


def server_path(before: dict, after: dict) -> dict[str, Any]:
    """Server milliseconds per stage between two snapshots, and the critical path they make. A worker
    stage that ran several statements (the vector search split in two parts) counts its longest
    statement's mean as its share of the path, since they ran side by side."""
    sequential: dict[str, float] = {}
    concurrent: dict[str, float] = {}
    unknown = 0.0
    for qid, (text, calls, ms) in after.items():
        b_calls, b_ms = (before[qid][1], before[qid][2]) if qid in before else (0, 0.0)
        d_calls, d_ms = calls - b_calls, ms - b_ms
        if d_calls <= 0:
            continue
        kind = stage_of(text)
        if kind is None:
            unknown += d_ms
        elif kind[1]:
            concurrent[kind[0]] = max(concurrent.get(kind[0], 0.0), d_ms / d_calls)
        else:
            sequential[kind[0]] = sequential.get(kind[0], 0.0) + d_ms
    path = sum(sequential.values()) + max(concurrent.values(), default=0.0) + unknown
    return {"sequential": sequential, "workers": concurrent, "unknown": unknown, "path_ms": path}


# A statement's duration as the server logs it with log_min_duration_statement = 0 (extended protocol):
#   2026-12-06 23:25:22.028 UTC [25613] LOG:  duration: 0.224 ms  bind _pg3_0: /* memoria-pg: sql/...
# its Parse and Bind (when logged) come before its Execute, on the same backend.
LOG_LINE = re.compile(
    r"\[(?P<pid>\d+)\] LOG:  duration: (?P<ms>[\d.]+) ms  (?P<phase>parse|bind|execute) [^:]*: (?P<text>.*)"
)


class ServerLog:
    """The lines the server appends to its log file (`path`) from now on."""

    def __init__(self, path: str) -> None:
        self.file = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 (read across the run)
        self.file.seek(0, os.SEEK_END)
        self.partial = ""

    def lines(self) -> list[str]:
        """The complete lines written since the last call."""
        text = self.partial + self.file.read()
        lines = text.split("\n")
        self.partial = lines.pop()
        return lines

    def close(self) -> None:
        self.file.close()


def logged_statements(lines: list[str]) -> list[tuple[str, str, float]]:
    """Each statement the lines show: its backend, its first line of text, its Parse + Bind + Execute
    milliseconds; in the order they ended."""
    pending: dict[str, float] = {}
    out: list[tuple[str, str, float]] = []
    for line in lines:
        m = LOG_LINE.search(line)
        if m is None:
            continue
        pending[m["pid"]] = pending.get(m["pid"], 0.0) + float(m["ms"])
        if m["phase"] == "execute":
            out.append((m["pid"], m["text"], pending.pop(m["pid"])))
    return out


def log_path(statements: list[tuple[str, str, float]]) -> dict[str, Any]:
    """server_path's critical path from logged statements, each with its whole server time. A worker's
    settings (the statement its block sends first, on the same backend) count in that worker's time, so
    that only the longest worker block's count; the other settings (the query's own blocks: processing,
    relevance pool, final CTE) count one after the other."""
    sequential: dict[str, float] = {}
    concurrent: dict[str, float] = {}
    unknown = 0.0
    settings: dict[str, float] = {}  # each backend's settings statement not yet followed by another
    for pid, text, ms in statements:
        kind = stage_of(text)
        if kind is not None and kind[0] == "settings":
            settings[pid] = settings.get(pid, 0.0) + ms
            continue
        block = settings.pop(pid, 0.0)
        if kind is None:
            unknown += ms + block
        elif kind[1]:
            concurrent[kind[0]] = max(concurrent.get(kind[0], 0.0), ms + block)
        else:
            sequential[kind[0]] = sequential.get(kind[0], 0.0) + ms
            if block:
                sequential["settings"] = sequential.get("settings", 0.0) + block
    if settings:  # settings whose statement was not logged in the window: counted as the query's own
        sequential["settings"] = sequential.get("settings", 0.0) + sum(settings.values())
    path = sum(sequential.values()) + max(concurrent.values(), default=0.0) + unknown
    return {"sequential": sequential, "workers": concurrent, "unknown": unknown, "path_ms": path}


@contextlib.contextmanager
def statement_logging(admin: psycopg.Connection, db: str, path: str | None) -> Iterator[ServerLog | None]:
    """With `path`, every statement of `db` logged with its duration while the block runs (new
    connections: the MemorySystem's pool is opened inside), the admin connection's own excepted."""
    if path is None:
        yield None
        return
    try:
        log = ServerLog(path)
    except OSError as exc:
        raise SystemExit(f"--server-log: cannot read the server's log file {path!r} ({exc.strerror})") from None
    name = psycopg.sql.Identifier(db)
    admin.execute("SET log_min_duration_statement = -1")
    admin.execute(psycopg.sql.SQL("ALTER DATABASE {} SET log_min_duration_statement = 0").format(name))
    try:
        yield log
    finally:
        log.close()
        admin.execute(psycopg.sql.SQL("ALTER DATABASE {} RESET log_min_duration_statement").format(name))


def _stage_medians(paths: list[dict[str, Any]]) -> dict[str, float]:
    """Each stage's median server milliseconds over the queries that ran it (server_path's or log_path's)."""
    stages: dict[str, list[float]] = {}
    for r in paths:
        for k, v in {**r["sequential"], **r["workers"], "unrecognized (counted as sequential)": r["unknown"]}.items():
            stages.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in sorted(stages.items())}


def git_head() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    """The database and queries options of this benchmark and query_trace.py."""
    parser.add_argument("--admin-dsn", default="postgresql://postgres@127.0.0.1:55432/postgres")
    parser.add_argument("--db", required=True)
    parser.add_argument("--locomo", default=None, help="the evaluation data folder: LoCoMo's questions")
    parser.add_argument("--queries", type=int, default=200)


def query_set(locomo: str | None, n: int) -> tuple[list[Any], list[Any]]:
    """`n` queries and their vectors: LoCoMo's questions with their cached vectors (`locomo`: the
    evaluation data folder), else the scale benchmark's queries with HashEmbedder vectors."""
    if locomo:
        return locomo_queries(Path(locomo), n)
    queries = corpus.queries(n, seed=7, n_tenants=10, world=corpus.universe(7, 10))
    embed = library.hash_embed()
    return queries, [embed(q.text) for q in queries]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_query_arguments(parser)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--server-log", default=None, help="the server's log file: add the logged statement times")
    parser.add_argument("--out", default=str(REPO / "results" / "scale"))
    args = parser.parse_args(argv)

    dsn = with_db(args.admin_dsn, args.db)
    queries, vectors = query_set(args.locomo, args.queries)
    admin = psycopg.connect(dsn, autocommit=True)
    admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    config = Config.from_env(dsn=dsn, use_age=False, pool_min_size=12, pool_max_size=48, query_cache_size=0)
    modes = {"lean": {"candidates": False}, "list": {"candidates": True}}
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    load = [os.getloadavg()[0]]
    with statement_logging(admin, args.db, args.server_log) as log, MemorySystem(config, auto_migrate=False) as system:

        def run(i: int, **kw: Any) -> float:
            q = queries[i]
            t0 = time.perf_counter()
            system.query(
                q.text, tenant=q.tenant, memory_type=getattr(q, "memory_type", None), ranking=False,
                embedding=vectors[i], **kw,
            )  # fmt: skip
            return (time.perf_counter() - t0) * 1000

        for i in range(min(50, len(queries))):  # warm the pool, the plans and the caches
            for kw in modes.values():
                run(i, **kw)
        for r in range(args.rounds):
            for i in range(len(queries)):
                order = list(modes) if (i + r) % 2 == 0 else list(modes)[::-1]
                for mode in order:
                    before = snapshot(admin)
                    if log is not None:
                        log.lines()  # what ran before this query
                    wall = run(i, **modes[mode])
                    path = server_path(before, snapshot(admin))
                    row = {"wall_ms": wall, **path, "overhead_ms": wall - path["path_ms"]}
                    if log is not None:
                        logged = log_path(logged_statements(log.lines()))
                        row["log"] = {**logged, "overhead_ms": wall - logged["path_ms"]}
                    rows[mode].append(row)
            load.append(os.getloadavg()[0])

    figures: dict[str, Any] = {}
    for mode, rs in rows.items():
        figures[mode] = {
            "wall_ms": summary([r["wall_ms"] for r in rs]),
            "server_path_ms": summary([r["path_ms"] for r in rs]),
            "overhead_ms": summary([r["overhead_ms"] for r in rs]),
            "stage_median_ms": _stage_medians(rs),
            "queries": len(rs),
        }
        if log is not None:
            logged = [r["log"] for r in rs]
            figures[mode]["log"] = {
                "server_path_ms": summary([r["path_ms"] for r in logged]),
                "overhead_ms": summary([r["overhead_ms"] for r in logged]),
                "stage_median_ms": _stage_medians(logged),
            }
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    out = Path(args.out)
    meta = {"db": args.db, "commit": git_head(), "cpus": os.cpu_count(), "load": load, "queries": len(queries),
            "rounds": args.rounds, "locomo": bool(args.locomo)}  # fmt: skip
    save_figures(out, f"{stamp}-{args.db}-overhead", meta, figures)
    lines = report_lines(args, meta, load, len(queries), figures)
    (out / f"{stamp}-{args.db}-overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


NAMES = {"lean": "V4, no candidate list (`candidates=False`)", "list": "V4 with the candidate list"}


def report_lines(args: Any, meta: dict[str, Any], load: list[float], n: int, figures: dict[str, Any]) -> list[str]:
    """The markdown report: per mode the wall time, the server's critical path and the overhead, from
    pg_stat_statements and (with --server-log) from the server's own statement times."""
    lines = [
        f"# The library's overhead around its SQL: {args.db}",
        "",
        run_line(meta, load) + f"{n} {'LoCoMo' if args.locomo else 'scale'} queries x "
        f"{args.rounds} rounds, each mode after the other in turn, vectors supplied, retrieval-only "
        "(`benchmarks/overhead.py`). Server time per statement from `pg_stat_statements` around each query"
        + (", and from the server's log of each statement's Parse, Bind and Execute." if args.server_log else "."),
        "",
        "| mode | server time from | wall p50 / p95 ms | server critical path p50 ms | overhead p50 / p95 ms "
        "| issue 17 target |",
        "|---|---|---|---|---|---|",
    ]
    sources = [("pg_stat_statements (execution only)", lambda fig: fig)]
    if args.server_log:
        sources.append(("the server log (Parse + Bind + Execute)", lambda fig: fig["log"]))
    for source, pick in sources:
        for mode, fig in figures.items():
            w, s, o = fig["wall_ms"], pick(fig)["server_path_ms"], pick(fig)["overhead_ms"]
            verdict = "met" if o["p50"] <= 3.0 else "missed"
            lines.append(
                f"| {NAMES[mode]} | {source} | {w['p50']:.2f} / {w['p95']:.2f} | {s['p50']:.2f} "
                f"| {o['p50']:.2f} / {o['p95']:.2f} | overhead <= 3 ms p50: {verdict} |"
            )
    for source, pick in sources:
        lines += ["", f"Server milliseconds per stage from {source} (median over the queries that ran it; "
                  "workers: their longest statement):", ""]  # fmt: skip
        for mode, fig in figures.items():
            parts = ", ".join(f"{k} {v:.2f}" for k, v in pick(fig)["stage_median_ms"].items())
            lines.append(f"- {NAMES[mode]}: {parts}")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
