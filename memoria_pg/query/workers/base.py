"""What every retrieval source declares, and what every worker shares: its context, its statements,
and turning rows into SourceHits."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import psycopg
from psycopg.rows import dict_row

from ...config import Config
from ...core.types import ProcessedQuery, Route, Shard, SourceHit
from ...db import load_sql

Statement = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class FusionWeights:
    """A source's weight in the fused retrieval score, per fusion method (Config.fusion_method)."""

    score: float  # weighted sum of min-max normalized scores
    rrf: float  # weighted reciprocal-rank fusion


class Source:
    """A retrieval source as the final CTE sees it (sql/final_candidates.sql).

    `weights`: how much the source counts in the fused retrieval score, per fusion method ("score":
    min-max normalized scores, "rrf": reciprocal ranks); 0 for auxiliary sources, which add
    candidates and feed ranking signals but do not vote. `lower_is_better`: the direction of
    `fused_score` (a distance, a hop count). `score_name`: the key of its score on a candidate.
    """

    name: ClassVar[str]
    score_name: ClassVar[str]
    lower_is_better: ClassVar[bool] = False
    weights: ClassVar[FusionWeights]

    @classmethod
    def fused_score(cls, hit: SourceHit) -> float:
        """The value of a hit the final CTE normalizes and keeps as the candidate's score."""
        return float(hit.score)


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
    as_of: dt.datetime | None = None  # the query time facts are valid at (None: now)
    # Whether the statements about to start have cores to themselves: the vector search of a query the
    # library embedded, started once the embedding is done, with no other query of the process in
    # flight (QueryPipeline.finish_overlapped). VectorWorker.parts then splits a smaller search.
    spare_cores: bool = False

    @property
    def shard_types(self) -> list[str] | None:
        types = [s.memory_type for s in self.shards if s.memory_type is not None]
        return types or None


