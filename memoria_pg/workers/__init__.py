"""Retrieval workers: each is one SQL statement in sql/workers/, run once per selected shard."""

from __future__ import annotations

from .base import Worker, WorkerContext
from .attribute import AttributeWorker
from .bm25 import BM25Worker
from .fusion import FusionWorker
from .graph import GraphWorker
from .phrase import PhraseWorker
from .vector import VectorWorker

WORKERS: dict[str, type[Worker]] = {
    "vector": VectorWorker,
    "bm25": BM25Worker,
    "graph": GraphWorker,
    "phrase": PhraseWorker,
    "attribute": AttributeWorker,
    "fusion": FusionWorker,
}

__all__ = ["WORKERS", "Worker", "WorkerContext"]
