"""Retrieval workers: each is one SQL statement in sql/workers/, run once per selected shard, and
declares its own name, precondition, fusion weights, score direction and score name."""

from __future__ import annotations

from .base import Source, Worker, WorkerContext
from .registry import DEFAULT_WORKERS, FUSION_METHODS, RelevanceSource, WorkerRegistry

__all__ = ["DEFAULT_WORKERS", "FUSION_METHODS", "RelevanceSource", "Source", "Worker", "WorkerContext",
           "WorkerRegistry"]
