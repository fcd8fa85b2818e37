"""Ingestion: validated records -> embeddings in batches -> COPY into staging -> one transaction per batch."""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import datetime as dt
import json
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg

from .db import Database, schema_current, set_tenant
from .errors import InputError
from .resources import load_sql
from .embedding import embed_memories
from .text import content_hash, indexed_term_counts, normalize

FUTURE_TOLERANCE = dt.timedelta(days=1)
MAX_TENANT_CHARS = 200


@dataclass
class MemoryRecord:
    """One memory to store. Only `content` is required."""

    content: str
    memory_type: str | None = None
    tenant: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    importance: float = 0.5
    created_at: dt.datetime | None = None
    entities: list[str] | None = None  # None: extracted; a list: used as given
    attributes: list[tuple[str, str, str]] | None = None  # (subject, attribute, value)
    external_id: str | None = None
    embedding: Sequence[float] | np.ndarray | None = None
    pinned: bool = False
    # Text that situates the memory (the turns before it in a conversation, a document's title):
    # indexed with it - BM25 terms at a lower weight, and in the embedding - but not its content.
    context: str | None = None


@dataclass
class StoreResult:
    inserted: int = 0
    duplicates: int = 0
    ids: list[int | None] = field(default_factory=list)  # per record; the existing id is not looked up
    # rows staged: memories + their BM25 terms + entities + attributes (a memory's terms and entities
    # travel as arrays in its COPY row)
    copy_rows: int = 0


@dataclass
class _Prepared:
    record: MemoryRecord
    tenant: str
    memory_type: str
    dedup_key: str
    terms: dict[str, int]
    doc_len: int
    entities: list[str]
    attributes: list[tuple[str, str, str]]


_Key = tuple[str, str, str]


def _key(p: _Prepared) -> _Key:
    """What makes a memory a duplicate: tenant, memory type and dedup key (content hash or external id)."""
    return p.tenant, p.memory_type, p.dedup_key


