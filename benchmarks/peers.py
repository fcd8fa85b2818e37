"""memoria-pg beside its peers on the same server, data and vectors, interleaved query by query: LangGraph's
`PostgresStore` (langgraph-checkpoint-postgres, pgvector index) and mem0's pgvector store (its
`PGVector` vector store, what `Memory.add(..., infer=False)` writes to, without any LLM), against
memoria-pg V4 retrieval-only (and the same with its lexical feedback off) and V3 (vector search), V3 both as by default (ranking, with the access-statistics upsert) and retrieval-only.

    pip install -e '.[peers]'     # the peers: benchmark-only dependencies
    python benchmarks/peers.py --data /work/shared/eval [--queries 400] [--rounds 2]

Data: LoCoMo dev turns, each stored with its context (the two turns before and after it, as the
evaluation stores them; the peers index the turn's text, and every system gets the same vector: the
evaluation's cached MiniLM vector of the memory, built as memoria_pg.embed_memories builds it), one
namespace / user / tenant per conversation; the questions with evidence (categories 1-4), their cached
query vectors supplied to every system, so no model runs. Each system has a database of its own on the
same server (dropped at the end). Per query the systems run in a rotating order; reported: evidence
recall@10, p50/p95 wall ms per search (the call as a user makes it, in this process), the median of
the per-query ratio to the faster peer, and the client CPU per search. Writes
results/peers/<timestamp>.md (also printed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from memoria_pg import Config, MemoryRecord, MemorySystem

OUT = Path(__file__).resolve().parent.parent / "results" / "peers"
Search = Callable[[Any, np.ndarray], list[str]]  # (query, vector) -> doc ids, best first


def database(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        conn.execute("SELECT 1")
    params = psycopg.conninfo.conninfo_to_dict(admin)
    params["dbname"] = name
    dsn = psycopg.conninfo.make_conninfo(**params)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return dsn


def langgraph_store(dsn: str, docs: list, vectors: dict, stack: list) -> Search:
    from langgraph.store.postgres import PostgresStore

    by_text = {d.content: vectors[(d.tenant, d.doc_id)] for d in docs}
    queries: dict[str, np.ndarray] = {}

    def embed(texts: list[str]) -> list[list[float]]:  # the supplied vectors: no model
        return [(queries[t] if t in queries else by_text[t]).tolist() for t in texts]

    manager = PostgresStore.from_conn_string(dsn, index={"dims": 384, "embed": embed, "fields": ["text"]})
    store = manager.__enter__()
    stack.append(lambda: manager.__exit__(None, None, None))
    store.setup()
    store.batch([_put(("locomo", d.tenant), d.doc_id, {"text": d.content, "context": d.context}) for d in docs])

    def search(q: Any, vector: np.ndarray) -> list[str]:
        queries[q.text] = vector
        return [item.key for item in store.search(("locomo", q.tenant), query=q.text, limit=10)]

    return search


def _put(namespace: tuple[str, ...], key: str, value: dict) -> Any:
    from langgraph.store.base import PutOp

    return PutOp(namespace, key, value)


def mem0_store(dsn: str, docs: list, vectors: dict, stack: list) -> Search:
    from mem0.vector_stores.pgvector import PGVector

    params = psycopg.conninfo.conninfo_to_dict(dsn)
    store = PGVector(
        dbname=params["dbname"], collection_name="memories", embedding_model_dims=384, user=params.get("user"),
        password=params.get("password"), host=params.get("host"), port=params.get("port"), diskann=False, hnsw=True,
    )  # fmt: skip
    for start in range(0, len(docs), 500):
        chunk = docs[start : start + 500]
        store.insert(
            [vectors[(d.tenant, d.doc_id)].tolist() for d in chunk],
            payloads=[{"user_id": d.tenant, "data": d.content, "doc_id": d.doc_id} for d in chunk],
            ids=[str(uuid.uuid4()) for _ in chunk],
        )

    def search(q: Any, vector: np.ndarray) -> list[str]:
        hits = store.search(q.text, vector.tolist(), top_k=10, filters={"user_id": q.tenant})
        return [h.payload["doc_id"] for h in hits]

    return search


def memoria(
    dsn: str, docs: list, vectors: dict, stack: list, *, v4: bool, ranking: bool, load: bool, feedback: bool = True
) -> Search:
    """memoria-pg's query as a user calls it; `ranking` True is the default path (ranking, and the
    access-statistics upsert of the returned memories: a write per query); `feedback` False turns the
    final CTE's lexical feedback off (Config.lexical_feedback), to show what it costs beside the peers."""
    system = MemorySystem(Config(dsn=dsn, use_age=False, lexical_feedback=feedback), auto_migrate=True)
    stack.append(system.close)
    if load:  # one copy of the data serves every memoria-pg system
        system.store_many(
            (MemoryRecord(content=d.content, context=d.context, tenant=d.tenant, metadata={"doc_id": d.doc_id},
                          created_at=d.created_at, external_id=d.doc_id, embedding=vectors[(d.tenant, d.doc_id)])
             for d in docs), return_ids=False,
        )  # fmt: skip
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE)")

    def search(q: Any, vector: np.ndarray) -> list[str]:
        # What a user who wants the 10 memories asks for: no candidate list beside them (candidates=False:
        # a retrieval-only query then reads only those rows).
        response = system.query(
            q.text, tenant=q.tenant, top_k=10, embedding=vector, ranking=ranking, v4=v4, candidates=False
        )
        return [m.external_id for m in response.memories]

    return search


