"""Ingestion on real text beside the synthetic corpus: what a memory costs, by statement, on the public
sets the evaluation reads (SciFact and HotpotQA abstracts, LoCoMo turns with their context, MS MARCO
passages), read from MEMORIA_EVAL_DATA (--data) where they lie, never copied.

    python benchmarks/ingest_real.py --sets scifact,hotpotqa,locomo,synthetic-short,synthetic-realistic \
        [--prefill 1000] [--batch 500]

The synthetic sets are benchmarks/corpus.py's memories (seed 99, 10 tenants) in its short profile (one
templated sentence) or its realistic one (built to the length and entities of HotpotQA paragraphs,
corpus.REALISTIC_TARGET, measured by benchmarks/corpus_profile.py); "synthetic" is the default profile,
realistic.

For each set, in a database of its own (dropped at the end): the first --prefill memories are stored
(committed, indexes in place: the state a user's next batch meets), then --repeat batches of --batch
more are written one statement at a time and rolled back, each statement's CPU read on the server
backend (/proc/<pid>/schedstat: independent of the machine's load; ingest_explain.metered_batches).
Then the same batches are stored for real with store_many (committed, the library's defaults: pipeline
mode, its writers) and timed on the wall clock. Vectors are the evaluation's cached MiniLM vectors of
each text when the cache has them (the memory's vector as the library builds it: content, then content
with its context), else HashEmbedder's: vectors are supplied either way, no model runs for a cached set.

Reported per set: characters, BM25 terms, entities and co-occurring pairs per memory (what the cost
follows), server and client CPU ms per memory by step, and memories/s. With --rounds R every set is
measured R times, the sets alternating (A B C, C B A, ...), and the medians are reported. Writes
results/ingest/<timestamp>-real.md (also printed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import corpus
import psycopg
from ingest_explain import metered_batches
from psycopg import sql

from memoria_pg import Config, HashEmbedder, MemorySystem, embed_memories, normalize

OUT = Path(__file__).resolve().parent.parent / "results" / "ingest"
REAL = ("scifact", "hotpotqa", "locomo", "msmarco")
SYNTHETIC = {f"synthetic-{p}": p for p in corpus.PROFILES} | {"synthetic": corpus.DEFAULT_PROFILE}


def real_records(root: Path, name: str, n: int, cache_dir: Path) -> list[dict[str, Any]]:
    """The set's first n documents as records (tenant = the set's tenant), with vectors supplied."""
    from evals import beir, locomo
    from evals.cache import EmbeddingCache

    dataset = locomo.load(root) if name == "locomo" else beir.load(root, name)
    docs = dataset.documents[:n]
    path = cache_dir / f"{name}-all-MiniLM-L6-v2.npz"
    embedder = EmbeddingCache(path) if path.exists() else HashEmbedder()
    vectors = embed_memories(embedder, [d.content for d in docs], [d.context for d in docs])
    return [{"content": d.content, "context": d.context, "tenant": d.tenant, "metadata": dict(d.metadata),
             "created_at": d.created_at, "embedding": v} for d, v in zip(docs, vectors)]  # fmt: skip


def synthetic_records(n: int, profile: str) -> list[dict[str, Any]]:
    embedder = HashEmbedder()

    def embed(text: str) -> list[float]:
        return embedder.embed([normalize(text)])[0]

    return list(corpus.memories(n, seed=99, n_tenants=10, embed=embed, profile=profile))


def shape(dsn: str) -> dict[str, float]:
    """Per stored memory: characters, postings, entity mentions, directed pairs of its entities and
    the pairs counted as co-occurrences."""
    with psycopg.connect(dsn) as conn:
        window = conn.execute("SELECT to_regprocedure('memoria.co_occurs(smallint, smallint)') IS NOT NULL").fetchone()[
            0
        ]
        n, chars = conn.execute("SELECT count(*), avg(length(content)) FROM memoria.memories").fetchone()
        postings = conn.execute("SELECT count(*) FROM memoria.memory_terms").fetchone()[0]
        mentions = conn.execute("SELECT count(*) FROM memoria.memory_entities").fetchone()[0]
        pairs = conn.execute(
            "SELECT coalesce(sum(k * (k - 1)), 0) FROM (SELECT count(*) AS k FROM memoria.memory_entities "
            "GROUP BY memory_id) m"
        ).fetchone()[0]
        counted = (
            conn.execute(  # the pairs the co-occurrence upkeep writes (0013's window; each pair once since 0017)
                "SELECT count(*) FROM memoria.memory_entities a JOIN memoria.memory_entities b ON b.tenant = a.tenant "
                "AND b.memory_id = a.memory_id AND b.entity_id > a.entity_id AND memoria.co_occurs(a.ordinal, b.ordinal)"
            ).fetchone()[0]
            if window
            else pairs
        )
    return {"chars": float(chars or 0), "terms": postings / n, "entities": mentions / n, "pairs": float(pairs) / n,
            "counted": float(counted) / n}  # fmt: skip


def database(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = psycopg.conninfo.conninfo_to_dict(admin)
    params["dbname"] = name
    return psycopg.conninfo.make_conninfo(**params)


def measure(admin: str, name: str, records: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    db = f"{args.db_prefix}_{name.replace('-', '_')}"
    dsn = database(admin, db)
    try:
        config = Config(dsn=dsn, use_age=args.age, pool_min_size=1, pool_max_size=4)
        prefill, rest = records[: args.prefill], records[args.prefill :]
        with MemorySystem(config, embedder=HashEmbedder(), auto_migrate=True) as system:
            system.store_many(prefill, return_ids=False)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM (ANALYZE)")
            runs, _ = metered_batches(system, rest, args.batch, args.repeat)
        with MemorySystem(config, embedder=HashEmbedder()) as system:
            t0 = time.perf_counter()
            stored = system.store_many(rest[: args.batch * args.repeat], return_ids=False).inserted
            wall = time.perf_counter() - t0
        return {"runs": runs, "shape": shape(dsn), "per_s": stored / wall, "stored": stored}
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))


def library_version() -> str:
    """The commit of the library this process imports (PYTHONPATH may name another checkout), "+" if its
    tree has changes."""
    import memoria_pg

    where = str(Path(memoria_pg.__file__).resolve().parent)
    head = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--", "."], capture_output=True, text=True)
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    commit = library_version()
    steps = sorted({k for r in results.values() for run in r["runs"] for k in run})
    med = {n: {k: statistics.median(run.get(k, 0.0) for run in r["runs"]) for k in steps} for n, r in results.items()}
    names = list(results)
    lines = [
        f"# Ingestion on real text ({time.strftime('%Y-%m-%d %H:%M')}, commit {commit}, {os.cpu_count()} CPUs, "
        f"graph {'AGE' if args.age else 'SQL'})", "",
        f"{args.prefill} memories stored first, then {args.repeat} batches of {args.batch} measured statement by "
        "statement (rolled back), then the same batches stored with store_many (wall clock)"
        + (f"; {args.rounds} rounds, the sets alternating, medians over all batches (store_many: over the rounds)."
           if args.rounds > 1 else ".") + " synthetic-*: benchmarks/corpus.py in that profile.", "",
        "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names),
    ]  # fmt: skip
    for key, label in (("chars", "characters / memory"), ("terms", "BM25 postings / memory"),
                       ("entities", "entity mentions / memory"), ("pairs", "pairs of its entities / memory"),
                       ("counted", "co-occurrences counted / memory")):  # fmt: skip
        lines.append(f"| {label} | " + " | ".join(f"{results[n]['shape'][key]:.1f}" for n in names) + " |")
    server = {n: sum(v for k, v in med[n].items() if "(client)" not in k) for n in names}
    client = {n: sum(v for k, v in med[n].items() if "(client)" in k) for n in names}
    lines.append("| **server CPU ms / memory** | " + " | ".join(f"**{server[n]:.3f}**" for n in names) + " |")
    spread = {n: [sum(v for k, v in run.items() if "(client)" not in k) for run in results[n]["runs"]] for n in names}
    lines.append(
        "| server CPU ms / memory, batches' range | "
        + " | ".join(f"{min(spread[n]):.2f} - {max(spread[n]):.2f}" for n in names)
        + " |"
    )
    lines.append("| client CPU ms / memory | " + " | ".join(f"{client[n]:.3f}" for n in names) + " |")
    lines.append("| store_many memories/s (wall) | " + " | ".join(f"{results[n]['per_s']:.0f}" for n in names) + " |")
    for step in sorted(steps, key=lambda k: -max(med[n][k] for n in names)):
        lines.append(f"| {step} | " + " | ".join(f"{med[n][step]:.4f}" for n in names) + " |")
    lines += ["", f"1-minute load average at the end: {os.getloadavg()[0]:.1f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", "postgresql://postgres@127.0.0.1:55432/postgres")
    )
    p.add_argument("--data", type=Path, default=os.environ.get("MEMORIA_EVAL_DATA"))
    p.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "memoria-pg" / "eval")
    p.add_argument("--sets", default="scifact,hotpotqa,locomo,synthetic")
    p.add_argument("--db-prefix", default="memoria_ingest_real", help="each set's database: PREFIX_<set>")
    p.add_argument("--prefill", type=int, default=1000)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--rounds", type=int, default=1, help="measure every set this many times (medians reported)")
    p.add_argument("--age", action="store_true", help="mirror into the AGE graph (the server must have AGE)")
    args = p.parse_args(argv)
    need = args.prefill + args.batch * args.repeat
    loaded: dict[str, list[dict[str, Any]]] = {}
    for name in args.sets.split(","):
        if name in REAL and args.data is None:
            raise SystemExit("the real sets need --data or MEMORIA_EVAL_DATA")
        if name in SYNTHETIC:
            profile = SYNTHETIC[name]
            name = f"synthetic-{profile}"  # "synthetic" is reported as the profile it stands for
            records = synthetic_records(need, profile)
        else:
            records = real_records(args.data, name, need, args.cache_dir)
        if len(records) < need:
            raise SystemExit(f"{name}: {len(records)} documents, fewer than --prefill + --batch * --repeat = {need}")
        loaded[name] = records
    results: dict[str, dict[str, Any]] = {}
    for r in range(args.rounds):  # the sets alternate (A B C, C B A, ...): drifting load hits them alike
        for name in list(loaded) if r % 2 == 0 else list(reversed(loaded)):
            print(f"[{time.strftime('%H:%M:%S')}] round {r + 1}: {name}", file=sys.stderr, flush=True)
            one = measure(args.dsn, name, loaded[name], args)
            if name in results:
                results[name]["runs"] += one["runs"]
                results[name]["rates"].append(one["per_s"])
            else:
                results[name] = {**one, "rates": [one["per_s"]]}
    for result in results.values():
        result["per_s"] = statistics.median(result["rates"])
    results = {name: results[name] for name in loaded}
    text = report(results, args)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{dt.datetime.now():%Y%m%dT%H%M%S}-real.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
