"""Ingestion beside the peers on the same server, data and vectors: SciFact abstracts (or another
evaluation set's documents) stored into LangGraph's `PostgresStore` (its pgvector index), mem0's
pgvector store (`PGVector.insert`, what `Memory.add(..., infer=False)` writes to, no LLM) and
memoria-pg (`store_many`, the defaults: BM25 postings, entities and co-occurrence, attributes), with
the evaluation's cached MiniLM vectors supplied to every system, so no model runs.

    pip install -e '.[peers]'
    python benchmarks/peers_ingest.py --data /work/shared/eval [--set scifact] [--rounds 2]

Each measurement is a fresh database on the same server (dropped at the end) and one whole load of
the set, indexes in place; the systems alternate within each round (A B C, then C B A, ...). Reported
per system: the median memories/s (wall clock of the load), CPU ms per memory of this process
(client) and of the database's backends (server, /proc: the server must run on this machine), and
the load average. Writes results/peers/<timestamp>-ingest.md (also printed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from peers import database
from psycopg import sql
from timing import CpuMeter

OUT = Path(__file__).resolve().parent.parent / "results" / "peers"
CHUNK = 500  # documents per call for the peers (memoria-pg's store_many batches by its own setting)
Loader = Callable[[str, list, dict], Callable[[], Any]]  # (dsn, docs, vectors) -> load(), returning a closer


def langgraph(dsn: str, docs: list, vectors: dict) -> Callable[[], Any]:
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    by_text = {d.content: vectors[(d.tenant, d.doc_id)] for d in docs}

    def embed(texts: list[str]) -> list[list[float]]:  # the supplied vectors: no model
        return [by_text[t].tolist() for t in texts]

    manager = PostgresStore.from_conn_string(dsn, index={"dims": 384, "embed": embed, "fields": ["text"]})
    store = manager.__enter__()
    store.setup()

    def load() -> Any:
        for start in range(0, len(docs), CHUNK):
            store.batch(
                [PutOp(("bench", d.tenant), d.doc_id, {"text": d.content}) for d in docs[start : start + CHUNK]]
            )
        return lambda: manager.__exit__(None, None, None)

    return load


def mem0(dsn: str, docs: list, vectors: dict) -> Callable[[], Any]:
    from mem0.vector_stores.pgvector import PGVector

    params = psycopg.conninfo.conninfo_to_dict(dsn)
    store = PGVector(
        dbname=params["dbname"], collection_name="memories", embedding_model_dims=384, user=params.get("user"),
        password=params.get("password"), host=params.get("host"), port=params.get("port"), diskann=False, hnsw=True,
    )  # fmt: skip

    def load() -> Any:
        for start in range(0, len(docs), CHUNK):
            chunk = docs[start : start + CHUNK]
            store.insert(
                [vectors[(d.tenant, d.doc_id)].tolist() for d in chunk],
                payloads=[{"user_id": d.tenant, "data": d.content, "doc_id": d.doc_id} for d in chunk],
                ids=[str(uuid.uuid4()) for _ in chunk],
            )
        return lambda: None

    return load


def memoria(dsn: str, docs: list, vectors: dict, **settings: Any) -> Callable[[], Any]:
    from memoria_pg import Config, MemoryRecord, MemorySystem

    # The load as measured since the first run: no per-tenant HNSW index built in the background after it
    # (Config.vector_index_auto would build SciFact's one tenant's, about 2 s, beside the next system's load).
    config = Config(dsn=dsn, use_age=False, vector_index_auto=False, **settings)
    system = MemorySystem(config, auto_migrate=True)

    def load() -> Any:
        system.store_many(
            (MemoryRecord(content=d.content, context=d.context, tenant=d.tenant, metadata={"doc_id": d.doc_id},
                          external_id=d.doc_id, embedding=vectors[(d.tenant, d.doc_id)]) for d in docs),
            return_ids=False,
        )  # fmt: skip
        return system.close

    return load


SYSTEMS: dict[str, Loader] = {
    "LangGraph PostgresStore": langgraph,
    "mem0 PGVector": mem0,
    "memoria-pg store_many": memoria,
}


def measure(admin: str, name: str, loader: Loader, docs: list, vectors: dict) -> dict[str, float]:
    dsn = database(admin, "memoria_peer_ingest")
    load = loader(dsn, docs, vectors)  # schema and connections first: not timed
    with psycopg.connect(dsn, autocommit=True) as conn:
        meter = CpuMeter(conn)
        before, load0 = meter.snapshot(), os.getloadavg()[0]
        t0 = time.perf_counter()
        close = load()
        wall = time.perf_counter() - t0
        cpu = meter.since(before)  # before closing: the backends must still be there
    close()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier("memoria_peer_ingest")))
    n = len(docs)
    return {
        "rate": n / wall,
        "client_ms": cpu["client_s"] * 1000 / n,
        "server_ms": (cpu["server_s"] or 0.0) * 1000 / n,
        "load": (load0 + os.getloadavg()[0]) / 2,
    }


def settings(variant: str) -> dict[str, int]:
    """`KEY=VALUE[,KEY=VALUE]` as Config settings with integer values."""
    out = {}
    for pair in variant.split(","):
        key, sep, value = pair.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise SystemExit(f"--variant {variant!r}: expected KEY=INTEGER[,KEY=INTEGER]")
        out[key.strip()] = int(value)
    return out


def main(argv: list[str] | None = None) -> int:
    from evals.cache import EmbeddingCache, default_cache_dir
    from evals.runner import LOADERS, embed

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", "postgresql://postgres@127.0.0.1:55432/postgres")
    )
    p.add_argument("--data", type=Path, default=os.environ.get("MEMORIA_EVAL_DATA"))
    p.add_argument("--set", default="scifact", choices=("scifact", "hotpotqa", "msmarco"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--first-batch-sizes",
        default=None,
        help="memoria-pg only, once per value of Config.ingest_first_batch_size (e.g. 256,0: the ramp against "
        "full batches from the start), instead of the three systems",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="memoria-pg only, once per --variant, with these Config settings (integers), e.g. --variant "
        "ingest_writers=2 --variant ingest_writers=3, instead of the three systems",
    )
    args = p.parse_args(argv)
    if args.data is None:
        raise SystemExit("give --data (or MEMORIA_EVAL_DATA): the folder holding the evaluation sets")
    dataset = LOADERS[args.set](args.data, None)
    vectors, _ = embed(dataset, EmbeddingCache(default_cache_dir() / f"{args.set}-all-MiniLM-L6-v2.npz"))
    docs = dataset.documents
    systems = SYSTEMS
    if args.first_batch_sizes:
        systems = {
            f"memoria-pg store_many, first batch {n}": functools.partial(memoria, ingest_first_batch_size=n)
            for n in (int(v) for v in args.first_batch_sizes.split(","))
        }
    if args.variant:
        systems = {f"memoria-pg store_many, {v}": functools.partial(memoria, **settings(v)) for v in args.variant}
    names = list(systems)
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for rnd in range(args.rounds):
        order = names if rnd % 2 == 0 else names[::-1]
        for name in order:
            result = measure(args.dsn, name, systems[name], docs, vectors)
            runs[name].append(result)
            print(f"round {rnd + 1} {name}: {result['rate']:,.0f}/s, client {result['client_ms']:.2f} ms, "
                  f"server {result['server_ms']:.2f} ms per memory, load {result['load']:.1f}", flush=True)  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    chars = statistics.mean(len(d.content) for d in docs)
    lines = [
        f"# Ingestion beside the peers ({dt.datetime.now():%Y-%m-%d %H:%M}, commit {commit}, {os.cpu_count()} CPUs)",
        "",
        f"{args.set}: {len(docs):,} documents ({chars:,.0f} characters on average), one tenant as the evaluation "
        f"stores them, vectors supplied (the evaluation's cached MiniLM vectors), a fresh database per load, "
        f"{args.rounds} round(s), systems alternating. Medians over the rounds.",
        "",
        "| system | memories/s (wall) | CPU ms / memory, client | server | total | load (1-min avg) |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        rs = runs[name]

        def med(key: str, rs: list[dict[str, float]] = rs) -> float:
            return statistics.median(r[key] for r in rs)

        lines.append(
            f"| {name} | {med('rate'):,.0f} | {med('client_ms'):.2f} | {med('server_ms'):.2f} | "
            f"{med('client_ms') + med('server_ms'):.2f} | {med('load'):.1f} |"
        )
    text = "\n".join(lines) + "\n"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{dt.datetime.now():%Y%m%dT%H%M%S}-ingest-{args.set}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
