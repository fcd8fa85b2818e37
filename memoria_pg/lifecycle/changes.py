"""Changing memories: update (re-derive what the text determines), invalidate, restore."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from ..core import validation
from ..core.embedding import Embedder, embed_memories
from ..core.types import Memory, MemoryRecord
from ..db import load_sql, scalar, vector_of
from ..errors import InputError, NotFound
from ..ingest import Ingestor, Prepared
from . import reads, removal

# Fields whose change re-derives postings, entities and attributes (the speaker in metadata resolves
# "I" and is an entity); importance and pinned change the row only.
DERIVING = ("content", "context", "metadata", "memory_type")
CHANGEABLE = (*DERIVING, "importance", "pinned")
MISSING: Any = object()


@dataclass
class Change:
    """The fields an update gives (MISSING: keep), and a supplied vector."""

    fields: dict[str, Any] = field(default_factory=dict)
    embedding: Sequence[float] | np.ndarray | None = None

    def changed(self, memory: Memory) -> dict[str, Any]:
        """The given fields whose value differs from the memory's."""
        return {k: v for k, v in self.fields.items() if v is not MISSING and getattr(memory, k) != v}


def update(conn: psycopg.Connection, memory_id: int, change: Change, ingestor: Ingestor, embedder: Embedder) -> None:
    """Apply `change` to the memory in the caller's transaction (tenant set): the row, its derived
    rows when the text changes, and a history entry with the previous values."""
    memory = reads.fetch(conn, memory_id, lock=True)
    changed = change.changed(memory)
    if not changed and change.embedding is None:
        return
    previous = {k: getattr(memory, k) for k in changed}
    detail = {"changed": sorted(changed), "previous": previous, "embedding_supplied": change.embedding is not None}
    if set(changed) & set(DERIVING) or change.embedding is not None:
        prepared = _prepared(conn, memory, change, ingestor, embedder)
        _rewrite(conn, memory_id, prepared, ingestor, detail)
        return
    conn.execute(
        "UPDATE memoria.memories SET importance = %s, pinned = %s WHERE tenant = current_setting('memoria.tenant') "
        "AND id = %s",
        (changed.get("importance", memory.importance), changed.get("pinned", memory.pinned), memory_id),
    )
    reads.record(conn, memory_id, "updated", detail)


def _prepared(conn: psycopg.Connection, memory: Memory, change: Change, ingestor: Ingestor,
              embedder: Embedder) -> Prepared:  # fmt: skip
    """The memory's new version, validated and tokenized as ingestion does, with its vector: the one
    supplied, the old one when neither content nor context changed, else a new embedding."""
    values = {k: getattr(memory, k) for k in CHANGEABLE} | change.changed(memory)
    record = MemoryRecord(
        content=values["content"], context=values["context"], metadata=values["metadata"],
        importance=values["importance"], pinned=values["pinned"], memory_type=values["memory_type"],
        tenant=memory.tenant, external_id=memory.external_id, created_at=memory.created_at,
        valid_from=memory.valid_from, embedding=change.embedding,
    )  # fmt: skip
    prepared = ingestor.prepare(record, f"memory {memory.id}", dt.datetime.now(dt.UTC))
    if prepared.record.embedding is None:
        if values["content"] == memory.content and values["context"] == memory.context:
            prepared.record.embedding = _stored_vector(conn, memory.id)
        else:
            prepared.record.embedding = embed_memories(embedder, [record.content], [record.context])[0]
    return prepared


def _stored_vector(conn: psycopg.Connection, memory_id: int) -> np.ndarray | None:
    return vector_of(scalar(conn, "SELECT embedding FROM memoria.memories WHERE id = %s", (memory_id,)))


def _rewrite(
    conn: psycopg.Connection, memory_id: int, prepared: Prepared, ingestor: Ingestor, detail: dict[str, Any]
) -> None:
    """Take the old version's derived rows out, write the new row and its history entry, derive the new
    version's rows: three round trips (a pipeline, the stage's COPY, a pipeline), whatever the memory."""
    r = prepared.record
    params: Mapping[str, Any] = {
        "id": memory_id, "content": r.content, "context": r.context, "metadata": Jsonb(r.metadata),
        "importance": r.importance, "pinned": bool(r.pinned), "memory_type": prepared.memory_type,
        "dedup_key": prepared.dedup_key, "embedding": r.embedding, "doc_len": prepared.doc_len,
    }  # fmt: skip
    try:
        with ingestor.pipelined(conn):
            removed = removal.remove_derived_cursor(conn, [memory_id], ingestor.single_valued, forget_usage=False)
            conn.execute(load_sql("lifecycle/rewrite"), params)
            reads.record(conn, memory_id, "updated", detail)
            ingestor.stage(conn)
    except psycopg.errors.UniqueViolation:  # the whole transaction rolls back: nothing was changed
        raise InputError(
            f"memory {memory_id}: another memory of type {prepared.memory_type!r} already has this content "
            "(or external_id); update or delete that one instead"
        ) from None
    if ingestor.graph_writer is not None:
        conn.execute("SELECT memoria.graph_forget(%s, %s)", ([memory_id], removal.entity_ids(removed)))
    ingestor.rederive(conn, [prepared], [memory_id])


def set_validity(
    conn: psycopg.Connection, memory_id: int, valid_to: dt.datetime | None, *, keep_end: bool = False
) -> None:
    """Invalidate from `valid_to`, or restore (None). An end before the memory began to hold is an
    InputError. Changing nothing records nothing: restoring a memory that holds, setting the end it
    has, or (`keep_end`: an invalidation from now, without an explicit time) invalidating one that has
    ended by then; one that ends later (an expiry) ends now."""
    row = conn.execute(
        "SELECT valid_to, coalesce(valid_from, created_at) FROM memoria.memories "
        "WHERE tenant = current_setting('memoria.tenant') AND id = %s FOR UPDATE",
        (memory_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"memory {memory_id} not found (for this tenant)")
    current_end, start = row
    if valid_to is not None and valid_to < start:
        raise InputError(
            f"at {valid_to.isoformat()} is before memory {memory_id} began to hold ({start.isoformat()}): "
            "a memory cannot stop holding before it starts"
        )
    if valid_to == current_end or (keep_end and current_end is not None and valid_to is not None
                                    and current_end <= valid_to):  # fmt: skip
        return
    conn.execute(load_sql("lifecycle/set_validity"), {"id": memory_id, "valid_to": valid_to})
    event = "invalidated" if valid_to is not None else "restored"
    detail = {"valid_to": valid_to.isoformat() if valid_to else None}
    if valid_to is not None and current_end is not None:  # the end moved
        detail["previous_valid_to"] = current_end.isoformat()
    reads.record(conn, memory_id, event, detail)


def change_of(fields: Mapping[str, Any], known_types: Collection[str]) -> dict[str, Any]:
    """The update's fields, checked (InputError for an unknown memory type or a bad value)."""
    out = dict(fields)
    if out.get("memory_type", MISSING) is not MISSING:
        validation.memory_type(out["memory_type"], known_types)
    if out.get("importance", MISSING) is not MISSING:
        out["importance"] = validation.importance(out["importance"], "update")
    if out.get("pinned", MISSING) is not MISSING:
        out["pinned"] = validation.pinned(out["pinned"], "update")
    if out.get("metadata", MISSING) is not MISSING:
        out["metadata"] = validation.metadata(out["metadata"], "update")
    return out