def _clean_text(value: object, what: str, where: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise InputError(f"{where}: {what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InputError(f"{where}: {what} contains a NUL byte; remove it (PostgreSQL text cannot hold NUL)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{where}: {what} contains an invalid (surrogate) character; pass valid UTF-8 text") from None
    if not value.strip():
        raise InputError(f"{where}: {what} is empty")
    if len(value) > max_chars:
        hint = " (MEMORIA_MAX_CONTENT_CHARS); split it into several memories" if what == "content" else ""
        raise InputError(f"{where}: {what} has {len(value)} characters, over the limit of {max_chars}{hint}")
    return value


def coerce_record(raw: MemoryRecord | Mapping[str, Any], where: str) -> MemoryRecord:
    """A MemoryRecord from a record or a mapping (JSONL/CSV row), with types checked."""
    if isinstance(raw, MemoryRecord):
        return raw
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: expected an object with at least 'content', got {type(raw).__name__}")
    known = set(MemoryRecord.__dataclass_fields__)
    unknown = set(raw) - known
    if unknown:
        raise InputError(f"{where}: unknown fields {sorted(unknown)}; allowed: {sorted(known)}")
    if "content" not in raw:
        raise InputError(f"{where}: missing required field 'content'")
    values = dict(raw)
    if values.get("importance") in (None, ""):
        values.pop("importance", None)
    if values.get("created_at") in (None, ""):
        values.pop("created_at", None)
    if values.get("pinned") is None:
        values.pop("pinned", None)
    return MemoryRecord(**values)


def _importance(value: object, where: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{where}: importance must be a number between 0 and 1, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InputError(f"{where}: importance must be a number between 0 and 1, got {value!r}")
    return number


def _created_at(value: object, where: str, now: dt.datetime) -> dt.datetime:
    if value is None:
        return now
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"{where}: created_at {value!r} is not an ISO 8601 date-time") from None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if not isinstance(value, dt.datetime):
        raise InputError(f"{where}: created_at must be an ISO 8601 string or datetime")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)  # naive times are taken as UTC (documented)
    if value > now + FUTURE_TOLERANCE:
        raise InputError(f"{where}: created_at {value.isoformat()} is in the future")
    return value


class Ingestor:
    """Writes batches of memories; every batch is all-or-nothing."""

    def __init__(self, db: Database, *, embedder, memory_types: Sequence[str], default_type: str,
                 default_tenant: str, dim: int, max_chars: int, k1: float, b: float,
                 entity_extractor=None, graph_writer=None) -> None:
        self.db = db
        self.embedder = embedder
        self.memory_types = tuple(memory_types)
        self.default_type = default_type
        self.default_tenant = default_tenant
        self.dim = dim
        self.max_chars = max_chars
        self.k1, self.b = k1, b
        self.entity_extractor = entity_extractor
        self.graph_writer = graph_writer
        # see _pipeline; False runs each statement on its own (profiling, or a libpq before 14)
        self.pipeline = psycopg.Pipeline.is_supported()

    def prepare(self, raw: MemoryRecord | Mapping[str, Any], where: str, now: dt.datetime) -> _Prepared:
        from .entities import RuleBasedExtractor, extract_attributes

        record = coerce_record(raw, where)
        content = _clean_text(record.content, "content", where, self.max_chars)
        tenant = record.tenant if record.tenant not in (None, "") else self.default_tenant
        tenant = _clean_text(tenant, "tenant", where, MAX_TENANT_CHARS)
        memory_type = record.memory_type or self.default_type
        if memory_type not in self.memory_types:
            raise InputError(f"{where}: unknown memory_type {memory_type!r}; known types: "
                             f"{list(self.memory_types)} (add one with `memoria-pg types add NAME`)")
        metadata = record.metadata if record.metadata is not None else {}
        if not isinstance(metadata, dict):
            raise InputError(f"{where}: metadata must be a JSON object")
        try:
            json.dumps(metadata, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{where}: metadata is not JSON-serializable: {exc}") from None
        if _has_nul(metadata):
            raise InputError(f"{where}: metadata contains a NUL byte; remove it (PostgreSQL jsonb cannot hold \\u0000)")
        if _has_surrogate(metadata):
            raise InputError(f"{where}: metadata contains an invalid (surrogate) character; pass valid UTF-8 text")
        record.importance = _importance(record.importance, where)
        if not isinstance(record.pinned, bool) and record.pinned not in (0, 1):
            raise InputError(f"{where}: pinned must be true or false, got {record.pinned!r}")
        record.created_at = _created_at(record.created_at, where, now)
        record.content, record.tenant, record.memory_type = content, tenant, memory_type
        if record.external_id is not None:
            record.external_id = _clean_text(str(record.external_id), "external_id", where, 500)
        if record.embedding is not None:
            vector = as_vector(record.embedding, f"{where}: embedding")
            if vector.shape != (self.dim,):
                raise InputError(f"{where}: embedding has shape {vector.shape}, expected ({self.dim},)")
            if not np.all(np.isfinite(vector)) or not np.any(vector):
                raise InputError(f"{where}: embedding must be finite and non-zero")
            record.embedding = vector
        if isinstance(record.context, str) and not record.context.strip():
            record.context = None  # only whitespace: no context
        if record.context is not None:
            record.context = _clean_text(record.context, "context", where, self.max_chars)
        terms, doc_len = indexed_term_counts(content, record.context)
        if record.entities is None:
            speaker = metadata.get("speaker") if isinstance(metadata.get("speaker"), str) else None
            entities = (self.entity_extractor or RuleBasedExtractor()).extract(content, ())
            if speaker:
                entities = [speaker, *entities]
        else:
            if isinstance(record.entities, (str, bytes)) or not isinstance(record.entities, Iterable):
                raise InputError(f"{where}: entities must be a list of names")
            entities = [_clean_text(e, "entity", where, 200) for e in record.entities]
        if record.attributes is None:
            speaker = metadata.get("speaker") if isinstance(metadata.get("speaker"), str) else None
            attributes = list(extract_attributes(content, speaker=speaker))
        else:
            attributes = []
            for item in record.attributes:
                if isinstance(item, Mapping):
                    item = (item.get("subject"), item.get("attribute"), item.get("value"))
                if not isinstance(item, (list, tuple)) or len(item) != 3:
                    raise InputError(f"{where}: attributes must be [subject, attribute, value] triples")
                attributes.append(tuple(_clean_text(v, "attribute field", where, 500) for v in item))
        key = f"ext:{record.external_id}" if record.external_id else f"sha256:{content_hash(content)}"
        return _Prepared(record, tenant, memory_type, key, dict(terms), doc_len,
                         _dedupe_names(entities), attributes)

    def prepare_batch(self, batch: Sequence[MemoryRecord | Mapping[str, Any]],
                      wheres: Sequence[str] | None = None) -> list[_Prepared]:
        """Validate and embed one batch (no database access); InputError names the bad record."""
        now = dt.datetime.now(dt.timezone.utc)
        wheres = wheres or [f"record {i + 1}" for i in range(len(batch))]
        prepared = [self.prepare(raw, where, now) for raw, where in zip(batch, wheres)]
        self._embed_missing(prepared)
        return prepared

    def store_batch(self, batch: Sequence[MemoryRecord | Mapping[str, Any]],
                    wheres: Sequence[str] | None = None) -> StoreResult:
        """Validate, embed and write one batch in one transaction; an invalid record writes nothing."""
        return self._write(self.prepare_batch(batch, wheres))

    def store_batches(self, batches: Iterable[tuple[Sequence[MemoryRecord | Mapping[str, Any]], Sequence[str]]],
                      *, writers: int = 1, progress: Callable[[int], None] | None = None,
                      return_ids: bool = True) -> StoreResult:
        """Write a stream of (batch, wheres) pairs, each batch in its own transaction.

        Batches are prepared (validated, tokenized, embedded) in this thread while up to `writers`
        earlier batches are written, each on its own pooled connection: at most `writers` prepared
        batches wait in memory, whatever the stream's length. Results and `progress` follow the
        stream's order. A memory whose key a batch still being written also inserts is written after
        the rest of its batch (see _write_batch). On an error (a bad record, a failed write) no further
        batch is started, the batches already being written finish (each commits or rolls back whole)
        and the first error in stream order is raised; with writers > 1 a batch after a failed one may
        have committed.
        """
        writers = max(1, int(writers))
        total = StoreResult()
        # (write, batch size, the batch's keys) of the batches being written
        pending: collections.deque[tuple[concurrent.futures.Future[StoreResult], int, set[_Key]]] = \
            collections.deque()

        def collect(future: concurrent.futures.Future[StoreResult], size: int) -> None:
            result = future.result()
            total.inserted += result.inserted
            total.duplicates += result.duplicates
            total.copy_rows += result.copy_rows
            if return_ids:  # a list entry per record: the one thing here that grows with the stream
                total.ids.extend(result.ids)
            if progress:
                progress(size)

        with concurrent.futures.ThreadPoolExecutor(writers, thread_name_prefix="memoria-ingest") as pool:
            try:
                for batch, wheres in batches:
                    prepared = self.prepare_batch(batch, wheres)
                    while len(pending) >= writers:
                        collect(*pending.popleft()[:2])
                    # A memory whose key a batch still being written also inserts would wait at its
                    # INSERT for that whole transaction to end: it goes in last (see _write_batch).
                    in_flight = set().union(*(keys for future, _, keys in pending if not future.done()))
                    late = {i for i, p in enumerate(prepared) if _key(p) in in_flight}
                    pending.append((pool.submit(self._write, prepared, late), len(batch),
                                    {_key(p) for p in prepared}))
                while pending:
                    collect(*pending.popleft()[:2])
            except BaseException:
                # Let the batches in flight end; an earlier batch's failure is the error to report.
                while pending:
                    future, size, _ = pending.popleft()
                    try:
                        collect(future, size)
                    except BaseException as earlier:
                        for later, _, _ in pending:
                            concurrent.futures.wait([later])
                        pending.clear()
                        raise earlier from None
                raise
        return total

    def _embed_missing(self, prepared: list[_Prepared]) -> None:
        missing = [p for p in prepared if p.record.embedding is None]
        if not missing:
            return
        # The embedder is resolved only now, after the whole batch validated: a batch bound to fail
        # never pays for loading the model.
        embedder = self.embedder() if callable(self.embedder) and not hasattr(self.embedder, "embed") else self.embedder
        if embedder is None:
            raise InputError("records without embeddings need an embedder; supply vectors or configure a model")
        vectors = embed_memories(embedder, [p.record.content for p in missing],
                                 [p.record.context for p in missing])
        for p, vector in zip(missing, vectors):
            p.record.embedding = vector

    def _pipeline(self, conn: psycopg.Connection, enabled: bool = True):
        """Pipeline mode for a run of statements: sent together, the results read at the end. A batch
        runs ~8 statements per tenant; one round trip each would leave the server idle while this
        process (other threads holding the GIL) reads each result and sends the next statement.
        Errors are raised at the end of the block, as the same exceptions."""
        return conn.pipeline() if enabled and self.pipeline else contextlib.nullcontext()

    def _write(self, prepared: list[_Prepared], late: Collection[int] = ()) -> StoreResult:
        # A schema older than this library (e.g. no memories.context before 0006) raises SchemaError;
        # the batch's transaction rolled back, so nothing was written.
        with schema_current():
            try:
                return self._write_batch(prepared, late)
            except psycopg.errors.DeadlockDetected:
                if not late:
                    raise
                # Late memories lock their keys out of key order: a cycle with another writer is
                # possible (PostgreSQL detects it and rolled this batch back). Once more, in key order.
                return self._write_batch(prepared)

    def _write_batch(self, prepared: list[_Prepared], late: Collection[int] = ()) -> StoreResult:
        """Write one batch in one transaction. The memories at the positions in `late` are inserted
        after the others: a concurrent batch that inserts the same key holds it until it commits,
        and the rest of this batch's work need not wait for that (what is inserted is the same)."""
        result = StoreResult(ids=[None] * len(prepared))
        by_tenant: dict[str, list[int]] = {}
        seen: set[_Key] = set()
        for i, p in enumerate(prepared):
            key = _key(p)
            if key in seen:  # a duplicate inside the batch itself
                result.duplicates += 1
                continue
            seen.add(key)
            by_tenant.setdefault(p.tenant, []).append(i)
        # Tenants in one order for every batch, and within a tenant each statement takes its row locks
        # in key order; so two writers whose batches share tenants (store_many's parallel writers, or
        # two processes) always lock in the same global order and never deadlock. The late memories
        # are the exception (_write retries a deadlock of theirs in key order).
        tenants = sorted(by_tenant)
        staged = {i for rows in by_tenant.values() for i in rows}
        late_tenants = sorted({prepared[i].tenant for i in late if i in staged})
        with self.db.connection() as conn, conn.transaction():
            conn.execute(load_sql("ingest/stage"))  # several statements, no parameters: one round trip
            # One COPY per table for the whole batch; every statement below reads its tenant's rows.
            result.copy_rows += self._copy(conn, prepared, [i for t in tenants for i in by_tenant[t]], late)
            # 1. Rows only this batch writes: memories (and their index entries: the bulk of the work),
            #    postings, attributes. They lock nothing another batch needs, except the dedup key of
            #    a memory both batches insert (the second waits for the first to finish): so the late
            #    memories, whose keys a batch in flight inserts, go in after all the others.
            with self._pipeline(conn):
                for tenant in tenants:
                    set_tenant(conn, tenant)
                    conn.execute(load_sql("ingest/insert_memories"), {"late": False})
                for tenant in late_tenants:
                    set_tenant(conn, tenant)
                    conn.execute(load_sql("ingest/insert_memories"), {"late": True})
                for tenant in tenants:
                    set_tenant(conn, tenant)
                    conn.execute(load_sql("ingest/insert_terms"), {"k1": self.k1, "b": self.b})
                    conn.execute(load_sql("ingest/insert_attributes"))
            # 2. Shared rows every batch of a tenant updates (shard statistics, document frequencies,
            #    entities and edges, the graph mirror), last: they stay locked only from here to COMMIT,
            #    so a concurrent writer's step 1 is never blocked by them.
            with self._pipeline(conn, self.graph_writer is None):
                for tenant in tenants:
                    with self._pipeline(conn, self.graph_writer is not None):
                        set_tenant(conn, tenant)
                        conn.execute(load_sql("ingest/update_docs"))
                        conn.execute(load_sql("ingest/update_df"))
                        conn.execute(load_sql("ingest/insert_entities"))
                    if self.graph_writer is not None:
                        self.graph_writer(conn, tenant)
            ids = dict(conn.execute("SELECT row_no, memory_id FROM stage_memories").fetchall())
        for rows in by_tenant.values():
            for row in rows:
                result.ids[row] = ids.get(row)
                if ids.get(row) is None:
                    result.duplicates += 1
                else:
                    result.inserted += 1
        return result

    def _copy(self, conn: psycopg.Connection, prepared: list[_Prepared], rows: list[int],
              late: Collection[int] = ()) -> int:
        """COPY the batch into the stage: one row per memory (its terms and entities as arrays), one
        per attribute; returns the number of rows staged (StoreResult.copy_rows)."""
        count = 0
        with conn.cursor() as cur:
            with cur.copy("COPY stage_memories (row_no, tenant, memory_type, external_id, dedup_key, "
                          "content, context, metadata, importance, pinned, created_at, embedding, doc_len, "
                          "terms, tfs, entity_names, entity_norms, late) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "text", "text", "text", "text", "text", "text", "jsonb", "float4",
                                "bool", "timestamptz", "vector", "int4", "text[]", "int4[]", "text[]", "text[]",
                                "bool"])
                for i in rows:
                    p, r = prepared[i], prepared[i].record
                    copy.write_row((i, p.tenant, p.memory_type, r.external_id, p.dedup_key, r.content, r.context,
                                    psycopg.types.json.Jsonb(r.metadata), r.importance, bool(r.pinned),
                                    r.created_at, r.embedding, p.doc_len, list(p.terms), list(p.terms.values()),
                                    p.entities, [normalize_entity(name) for name in p.entities], i in late))
                    count += 1 + len(p.terms) + len(p.entities)
            if any(prepared[i].attributes for i in rows):
                with cur.copy("COPY stage_attributes (row_no, subject, attribute, value) "
                              "FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["int4", "text", "text", "text"])
                    for i in rows:
                        for subject, attribute, value in prepared[i].attributes:
                            copy.write_row((i, subject, attribute.lower(), value))
                            count += 1
        return count


def as_vector(value: object, what: str) -> np.ndarray:
    """A float32 array from a sequence of numbers; InputError for anything else."""
    try:
        return np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a list of numbers") from None


def _any_string(value: object, test: Callable[[str], bool]) -> bool:
    """Whether `test` holds for any string in a JSON-like value (keys included)."""
    if isinstance(value, str):
        return test(value)
    if isinstance(value, dict):
        return any(_any_string(k, test) or _any_string(v, test) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_any_string(v, test) for v in value)
    return False


def _has_surrogate(value: object) -> bool:
    return _any_string(value, lambda s: not s.isascii() and any("\ud800" <= ch <= "\udfff" for ch in s))


def _has_nul(value: object) -> bool:
    return _any_string(value, lambda s: "\x00" in s)


def normalize_entity(name: str) -> str:
    return " ".join(normalize(name).casefold().replace("\u2019", "'").split())


def _dedupe_names(names: Iterable[str]) -> list[str]:
    seen: dict[str, str] = {}
    for name in names:
        clean = normalize(name)
        if clean and normalize_entity(clean) not in seen:
            seen[normalize_entity(clean)] = clean
    return list(seen.values())


def batched(items: Iterable[Any], size: int) -> Iterable[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


ProgressCallback = Callable[[int], None]
