"""Fusion lab, step 1: run V4 once per evaluation set and keep, for every query, each worker's hit
list (memory id, type, rank, raw score, details), the query's type hint and the engine's own
ranking, so that fusion rules can be compared in process in seconds (benchmarks/fusion_lab.py).

    python benchmarks/fusion_capture.py --data /work/shared/eval --dsn postgresql://... [--sets locomo,...]

The captures hold ids and scores only (no text of the data sets) and are written outside the
project, to ~/.cache/memoria-pg/fusion-lab/<set>.pkl (--out to change it).
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from evals.cache import EmbeddingCache, default_cache_dir, model_label
from evals.databases import fresh_database
from evals.runner import DATASETS, DEPTH, LOADERS, embed, ingest
from memoria_pg import Config, MemorySystem
from memoria_pg.query import pipeline as pipeline_module

DEFAULT_OUT = Path.home() / ".cache" / "memoria-pg" / "fusion-lab"


class Recorder:
    """Wraps the pipeline's build_candidates and filter_by_type to keep what the final CTE saw."""

    def __init__(self) -> None:
        self.hits: dict[str, list[tuple[int, str, int, float, dict[str, Any]]]] = {}
        self.hint: str | None = None
        self._build = pipeline_module.build_candidates
        self._filter = pipeline_module.filter_by_type

    def install(self) -> None:
        def build(conn, hits, registry, **kwargs):  # type: ignore[no-untyped-def]
            self.hits = {
                source: [
                    (h.memory_id, h.memory_type, h.rank, registry.source(source).fused_score(h), h.detail) for h in hs
                ]
                for source, hs in hits.items()
            }
            return self._build(conn, hits, registry, **kwargs)

        def type_filter(candidates, hint):  # type: ignore[no-untyped-def]
            self.hint = hint
            return self._filter(candidates, hint)

        pipeline_module.build_candidates = build  # type: ignore[assignment]
        pipeline_module.filter_by_type = type_filter  # type: ignore[assignment]


def capture(name: str, root: Path, dsn: str, out: Path, settings: dict[str, Any]) -> Path:
    dataset = LOADERS[name](root, None)
    depth = DEPTH[name]
    cache = EmbeddingCache(default_cache_dir() / f"{name}-{model_label(None)}.npz", model_path=None, dim=384, log=print)
    doc_vectors, query_vectors = embed(dataset, cache)
    config = Config(top_k=depth, worker_limit=max(Config.worker_limit, depth), **settings)
    recorder = Recorder()
    recorder.install()
    queries: list[dict[str, Any]] = []
    with fresh_database(dsn, f"lab_{name}", False, print) as db:
        with MemorySystem(config.replace(dsn=db), embedder=cache, auto_migrate=True) as system:
            ingest(system, dataset, doc_vectors, print)
            t0 = time.perf_counter()
            for q in dataset.queries:
                response = system.query(
                    q.text,
                    tenant=q.tenant,
                    top_k=depth,
                    embedding=query_vectors[q.query_id],
                    ranking=False,
                    reference_time=q.reference_time,
                )
                d = response.diagnostics
                queries.append(
                    {
                        "query_id": q.query_id,
                        "tenant": q.tenant,
                        "hits": recorder.hits,
                        "hint": recorder.hint,
                        "v4": [m.metadata.get("doc_id") for m in response.memories],
                        "database_ms": d.database_ms,
                        "route": d.route,
                    }
                )
            print(f"   {len(queries)} queries in {time.perf_counter() - t0:.1f} s")
        with psycopg.connect(db) as conn:
            ids = conn.execute("SELECT id, tenant, external_id, memory_type FROM memoria.memories").fetchall()
    path = out / f"{name}.pkl"
    out.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        pickle.dump({"name": name, "depth": depth, "queries": queries, "memories": ids}, f)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--sets", default=",".join(DATASETS))
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--worker-limit", type=int, default=None, help="deeper worker lists than the eval's")
    args = parser.parse_args(argv)
    settings: dict[str, Any] = {"statement_timeout_ms": 900000}
    for name in args.sets.split(","):
        if args.worker_limit:
            DEPTH[name] = args.worker_limit
        t0 = time.perf_counter()
        path = capture(name, Path(args.data), args.dsn, Path(args.out), settings)
        print(f"== {name}: {path} in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
