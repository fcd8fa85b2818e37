"""The library being measured, whichever checkout it is: its SQL files and its synthetic vectors.

It is the imported `memoria_pg`: this checkout's (installed), or another checkout's when the
PYTHONPATH of the process names one (ingest_ab.py's and before_after.py's child processes,
`PYTHONPATH=... ingest_explain.py`). Such a checkout may predate the public API of memoria_pg's
top level, hence the fallback of `hash_embed` to the old module paths.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np

import memoria_pg

DIM = 384


def sql_dir() -> Path:
    """sql/ of the imported library's checkout (its statements are these files' text), or of the
    repository of these benchmarks when the library is not a checkout (an installed wheel)."""
    checkout = Path(memoria_pg.__file__).resolve().parents[1] / "sql"
    return checkout if checkout.is_dir() else Path(__file__).resolve().parents[1] / "sql"


@functools.cache
def sql_text(name: str) -> str:
    """The text of sql/<name>.sql (name may contain a sub-folder: 'workers/bm25_tsrank')."""
    path = sql_dir() / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file {path}")
    return path.read_text(encoding="utf-8")


def hash_embed(dim: int = DIM) -> Callable[[str], np.ndarray]:
    """text -> the HashEmbedder vector of the normalized text (how the corpus and queries get theirs)."""
    try:
        from memoria_pg import HashEmbedder, normalize
    except ImportError:  # a checkout from before the public API (e.g. 914387e): the old module paths
        from memoria_pg.embedding import HashEmbedder
        from memoria_pg.text import normalize
    embedder = HashEmbedder(dim)
    return lambda text: embedder.embed([normalize(text)])[0]
