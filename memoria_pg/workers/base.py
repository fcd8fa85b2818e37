"""What every worker shares: its context, its statements, and turning rows into SourceHits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import psycopg
from psycopg.rows import dict_row

from ..config import Config
from ..resources import load_sql
from ..types import ProcessedQuery, Shard, SourceHit


@dataclass(frozen=True)
class WorkerContext:
    query: ProcessedQuery
    embedding: np.ndarray
    shards: tuple[Shard, ...]
    limit: int  # per shard
    graph_limit: int  # per shard
    graph_depth: int
    config: Config
    graph_backend: str = "sql"  # "age" when the server has the AGE graph
    # The tenant's memories per memory type (read with the query's entity lookup), or None: a
    # worker that needs them reads them itself.
    tenant_rows: Mapping[str, int] | None = None

    @property
    def shard_types(self) -> list[str] | None:
        types = [s.memory_type for s in self.shards if s.memory_type is not None]
        return types or None


class Worker:
    """One retrieval source. Subclasses name their SQL file and bind its parameters per shard."""

    name: ClassVar[str]
    sql_name: ClassVar[str]
    higher_is_better: ClassVar[bool] = True  # False when `score` is a distance

    def sql(self, ctx: WorkerContext) -> str:
        return load_sql(self.sql_name)

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        raise NotImplementedError

    def statements(self, ctx: WorkerContext) -> list[tuple[str, dict[str, Any]]]:
        return [(self.sql(ctx), self.params(ctx, shard)) for shard in ctx.shards]

    def statements_for(self, conn: psycopg.Connection, ctx: WorkerContext) -> list[tuple[str, dict[str, Any]]]:
        """The statements `run` executes in `conn`'s transaction (a worker may look at the data first)."""
        return self.statements(ctx)

    def score(self, row: dict[str, Any]) -> float:
        return float(row["score"])

    def detail(self, row: dict[str, Any]) -> dict[str, Any]:
        return {}

    def run(self, conn: psycopg.Connection, ctx: WorkerContext) -> list[SourceHit]:
        rows: list[dict[str, Any]] = []
        with conn.cursor(row_factory=dict_row) as cur:
            for text, params in self.statements_for(conn, ctx):
                rows.extend(cur.execute(text, params).fetchall())
        return self.hits(rows)

    def hits(self, rows: list[dict[str, Any]]) -> list[SourceHit]:
        best: dict[int, dict[str, Any]] = {}
        sign = 1.0 if self.higher_is_better else -1.0
        for row in rows:  # a memory lives in one shard only, but shards may overlap (fallback pools)
            prev = best.get(row["memory_id"])
            if prev is None or sign * self.score(row) > sign * self.score(prev):
                best[row["memory_id"]] = row
        ordered = sorted(best.values(), key=lambda r: (-sign * self.score(r), r["memory_id"]))
        return [
            SourceHit(memory_id=r["memory_id"], source=self.name, rank=i + 1, score=self.score(r),
                      memory_type=r.get("memory_type"), detail=self.detail(r))
            for i, r in enumerate(ordered)
        ]