def recall(found: list[str], relevant: frozenset[str]) -> float:
    return len(set(found[:10]) & relevant) / len(relevant)


def run(systems: dict[str, Search], queries: list, vectors: dict, rounds: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {n: {"ms": [], "cpu": [], "recall": []} for n in systems}
    names = list(systems)
    for rnd in range(rounds + 1):  # round 0 warms every system's caches and plans
        for i, q in enumerate(queries):
            shift = (i + rnd) % len(names)
            for name in names[shift:] + names[:shift]:
                t0, c0 = time.perf_counter(), time.thread_time()
                found = systems[name](q, vectors[q.query_id])
                ms, cpu = (time.perf_counter() - t0) * 1000, (time.thread_time() - c0) * 1000
                if rnd:
                    out[name]["ms"].append(ms)
                    out[name]["cpu"].append(cpu)
                    if rnd == 1:
                        out[name]["recall"].append(recall(found, q.relevant))
    return out


def report(out: dict[str, dict[str, list[float]]], args: argparse.Namespace, n_docs: int, n_queries: int) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    peers = [n for n in out if not n.startswith("memoria-pg")]
    faster = min(peers, key=lambda n: statistics.median(out[n]["ms"]))
    lines = [
        f"# memoria-pg beside its peers ({time.strftime('%Y-%m-%d %H:%M')}, commit {commit}, {os.cpu_count()} CPUs)",
        "",
        f"LoCoMo dev: {n_docs} turns with context, {n_queries} questions x {args.rounds} rounds, interleaved (the "
        "order rotates per query), vectors supplied. Faster peer: " + faster + ".",
        "",
        "| system | evidence recall@10 | p50 ms | p95 ms | client CPU ms p50 | median per-query ratio to "
        + faster
        + " |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in out.items():
        ratio = statistics.median(a / b for a, b in zip(r["ms"], out[faster]["ms"]))
        lines.append(
            f"| {name} | {np.mean(r['recall']):.3f} | {statistics.median(r['ms']):.1f} | "
            f"{np.percentile(r['ms'], 95):.1f} | {statistics.median(r['cpu']):.2f} | {ratio:.2f} |"
        )
    lines += ["", f"1-minute load average at the end: {os.getloadavg()[0]:.1f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from evals import locomo
    from evals.cache import EmbeddingCache, default_cache_dir
    from evals.metrics import ADVERSARIAL
    from evals.runner import embed

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", "postgresql://postgres@127.0.0.1:55432/postgres")
    )
    p.add_argument("--data", type=Path, default=os.environ.get("MEMORIA_EVAL_DATA"), required=False)
    p.add_argument("--queries", type=int, default=400)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    if args.data is None:
        raise SystemExit("give --data (or MEMORIA_EVAL_DATA): the folder holding locomo/")
    dataset = locomo.load(args.data)
    doc_vectors, query_vectors = embed(dataset, EmbeddingCache(default_cache_dir() / "locomo-all-MiniLM-L6-v2.npz"))
    queries = [q for q in dataset.queries if q.relevant and q.group != ADVERSARIAL][: args.queries]
    names = {"langgraph": "memoria_peer_langgraph", "mem0": "memoria_peer_mem0", "memoria": "memoria_peer_memoria"}
    dsns = {k: database(args.dsn, v) for k, v in names.items()}
    stack: list[Callable[[], Any]] = []
    try:
        docs = dataset.documents
        systems = {
            "LangGraph PostgresStore": langgraph_store(dsns["langgraph"], docs, doc_vectors, stack),
            "mem0 PGVector": mem0_store(dsns["mem0"], docs, doc_vectors, stack),
            "memoria-pg V4 retrieval-only": memoria(
                dsns["memoria"], docs, doc_vectors, stack, v4=True, ranking=False, load=True
            ),
            "memoria-pg V4 retrieval-only, lexical feedback off": memoria(
                dsns["memoria"], docs, doc_vectors, stack, v4=True, ranking=False, load=False, feedback=False
            ),
            "memoria-pg V3 (vector + ranking, the default)": memoria(
                dsns["memoria"], docs, doc_vectors, stack, v4=False, ranking=True, load=False
            ),
            "memoria-pg V3 retrieval-only": memoria(
                dsns["memoria"], docs, doc_vectors, stack, v4=False, ranking=False, load=False
            ),
        }
        out = run(systems, queries, query_vectors, args.rounds)
    finally:
        for close in reversed(stack):
            close()
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            for name in names.values():
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    text = report(out, args, len(dataset.documents), len(queries))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{dt.datetime.now():%Y%m%dT%H%M%S}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
