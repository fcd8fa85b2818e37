"""The evaluation with int8 query vectors against float memory vectors: what a database sees after
its queries move to `embedding_backend = "onnx-int8"` while the memories it holds were embedded by the
float graph (or torch: the same vectors to 1 - cosine 6e-7).

    MEMORIA_EMBEDDING_BACKEND=onnx PYTHONPATH=. python benchmarks/int8_mixed.py --data /path/to/eval \
        --dsn postgresql://postgres@127.0.0.1:55432/postgres [--out results]

`python -m evals` as it is, every configuration and reference, with one change: each set's documents
are embedded from the float graph's cache (<eval cache>/<set>-all-MiniLM-L6-v2-onnx.npz) and its
queries from the int8 graph's (<set>-all-MiniLM-L6-v2-onnx-int8-<recipe>.npz); a text missing from a
cache is embedded by that graph. Writes results/<timestamp>-int8-queries/ as the evaluation writes
results/<timestamp>/ (each set's notes say which vectors it used), and leaves results/latest.md alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import evals.runner as runner
from evals.cache import EmbeddingCache, model_label

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """MEMORIA_EMBEDDING_BACKEND while a cache is named and may embed a miss (evals.cache reads it)."""
    before = os.environ.get("MEMORIA_EMBEDDING_BACKEND")
    os.environ["MEMORIA_EMBEDDING_BACKEND"] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MEMORIA_EMBEDDING_BACKEND", None)
        else:
            os.environ["MEMORIA_EMBEDDING_BACKEND"] = before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--dsn", required=True, help="an admin DSN allowed to CREATE DATABASE")
    parser.add_argument("--out", default=str(REPO / "results"))
    args = parser.parse_args(argv)
    float_embed = runner.embed

    def mixed(dataset, cache: EmbeddingCache):
        with backend("onnx"):
            docs, _ = float_embed(dataset, cache)
        with backend("onnx-int8"):
            int8 = EmbeddingCache(cache.path.with_name(f"{dataset.name}-{model_label(None)}.npz"), log=print)
            _, queries = float_embed(dataset, int8)
        dataset.notes.append(f"queries embedded by the int8 graph ({int8.path.name}), documents by the float one")
        return docs, queries

    runner.embed = mixed
    with backend("onnx"), tempfile.TemporaryDirectory() as tmp:
        report = runner.run_eval(
            args.data, dsn=args.dsn, out=tmp, log=lambda line: print(line, file=sys.stderr, flush=True)
        )
        folder = Path(report.paths["markdown"]).parent
        target = Path(args.out) / f"{folder.name}-int8-queries"
        shutil.move(str(folder), str(target))
    print(target / "results.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
