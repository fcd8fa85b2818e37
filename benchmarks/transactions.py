"""What a tenant block costs around its statements: the explicit transaction (BEGIN, the settings,
the statements, COMMIT: a round trip each) against the pipeline's implicit one (db/pipeline.tenant_block:
the settings travel with the first statement, the Sync commits), through `Database.transaction` as the
query path calls it, alternating block by block on one pooled connection.

    python benchmarks/transactions.py [--dsn postgresql://postgres@127.0.0.1:55432/postgres] [--blocks 3000]
    python benchmarks/transactions.py --locomo /work/shared/eval [--queries 400]

With --locomo, whole queries instead: the LoCoMo dev turns (loaded once into `memoria_ab_locomo`, as
benchmarks/before_after.py loads them) and its questions with their cached vectors, V4 retrieval-only,
V3 retrieval-only and V3 as by default (ranking and the access write), each query run with implicit
blocks and with explicit transactions (db/pipeline.IMPLICIT) in one process, the order alternating.

Each block sets the tenant (with the role, the plan mode and the statement timeout, as a query's reads
do) and runs one small read of the schema (the tenant's BM25 document counts); a second form runs two
reads, fetching between them. Reported: p50 / p95 wall, client CPU and the backend's CPU per block
(/proc/<pid>/schedstat: the server must run on this machine), and the per-block ratio. A database
`memoria_bench_transactions` is created (migrated) and dropped. Writes results/scale/<timestamp>-transactions.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import time
from pathlib import Path

import psycopg
from psycopg import sql

from memoria_pg import Config, MemorySystem
from memoria_pg.db import Database
from memoria_pg.db.budget import query_budget

OUT = Path(__file__).resolve().parent.parent / "results" / "scale"
READ = "SELECT coalesce(sum(n_docs), 0) FROM memoria.bm25_docs WHERE tenant = current_setting('memoria.tenant')"


def cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", "postgresql://postgres@127.0.0.1:55432/postgres")
    )
    p.add_argument("--blocks", type=int, default=3000)
    p.add_argument("--locomo", type=Path, help="whole LoCoMo queries: the folder holding locomo/")
    p.add_argument("--queries", type=int, default=400)
    args = p.parse_args(argv)
    if args.locomo:
        return queries(args)
    name = "memoria_bench_transactions"
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = psycopg.conninfo.conninfo_to_dict(args.dsn)
    params["dbname"] = name
    dsn = psycopg.conninfo.make_conninfo(**params)
    try:
        with MemorySystem(Config(dsn=dsn, use_age=False, vector_index_auto=False), auto_migrate=True) as system:
            system.store("a memory so the tenant has a BM25 document count", tenant="t")
        db = Database(dsn, min_size=1, max_size=1)
        try:
            figures = measure(db, args.blocks)
        finally:
            db.close()
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    text = report(figures, args.blocks)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{dt.datetime.now():%Y%m%dT%H%M%S}-transactions.md").write_text(text)
    print(text)
    return 0


def measure(db: Database, blocks: int) -> dict[str, dict[str, list[float]]]:
    with db.connection() as conn:
        pid = conn.info.backend_pid

    def block(implicit: bool, reads: int) -> None:
        with query_budget(30000), db.transaction("t", generic_plans=True, implicit=implicit) as conn:
            for _ in range(reads):
                conn.execute(READ).fetchall()

    forms = {
        f"{kind}, {reads} read{'s' if reads > 1 else ''}": (implicit, reads)
        for reads in (1, 2)
        for kind, implicit in (("explicit", False), ("implicit", True))
    }
    out: dict[str, dict[str, list[float]]] = {f: {"ms": [], "client": [], "server": []} for f in forms}
    for rnd in range(2):  # round 0 warms the plans
        for i in range(blocks if rnd else 200):
            names = list(forms)
            for name in names[i % len(names) :] + names[: i % len(names)]:
                implicit, reads = forms[name]
                s0, c0, t0 = cpu_ns(pid), time.thread_time(), time.perf_counter()
                block(implicit, reads)
                ms, client, server = (time.perf_counter() - t0) * 1000, time.thread_time() - c0, cpu_ns(pid) - s0
                if rnd:
                    out[name]["ms"].append(ms)
                    out[name]["client"].append(client * 1000)
                    out[name]["server"].append(server / 1e6)
    return out


def heading(title: str, description: str, columns: list[str]) -> list[str]:
    """A report's title (with the time, commit and CPUs), its description and its table's header."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return [
        f"# {title} ({time.strftime('%Y-%m-%d %H:%M')}, commit {commit}, {os.cpu_count()} CPUs)",
        "",
        description,
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]


