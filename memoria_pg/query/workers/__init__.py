"""Retrieval workers: each is one SQL statement in sql/workers/, run once per selected shard, and
declares its own name, precondition, fusion weights, score direction and score name."""

from __future__ import annotations

from ...config import FUSION_METHODS
from .base import FusionWeights, Source, Worker, WorkerContext
from .registry import DEFAULT_WORKERS, RelevanceSource, WorkerRegistry

__all__ = [
    "DEFAULT_WORKERS",
    "FUSION_METHODS",
    "FusionWeights",
    "RelevanceSource",
    "Source",
    "Worker",
    "WorkerContext",
    "WorkerRegistry",
]
