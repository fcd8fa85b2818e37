"""Reading memories and their history: get, list, history."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from ..core import validation
from ..core.types import HistoryEvent, Memory
from ..db import load_sql, vector_of
from ..errors import InputError, NotFound

MAX_PAGE = 1000


def status(valid_to: dt.datetime | None, superseded_by: int | None, now: dt.datetime) -> str:
    if valid_to is not None and valid_to <= now:
        return "invalidated"
    return "superseded" if superseded_by is not None else "active"


def as_memory(row: dict[str, Any], now: dt.datetime) -> Memory:
    return Memory(
        id=row["id"], tenant=row["tenant"], memory_type=row["memory_type"], content=row["content"],
        context=row["context"], metadata=row["metadata"], external_id=row["external_id"],
        importance=round(float(row["importance"]), 6), pinned=bool(row["pinned"]), created_at=row["created_at"],
        valid_from=row["valid_from"], valid_to=row["valid_to"],
        status=status(row["valid_to"], row["superseded_by"], now), superseded_by=row["superseded_by"],
    )  # fmt: skip


def fetch(
    conn: psycopg.Connection, memory_id: int | None = None, external_id: str | None = None, *, lock: bool = False
) -> Memory:
    """The memory of the transaction's tenant with that id (or external id); NotFound otherwise.
    `lock`: its row stays locked (FOR UPDATE) until the transaction ends."""
    query = load_sql("lifecycle/get") + ("\nFOR UPDATE OF m" if lock else "")
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query, {"id": memory_id, "external_id": external_id}).fetchall()
    what = f"memory {memory_id}" if memory_id is not None else f"memory with external_id {external_id!r}"
    if not rows:
        raise NotFound(f"{what} not found (for this tenant)")
    if len(rows) > 1:
        raise InputError(f"{what} is ambiguous: memories {[r['id'] for r in rows]} share it (one per memory type)")
    return as_memory(rows[0], dt.datetime.now(dt.UTC))


def page(
    conn: psycopg.Connection, *, memory_type: str | None, where: dict[str, Any] | None, after: int, limit: int
) -> list[Memory]:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InputError(f"limit must be an integer from 1 to {MAX_PAGE}, got {limit!r}")
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InputError(f"after must be a memory id (a non-negative integer), got {after!r}")
    params = {"memory_type": memory_type, "where": None if where is None else Jsonb(validation.metadata_filter(where)),
              "after": after, "limit": limit}  # fmt: skip
    now = dt.datetime.now(dt.UTC)
    with conn.cursor(row_factory=dict_row) as cur:
        return [as_memory(r, now) for r in cur.execute(load_sql("lifecycle/list"), params).fetchall()]


EXPORT_FETCH = 500  # rows a cursor fetch brings


def export(
    conn: psycopg.Connection, *, memory_type: str | None, where: dict[str, Any] | None, embeddings: bool
) -> Iterator[dict[str, Any]]:
    """The transaction's tenant's memories in id order as ingest records (JSON-ready: times in ISO
    8601), read through a server-side cursor: one snapshot, EXPORT_FETCH rows in memory at a time.
    `where` is checked already."""
    params = {"memory_type": memory_type, "where": None if where is None else Jsonb(where), "embeddings": embeddings}
    with conn.cursor("memoria_export", row_factory=dict_row) as cur:
        cur.itersize = EXPORT_FETCH
        cur.execute(load_sql("lifecycle/export"), params)
        for row in cur:
            yield export_record(row)


def export_record(row: dict[str, Any]) -> dict[str, Any]:
    """One exported row as an ingest record: what ingestion re-derives (entities, attributes, terms)
    is left out, and so are fields at their default."""
    out: dict[str, Any] = {
        "content": row["content"], "memory_type": row["memory_type"], "metadata": row["metadata"],
        "importance": round(float(row["importance"]), 6), "created_at": row["created_at"].isoformat(),
    }  # fmt: skip
    for name in ("context", "external_id"):
        if row[name] is not None:
            out[name] = row[name]
    for name in ("valid_from", "valid_to"):
        if row[name] is not None:
            out[name] = row[name].isoformat()
    if row["pinned"]:
        out["pinned"] = True
    if row["embedding"] is not None:
        out["embedding"] = vector_of(row["embedding"]).tolist()  # type: ignore[union-attr]
    return out


def history(conn: psycopg.Connection, memory_id: int) -> list[HistoryEvent]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(load_sql("lifecycle/history"), {"id": memory_id}).fetchall()
    if not rows:
        raise NotFound(f"memory {memory_id} has no history (for this tenant)")
    return [HistoryEvent(id=r["id"], memory_id=r["memory_id"], event=r["event"], at=r["at"], detail=r["detail"])
            for r in rows]  # fmt: skip


def record(conn: psycopg.Connection, memory_id: int, event: str, detail: dict[str, Any] | None = None) -> None:
    conn.execute(load_sql("lifecycle/record"), {"id": memory_id, "event": event, "detail": Jsonb(detail or {})})
