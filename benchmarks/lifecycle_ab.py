"""Delete and update of one memory, before/after side by side: a git revision of the library (A) and the
working tree (B), each in its own process on its own copy of a scale database (migrated by its own code),
alternating operation by operation (A then B, then B then A), so that the machine's load falls on both.

    python benchmarks/lifecycle_ab.py --rev a7e6699 --source memoria_scale_100000 [--ops 150]

Each child deletes and updates memories of the same tenant, chosen with the same seed (the copies hold
the same rows). Update: new text with a supplied vector (HashEmbedder), as benchmarks/lifecycle.py.
Reports p50/p95 wall ms and client CPU ms per operation, and the median of the per-operation ratio B/A.
Writes results/lifecycle/<timestamp>-ab.md (also printed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from lifecycle import OUT, copy_database, pct
from psycopg import sql

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def serve(dsn: str, tenant: str, seed: int, ops: int) -> None:
    """The child: answers `delete N` / `update N` lines with {"ms": wall, "cpu": client CPU} JSON lines."""
    import random

    from memoria_pg import DEFAULT_MEMORY_TYPES, Config, HashEmbedder, MemorySystem, normalize

    config = Config(dsn=dsn, use_age=False, memory_types=DEFAULT_MEMORY_TYPES)
    embedder = HashEmbedder()
    with MemorySystem(config, embedder=embedder, auto_migrate=True) as system, psycopg.connect(dsn) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM memoria.memories WHERE tenant = %s ORDER BY id", (tenant,))]
        ids = random.Random(seed).sample(ids, 2 * ops)
        print("ready", flush=True)
        for line in sys.stdin:
            op, n = line.split()
            i = int(n)
            text = f"corrected note {i}: the review moved to Thursday"
            vector = embedder.embed([normalize(text)])[0]
            t0, c0 = time.perf_counter(), time.process_time()
            if op == "delete":
                system.delete(ids[i], tenant=tenant)
            else:
                system.update(ids[ops + i], tenant=tenant, content=text, embedding=vector)
            print(json.dumps({"ms": (time.perf_counter() - t0) * 1000, "cpu": (time.process_time() - c0) * 1000}),
                  flush=True)  # fmt: skip


def child(pythonpath: Path, dsn: str, tenant: str, ops: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=f"{pythonpath}{os.pathsep}{HERE}")
    code = f"import lifecycle_ab; lifecycle_ab.serve({dsn!r}, {tenant!r}, 11, {ops})"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env, cwd=pythonpath)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "child did not start"
    return proc


def ask(proc: subprocess.Popen[str], line: str) -> dict[str, float]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return dict(json.loads(proc.stdout.readline()))


def table(results: dict[str, dict[str, list[dict[str, float]]]], rev: str) -> list[str]:
    lines = [
        "| operation | side | p50 ms | p95 ms | client CPU ms p50 | median ratio B/A |",
        "|---|---|---|---|---|---|",
    ]
    for op in ("delete", "update"):
        a, b = results["A"][op], results["B"][op]
        ratio = statistics.median(y["ms"] / x["ms"] for x, y in zip(a, b))
        for label, rows in ((f"before ({rev})", a), ("after (working tree)", b)):
            ms = [r["ms"] for r in rows]
            lines.append(f"| {op} | {label} | {statistics.median(ms):.1f} | {pct(ms, 0.95):.1f} | "
                         f"{statistics.median(r['cpu'] for r in rows):.2f} | {ratio:.2f} |")  # fmt: skip
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rev", required=True, help="the 'before' git revision")
    p.add_argument("--source", required=True, help="database built by scale.py (left untouched)")
    p.add_argument(
        "--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", "postgresql://postgres@127.0.0.1:55432/postgres")
    )
    p.add_argument("--tenant", default="tenant_01")
    p.add_argument("--ops", type=int, default=150)
    args = p.parse_args()
    names = {"A": "memoria_lifecycle_ab_before", "B": "memoria_lifecycle_ab_after"}
    dsns = {side: copy_database(args.dsn, args.source, name) for side, name in names.items()}
    results: dict[str, dict[str, list[dict[str, float]]]] = {s: {"delete": [], "update": []} for s in names}
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", tmp, args.rev], check=True,
                       capture_output=True)  # fmt: skip
        try:
            procs = {"A": child(Path(tmp), dsns["A"], args.tenant, args.ops),
                     "B": child(REPO, dsns["B"], args.tenant, args.ops)}  # fmt: skip
            for op in ("delete", "update"):
                for i in range(args.ops):
                    for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
                        results[side][op].append(ask(procs[side], f"{op} {i}"))
            for proc in procs.values():
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout=60)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", tmp], capture_output=True)
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                for name in names.values():
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    lines = [f"# Lifecycle before/after: `{args.source}`, tenant {args.tenant} ({time.strftime('%Y-%m-%d %H:%M')}, "
             f"{os.cpu_count()} CPUs)", "",
             f"A = {args.rev}, B = the working tree on {commit.stdout.strip()}; {args.ops} operations of each kind "
             "per side, alternating A/B operation by operation.", "", *table(results, args.rev), "",
             f"1-minute load average {load0:.1f} -> {os.getloadavg()[0]:.1f}."]  # fmt: skip
    text = "\n".join(lines) + "\n"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{dt.datetime.now():%Y%m%dT%H%M%S}-ab.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
