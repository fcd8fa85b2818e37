"""Ingestion side by side: several library versions / settings, alternated in one run, medians reported.

    python benchmarks/ingest_ab.py --n 10000 --rounds 3 \
        --variant before=/tmp/memoria-before:0004:writers=1 --variant after=.:head:writers=2

A variant is NAME=CODE:REVISION[:KEY=VALUE,...]: CODE is a checkout of memoria-pg whose library is
measured (`.` = this one), REVISION the schema revision the fresh database is migrated to first (with
this checkout's migrations), then KEY=VALUE options: writers=N (MEMORIA_INGEST_WRITERS), batch=N.
Each measurement is a fresh database and a child process that imports the library from CODE and runs
benchmarks/ingestion.py's store_many measurement (vectors supplied, indexes in place); variants
alternate within each round (A B, B A, ...), so drifting load hits them alike. Reported per variant:
median memories/s (library time), CPU ms per memory (this process + PostgreSQL backends), RSS at
10% / 100% of the stream, the machine's load, and every run. Markdown on stdout, JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from corpus import add_profile_argument  # no library import: the children measure other checkouts

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:55432/postgres"


def parse_variant(text: str) -> dict:
    name, _, rest = text.partition("=")
    code, _, rest = rest.partition(":")
    revision, _, opts = rest.partition(":")
    options = dict(kv.split("=", 1) for kv in opts.split(",") if kv)
    unknown = set(options) - {"writers", "batch"}
    if not name or not code or not revision or unknown:
        raise SystemExit(f"bad --variant {text!r}: NAME=CODE:REVISION[:writers=N,batch=N]")
    return {"name": name, "code": str(Path(code).resolve()), "revision": revision, **options}


def child(args) -> int:
    """Runs with the measured library (PYTHONPATH: the variant's checkout): one store_many pass, JSON on stdout."""
    import corpus
    import ingestion
    import psycopg
    from timing import CpuMeter

    from memoria_pg import Config, MemorySystem

    config = Config.from_env(dsn=args.child_dsn, use_age=False, pool_min_size=2, pool_max_size=8)
    world = corpus.universe(args.seed, args.tenants)
    run = argparse.Namespace(
        n=args.n, seed=args.seed, tenants=args.tenants, batch_size=args.batch, profile=args.profile
    )
    load0 = os.getloadavg()[0]
    with MemorySystem(config, auto_migrate=False) as system, psycopg.connect(args.child_dsn, autocommit=True) as admin:
        meter = CpuMeter(admin)
        before = meter.snapshot()
        result = ingestion.ingest(system, run, world)
        result["cpu"] = meter.since(before)
        # What the database holds (the admin user bypasses row-level security): must equal `inserted`.
        result["stored"] = admin.execute("SELECT count(*) FROM memoria.memories").fetchone()[0]
        result["stored_postings"] = admin.execute("SELECT count(*) FROM memoria.memory_terms").fetchone()[0]
        result["stored_docs"] = int(
            admin.execute("SELECT coalesce(sum(n_docs), 0) FROM memoria.bm25_docs").fetchone()[0]
        )
    result["load"] = (load0 + os.getloadavg()[0]) / 2
    print(json.dumps(result, default=str))
    return 0


def fresh_database(admin: str, name: str, revision: str) -> str:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = psycopg.conninfo.conninfo_to_dict(admin)
    params["dbname"] = name
    dsn = psycopg.conninfo.make_conninfo(**params)
    # The migrations are always this checkout's: its CLI, `memoria-pg db upgrade REVISION`, with the
    # default memory types (DEFAULT_MEMORY_TYPES) and without the AGE graph.
    env = {**os.environ, "PYTHONPATH": str(REPO), "MEMORIA_DSN": dsn, "MEMORIA_USE_AGE": "false"}
    env.pop("MEMORIA_MEMORY_TYPES", None)
    proc = subprocess.run(
        [sys.executable, "-m", "memoria_pg.cli", "db", "upgrade", revision],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"migrating {name} to {revision} failed:\n{proc.stdout}{proc.stderr[-4000:]}")
    return dsn


def measure(args, variant: dict) -> dict:
    dsn = fresh_database(args.dsn, args.db_name, variant["revision"])
    # benchmarks/corpus.py's texts depend on string hashing (set order): unpinned, the number of
    # distinct memories in the stream varies by a few between processes (89,226 or 89,227 at 100k).
    env = {**os.environ, "PYTHONPATH": variant["code"], "PYTHONHASHSEED": "0"}
    env.pop("MEMORIA_DSN", None)
    if "writers" in variant:
        env["MEMORIA_INGEST_WRITERS"] = variant["writers"]
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--child-dsn",
        dsn,
        "--n",
        str(args.n),
        "--seed",
        str(args.seed),
        "--tenants",
        str(args.tenants),
        "--profile",
        args.profile,
    ]
    if "batch" in variant:
        cmd += ["--batch", variant["batch"]]
    proc = subprocess.run(cmd, env=env, cwd=variant["code"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"variant {variant['name']} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    cpu = result["cpu"]
    result["cpu_ms_per_memory"] = (cpu["client_s"] + (cpu["server_s"] or 0.0)) * 1000 / args.n
    result["server_cpu_ms_per_memory"] = (cpu["server_s"] or 0.0) * 1000 / args.n
    result["client_cpu_ms_per_memory"] = cpu["client_s"] * 1000 / args.n
    rss = {round(x["fraction"], 1): x["rss_mb"] for x in result["rss"]}
    result["rss_10_mb"], result["rss_100_mb"] = rss.get(0.1), rss.get(1.0)
    return result


def med(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def markdown(args, variants: list[dict], runs: dict[str, list[dict]]) -> str:
    def f(x, nd=1):
        return "-" if x is None else f"{x:,.{nd}f}"

    lines = [
        f"# Ingestion side by side: {args.n:,} memories ({args.profile} profile), {args.rounds} round(s), "
        f"{os.cpu_count()} CPUs",
        "",
        "Vectors supplied (HashEmbedder), indexes in place, fresh database per run, variants alternated. "
        "Medians over the rounds.",
        "",
        "| variant | code | schema | writers | memories/s (library) | memories/s (wall) | CPU ms/memory "
        "(client + server) | client | server | RSS 10% MB | RSS 100% MB | load (1-min avg) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        rs = runs[v["name"]]
        lines.append(
            f"| {v['name']} | {v['code']} | {v['revision']} | {v.get('writers', 'default')} | "
            f"{f(med(rs, 'library_rate'), 0)} | {f(med(rs, 'rate'), 0)} | "
            f"{f(med(rs, 'cpu_ms_per_memory'), 2)} | "
            f"{f(med(rs, 'client_cpu_ms_per_memory'), 2)} | {f(med(rs, 'server_cpu_ms_per_memory'), 2)} | "
            f"{f(med(rs, 'rss_10_mb'))} | {f(med(rs, 'rss_100_mb'))} | {f(med(rs, 'load'))} |"
        )
    base = runs[variants[0]["name"]]
    for v in variants[1:]:
        a, b = med(base, "library_rate"), med(runs[v["name"]], "library_rate")
        ca, cb = med(base, "cpu_ms_per_memory"), med(runs[v["name"]], "cpu_ms_per_memory")
        if a and b and ca and cb:
            lines += [
                "",
                f"{v['name']} / {variants[0]['name']}: memories/s x{b / a:.2f}, CPU per memory x{cb / ca:.2f}.",
            ]
    lines += [
        "",
        "Every run (memories/s library, CPU ms/memory, write steps in seconds summed over batches and writers):",
        "",
    ]
    for v in variants:
        for r in runs[v["name"]]:
            steps = ", ".join(f"{k} {s:.1f}" for k, s in list(r["write_steps_s"].items())[:8])
            lines.append(
                f"- {v['name']}: {r['library_rate']:,.0f}/s, {r['cpu_ms_per_memory']:.2f} ms, "
                f"prepare {r['prepare_s']:.1f} s, write {r['write_s']:.1f} s ({steps}), load {r['load']:.1f}; "
                f"inserted {r['inserted']:,}, stored {r.get('stored', 0):,} memories, "
                f"{r.get('stored_postings', 0):,} postings, {r.get('stored_docs', 0):,} BM25 documents"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variant", action="append", default=[], help="NAME=CODE:REVISION[:writers=N,batch=N]")
    p.add_argument("--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", DEFAULT_ADMIN_DSN))
    p.add_argument("--db-name", default="memoria_ingest_ab")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tenants", type=int, default=10)
    add_profile_argument(p)
    p.add_argument("--json", help="also write every run to this JSON file")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--child-dsn", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    variants = [parse_variant(v) for v in args.variant] or [parse_variant("current=.:head")]
    runs: dict[str, list[dict]] = {v["name"]: [] for v in variants}
    for r in range(args.rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for v in order:
            t0 = time.time()
            result = measure(args, v)
            runs[v["name"]].append(result)
            print(
                f"[{time.strftime('%H:%M:%S')}] round {r + 1} {v['name']}: {result['library_rate']:,.0f}/s, "
                f"{result['cpu_ms_per_memory']:.2f} CPU ms/memory, load {result['load']:.1f} "
                f"({time.time() - t0:.0f} s); inserted {result['inserted']:,}, stored {result['stored']:,}, "
                f"BM25 documents {result['stored_docs']:,}",
                file=sys.stderr,
                flush=True,
            )
    text = markdown(args, variants, runs)
    print(text)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "variants": variants, "runs": runs}, indent=1, default=str)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
