"""The lifecycle wing: memories read, corrected, invalidated, deleted, forgotten and erased, each
operation one transaction that keeps every derived statistic exact (migration 0010's functions)."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import psycopg

from ..core import validation
from ..core.embedding import Embedder
from ..core.types import ForgetResult, HistoryEvent, Memory
from ..db import Database, schema_current
from ..errors import InputError
from ..ingest import Ingestor
from . import changes, reads, removal
from .changes import MISSING, Change


class Lifecycle:
    """What MemorySystem's get/update/delete/forget/erase_tenant/history/invalidate call."""

    def __init__(self, db: Database, ingestor: Ingestor, embedder: Embedder, *, graph: bool) -> None:
        self.db = db
        self.ingestor = ingestor
        self.embedder = embedder
        self.graph = graph

    def get(self, memory_id: int | None, external_id: str | None, tenant: str) -> Memory:
        if (memory_id is None) == (external_id is None):
            raise InputError("give either a memory id or external_id=")
        if memory_id is not None:
            validation.memory_id(memory_id)
        with self.db.transaction(validation.tenant(tenant), implicit=True) as conn, schema_current():
            return reads.fetch(conn, memory_id, None if external_id is None else str(external_id))

    def page(self, tenant: str, *, memory_type: str | None, where: dict[str, Any] | None, after: int,
             limit: int) -> list[Memory]:  # fmt: skip
        if memory_type is not None:  # an unknown type is an error here as in query and forget, not an empty page
            validation.memory_type(memory_type, self.ingestor.memory_types)
        with self.db.transaction(validation.tenant(tenant), implicit=True) as conn, schema_current():
            return reads.page(conn, memory_type=memory_type, where=where, after=after, limit=limit)

    def export(
        self, tenant: str, *, memory_type: str | None, where: dict[str, Any] | None, embeddings: bool
    ) -> Iterator[dict[str, Any]]:
        """The arguments are checked now, the memories read as the iterator is."""
        validation.tenant(tenant)
        validation.memory_type(memory_type, self.ingestor.memory_types)
        checked = None if where is None else validation.metadata_filter(where)
        if not isinstance(embeddings, bool):
            raise InputError(f"embeddings must be true or false, got {validation.shown(embeddings)}")

        def records() -> Iterator[dict[str, Any]]:
            with self.db.transaction(tenant) as conn, schema_current():
                yield from reads.export(conn, memory_type=memory_type, where=checked, embeddings=embeddings)

        return records()

    def update(self, memory_id: int, tenant: str, fields: Mapping[str, Any],
               embedding: Sequence[float] | np.ndarray | None) -> Memory:  # fmt: skip
        validation.memory_id(memory_id)
        change = Change(changes.change_of(fields, self.ingestor.memory_types), embedding)
        with self._writing(tenant) as conn:
            changes.update(conn, memory_id, change, self.ingestor, self.embedder)
            return reads.fetch(conn, memory_id)

    def set_validity(
        self, memory_id: int, tenant: str, valid_to: dt.datetime | None, *, keep_end: bool = False
    ) -> Memory:
        validation.memory_id(memory_id)
        with self._writing(tenant) as conn:
            changes.set_validity(conn, memory_id, valid_to, keep_end=keep_end)
            return reads.fetch(conn, memory_id)

    def delete(self, memory_ids: int | Iterable[int], tenant: str) -> int:
        ids = [memory_ids] if isinstance(memory_ids, int) else list(memory_ids)
        ids = sorted({validation.memory_id(i) for i in ids})
        with self._writing(tenant) as conn:
            return removal.delete(conn, ids, graph=self.graph, single_valued=self.ingestor.single_valued)

    def forget(self, tenant: str, *, memory_type: str | None, before: Any, where: dict[str, Any] | None,
               dry_run: bool) -> ForgetResult:  # fmt: skip
        if memory_type is None and before is None and where is None:
            raise InputError("forget needs a filter (memory_type, before or where); "
                                        "to remove every memory of a tenant use erase_tenant")  # fmt: skip
        validation.memory_type(memory_type, self.ingestor.memory_types)
        with self._writing(tenant, lock=None if dry_run else "exclusive") as conn:
            ids = removal.matching(conn, memory_type=memory_type, before=before, where=where)
            deleted = (
                0 if dry_run else removal.delete(conn, ids, graph=self.graph, single_valued=self.ingestor.single_valued)
            )
        return ForgetResult(matched=len(ids), deleted=deleted, ids=ids)

    def erase(self, tenant: str) -> dict[str, int]:
        with self._writing(tenant) as conn:
            return removal.erase(conn, graph=self.graph)

    @contextlib.contextmanager
    def _writing(self, tenant: str, lock: str | None = "exclusive") -> Iterator[psycopg.Connection]:
        """The transaction of a lifecycle write: the tenant's write lock held exclusively (set_tenant
        says why), a missing table or column a SchemaError."""
        with self.db.transaction(validation.tenant(tenant), tenant_lock=lock) as conn, schema_current():
            yield conn

    def history(self, memory_id: int, tenant: str) -> list[HistoryEvent]:
        validation.memory_id(memory_id)
        with self.db.transaction(validation.tenant(tenant), implicit=True) as conn, schema_current():
            return reads.history(conn, memory_id)


__all__ = ["MISSING", "Lifecycle"]