class Worker(Source):
    """One retrieval source run by the scheduler: an SQL file whose parameters are bound per shard.

    `ready` is the spec's precondition: a worker is submitted only when it can return something.
    Hits are ordered by `score(row)`, best first (lowest first when `lower_is_better`).
    """

    sql_name: ClassVar[str]
    # Whether the worker's statements may run on their cached generic plans (psycopg prepares a
    # statement after 5 executions on a connection). The pool forces custom plans otherwise; for
    # bm25, phrase, graph and attribute planning a statement each time costs more than it gains, and
    # the vector worker decides per query (plans_generic: its exact form only). docs/measurements.md,
    # "Why these defaults".
    generic_plans: ClassVar[bool] = False
    # Whether the worker's SQL file has the shard filter SHARD_FILTER, written for each statement's
    # shard (shard_sql) instead of for any: a cached generic plan then prunes by it.
    shard_filtered: ClassVar[bool] = False
    # Whether the worker reads ctx.embedding. One that does not may start before the query is embedded
    # (Config.overlap_embedding); a worker that does not declare it is taken to need it.
    uses_embedding: ClassVar[bool] = True

    def plans_generic(self, ctx: WorkerContext) -> bool:
        """Whether this query's statements of the worker run on generic plans (the scheduler sets it)."""
        return self.generic_plans

    @classmethod
    def ready(cls, query: ProcessedQuery, route: Route, config: Config) -> bool:
        return True

    def sql(self, ctx: WorkerContext) -> str:
        return load_sql(self.sql_name)

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        raise NotImplementedError

    def statements(self, ctx: WorkerContext) -> list[Statement]:
        if self.shard_filtered:
            return [(shard_sql(self.sql_name, shard), self.params(ctx, shard)) for shard in ctx.shards]
        return [(self.sql(ctx), self.params(ctx, shard)) for shard in ctx.shards]

    def statements_for(self, conn: psycopg.Connection, ctx: WorkerContext) -> list[Statement]:
        """The statements `run` executes in `conn`'s transaction (a worker may look at the data first)."""
        return self.statements(ctx)

    def score(self, row: dict[str, Any]) -> float:
        return float(row["score"])

    def detail(self, row: dict[str, Any]) -> dict[str, Any]:
        return {}

    def run(self, conn: psycopg.Connection, ctx: WorkerContext) -> list[SourceHit]:
        """The statements' hits. Each statement is prepared on the connection at its first run, not at
        psycopg's fifth (prepare_threshold): a worker few queries submit (phrase, attribute) was parsed
        and planned again on each pooled connection, and its generic plan was never used."""
        rows: list[dict[str, Any]] = []
        with conn.cursor(row_factory=dict_row) as cur:
            for text, params in self.statements_for(conn, ctx):
                rows.extend(cur.execute(text, params, prepare=True).fetchall())
        return self.hits(rows)

    def parts(self, ctx: WorkerContext) -> list[tuple[Statement, bool]] | None:
        """The worker's search split into statements that run at the same time, each on its own
        connection (scheduler.Parts), with whether each runs on generic plans; None: not split."""
        return None

    def run_part(self, conn: psycopg.Connection, statement: Statement) -> list[SourceHit]:
        """One of `parts`: its statement's hits."""
        with conn.cursor(row_factory=dict_row) as cur:
            return self.hits(cur.execute(*statement, prepare=True).fetchall())

    def merge(self, parts: list[list[SourceHit]], limit: int) -> list[SourceHit]:
        """The parts' hits as one list: the best `limit` of them in the worker's order (`hits`: best
        score first, then memory id; a NaN score last, as PostgreSQL sorts it), ranked again."""
        sign = -1.0 if self.lower_is_better else 1.0
        best: dict[int, SourceHit] = {}
        for h in (h for hits in parts for h in hits):
            prev = best.get(h.memory_id)
            if prev is None or sign * h.score > sign * prev.score:
                best[h.memory_id] = h

        def order(h: SourceHit) -> tuple[bool, float, int]:
            return (True, 0.0, h.memory_id) if math.isnan(h.score) else (False, -sign * h.score, h.memory_id)

        ordered = sorted(best.values(), key=order)
        return [dataclasses.replace(h, rank=rank) for rank, h in enumerate(ordered[:limit], 1)]

    def hits(self, rows: list[dict[str, Any]]) -> list[SourceHit]:
        best: dict[int, tuple[float, dict[str, Any]]] = {}
        sign = -1.0 if self.lower_is_better else 1.0
        for row in rows:  # a memory lives in one shard only, but shards may overlap (fallback pools)
            score = self.score(row)  # once per row: scores are read three times below
            prev = best.get(row["memory_id"])
            if prev is None or sign * score > sign * prev[0]:
                best[row["memory_id"]] = (score, row)
        ordered = sorted(best.values(), key=lambda pair: (-sign * pair[0], pair[1]["memory_id"]))
        name, detail = self.name, self.detail
        # Positional arguments: a hundred hits per statement, and keywords cost twice as much to bind.
        # SourceHit(memory_id, source, rank, score, memory_type, detail)
        return [
            SourceHit(r["memory_id"], name, rank, score, r.get("memory_type"), detail(r))
            for rank, (score, r) in enumerate(ordered, 1)
        ]


# The shard filter as the workers' SQL files write it for any shard:
#     (%(memory_type)s::text IS NULL OR <alias>.memory_type = %(memory_type)s::text)
# On a cached generic plan it prunes no partition (an OR with "IS NULL": every partition's index is
# read, and for a typed shard the rows of the other types are read and dropped). shard_sql writes it for
# the statement's shard instead, wherever it occurs: a typed shard keeps the equality, which a generic
# plan prunes by at executor start-up (and a custom plan at planning); the whole table needs no filter.
SHARD_FILTER = re.compile(r"\(%\(memory_type\)s::text IS NULL OR (\w+)\.memory_type = %\(memory_type\)s::text\)")


@functools.cache
def _shard_sql(name: str, typed: bool) -> str:
    text = load_sql(name)
    if not SHARD_FILTER.search(text):
        raise RuntimeError(f"sql/{name}.sql lost its shard filter ({SHARD_FILTER.pattern})")
    return SHARD_FILTER.sub(r"\1.memory_type = %(memory_type)s::text" if typed else "TRUE", text)


def shard_sql(name: str, shard: Shard) -> str:
    """sql/<name>.sql with its shard filter (SHARD_FILTER) written for `shard`."""
    return _shard_sql(name, shard.memory_type is not None)