def compare(r: dict[str, list[float]], explicit: dict[str, list[float]] | None) -> tuple[str, float]:
    """The median per-item ratio of the explicit form's wall time to this one's ("-" for the explicit
    form itself), and this form's p95."""
    ratio = "-"
    if explicit is not None:
        ratio = f"{statistics.median(a / b for a, b in zip(explicit['ms'], r['ms'], strict=True)):.2f}"
    return ratio, sorted(r["ms"])[int(0.95 * len(r["ms"]))]


def report(out: dict[str, dict[str, list[float]]], blocks: int) -> str:
    lines = heading(
        "A tenant block's cost: explicit transaction against the pipeline's implicit one",
        f"{blocks} blocks per form, the forms alternating block by block on one pooled connection "
        "(`Database.transaction(..., implicit=...)` inside a query budget, as the query path runs them).",
        ["form", "p50 ms", "p95 ms", "client CPU ms", "server CPU ms", "explicit / implicit (median per block)"],
    )
    for name, r in out.items():
        ratio, p95 = compare(r, out[name.replace("implicit", "explicit")] if name.startswith("implicit") else None)
        lines.append(
            f"| {name} | {statistics.median(r['ms']):.3f} | {p95:.3f} | {statistics.mean(r['client']):.3f} | "
            f"{statistics.mean(r['server']):.3f} | {ratio} |"
        )
    lines += ["", f"1-minute load average at the end: {os.getloadavg()[0]:.1f}."]
    return "\n".join(lines) + "\n"


def queries(args: argparse.Namespace) -> int:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import before_after

    from memoria_pg.db import pipeline

    before_after.load_locomo(args.dsn, "memoria_ab_locomo", args.locomo)
    params = psycopg.conninfo.conninfo_to_dict(args.dsn)
    params["dbname"] = "memoria_ab_locomo"
    questions, vectors = before_after.locomo_queries(args.locomo, args.queries)
    modes = {"V4 retrieval-only": (True, False), "V3 retrieval-only": (False, False), "V3 as by default": (False, True)}
    out: dict[str, dict[str, list[float]]] = {}
    config = Config(dsn=psycopg.conninfo.make_conninfo(**params), use_age=False, vector_index_auto=False)
    with MemorySystem(config) as system:
        for mode, (v4, ranking) in modes.items():

            def one(i: int, v4: bool = v4, ranking: bool = ranking) -> list[int]:
                q = questions[i]
                found = system.query(
                    q.text, tenant=q.tenant, embedding=vectors[i], v4=v4, ranking=ranking, candidates=False
                )
                return [m.memory_id for m in found.memories]

            for i in range(len(questions)):  # warm-up: plans, pool
                one(i)
            runs: dict[bool, dict[str, list[float]]] = {flag: {"ms": [], "client": []} for flag in (False, True)}
            same = 0
            for rnd in range(2):
                for i in range(len(questions)):
                    answers = {}
                    for implicit in (True, False) if (i + rnd) % 2 else (False, True):
                        pipeline.IMPLICIT = implicit
                        c0, t0 = time.thread_time(), time.perf_counter()
                        answers[implicit] = one(i)
                        runs[implicit]["ms"].append((time.perf_counter() - t0) * 1000)
                        runs[implicit]["client"].append((time.thread_time() - c0) * 1000)
                    same += answers[True] == answers[False]
            pipeline.IMPLICIT = True
            out[f"{mode}, explicit"] = runs[False]
            out[f"{mode}, implicit"] = runs[True]
            out[f"{mode}, implicit"]["same"] = [same / (2 * len(questions))]
    text = report_queries(out, len(questions))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{dt.datetime.now():%Y%m%dT%H%M%S}-transactions-locomo.md").write_text(text)
    print(text)
    return 0


def report_queries(out: dict[str, dict[str, list[float]]], n: int) -> str:
    lines = heading(
        "Whole queries with implicit blocks against explicit transactions",
        f"LoCoMo dev, {n} questions x 2 rounds, cached vectors supplied, one process and MemorySystem; each "
        "query runs both ways, the order alternating (db/pipeline.IMPLICIT). Client CPU: the calling thread's.",
        ["query", "blocks", "p50 ms", "p95 ms", "client CPU ms (mean)", "explicit / implicit (median per query)",
         "same answers"],
    )  # fmt: skip
    for name, r in out.items():
        ratio, p95 = compare(r, out[name.replace("implicit", "explicit")] if name.endswith("implicit") else None)
        same = f"{r['same'][0]:.1%}" if "same" in r else "-"
        mode, _, kind = name.rpartition(", ")
        lines.append(
            f"| {mode} | {kind} | {statistics.median(r['ms']):.2f} | {p95:.2f} | {statistics.mean(r['client']):.2f} "
            f"| {ratio} | {same} |"
        )
    lines += ["", f"1-minute load average at the end: {os.getloadavg()[0]:.1f}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
