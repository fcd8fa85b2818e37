"""Ingestion: validated records -> embeddings in batches -> COPY into staging -> one transaction per batch."""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import datetime as dt
import itertools
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from ..core.embedding import Embedder, embed_memories
from ..core.text import normalize_entity
from ..core.types import MemoryRecord, StoreResult
from ..db import Database, load_sql, lock_tenants, pipelined, schema_current, set_tenant
from .records import Key, Prepared, RecordRules, prepare

GraphWriter = Callable[[psycopg.Connection, str], None]
Batch = Sequence[MemoryRecord | Mapping[str, Any]]
T = TypeVar("T")


# How often prepare_batch makes way for busy writer threads: a tenth of the interpreter's switch interval.
YIELD_EVERY_S = 0.0005


class Ingestor:
    """Writes batches of memories; every batch is all-or-nothing."""

    def __init__(
        self,
        db: Database,
        *,
        embedder: Embedder,
        rules: RecordRules,
        k1: float,
        b: float,
        graph_writer: GraphWriter | None = None,
        single_valued: Sequence[str] = (),
        statement_timeout_ms: int = 0,
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.rules = rules
        self.k1, self.b = k1, b
        self.graph_writer = graph_writer
        self.statement_timeout_ms = statement_timeout_ms  # of a batch's statements (0: none)
        # attribute names whose newer statement supersedes an older one ("favourite *": a prefix)
        self.single_valued = attribute_patterns(single_valued)
        # see _pipeline; False runs each statement on its own (profiling, or a libpq before 14)
        self.pipeline = psycopg.Pipeline.is_supported()

    @property
    def memory_types(self) -> Collection[str]:
        return self.rules.memory_types

    def prepare(self, raw: MemoryRecord | Mapping[str, Any], where: str, now: dt.datetime) -> Prepared:
        return prepare(raw, where, now, self.rules)

    def prepare_batch(
        self, batch: Batch, wheres: Sequence[str] | None = None, *, writers_busy: bool = False
    ) -> list[Prepared]:
        """Validate and embed one batch; InputError names the bad record. No database access, but
        for a memory type it does not know (KnownTypes looks it up). `writers_busy`: store_batches'
        writer threads are writing earlier batches meanwhile (this thread then makes way for them)."""
        now = dt.datetime.now(dt.UTC)
        wheres = wheres or [f"record {i + 1}" for i in range(len(batch))]
        prepared = []
        yielded = time.perf_counter()
        for raw, where in zip(batch, wheres):
            prepared.append(self.prepare(raw, where, now))
            if writers_busy and (clock := time.perf_counter()) - yielded >= YIELD_EVERY_S:
                # A writer thread back from the server (a result read, a COPY buffer sent) needs the
                # interpreter for a moment; while this thread runs pure Python it would get it only at
                # the switch interval (5 ms), and batches were written at that pace. time.sleep(0)
                # sleeps up to the timer slack (~50 us on Linux), long enough for it to take the
                # interpreter (os.sched_yield is not: this thread takes it back first). SciFact
                # abstracts 893 -> 1,013 a second, MS MARCO passages 2,481 -> 2,895, the same CPU
                # (docs/measurements.md, "Ingestion on real text").
                time.sleep(0)
                yielded = clock
        self._embed_missing(prepared)
        return prepared

    def store_batch(self, batch: Batch, wheres: Sequence[str] | None = None) -> StoreResult:
        """Validate, embed and write one batch in one transaction; an invalid record writes nothing."""
        return self.write(self.prepare_batch(batch, wheres))

    def store_batches(
        self,
        batches: Iterable[tuple[Batch, Sequence[str]]],
        *,
        writers: int = 1,
        progress: Callable[[int], None] | None = None,
        return_ids: bool = True,
    ) -> StoreResult:
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
        pending: collections.deque[_Pending] = collections.deque()

        def collect(future: concurrent.futures.Future[StoreResult], size: int) -> None:
            _add(total, future.result(), return_ids)
            if progress:
                progress(size)

        with concurrent.futures.ThreadPoolExecutor(writers, thread_name_prefix="memoria-ingest") as pool:
            try:
                for batch, wheres in batches:
                    busy = any(not future.done() for future, _, _ in pending)
                    prepared = self.prepare_batch(batch, wheres, writers_busy=busy)
                    while len(pending) >= writers:
                        collect(*pending.popleft()[:2])
                    # A memory whose key a batch still being written also inserts would wait at its
                    # INSERT for that whole transaction to end: it goes in last (see _write_batch).
                    in_flight = set().union(*(keys for future, _, keys in pending if not future.done()))
                    late = {i for i, p in enumerate(prepared) if p.key in in_flight}
                    pending.append((pool.submit(self.write, prepared, late), len(batch), {p.key for p in prepared}))
                while pending:
                    collect(*pending.popleft()[:2])
            except BaseException:
                _finish_in_flight(pending, collect)
                raise
        return total

    def _embed_missing(self, prepared: list[Prepared]) -> None:
        missing = [p for p in prepared if p.record.embedding is None]
        if not missing:
            return
        # Only now, after the whole batch validated: a batch bound to fail never pays for loading
        # the model (the embedder loads it on first use).
        vectors = embed_memories(
            self.embedder, [p.record.content for p in missing], [p.record.context for p in missing]
        )
        for p, vector in zip(missing, vectors):
            p.record.embedding = vector

    def _pipeline(self, conn: psycopg.Connection, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
        """Pipeline mode for a run of statements: sent together, the results read at the end. A batch
        runs ~8 statements per tenant; one round trip each would leave the server idle while this
        process (other threads holding the GIL) reads each result and sends the next statement.
        Errors are raised at the end of the block, as the same exceptions."""
        return pipelined(conn, enabled and self.pipeline)

    def write(self, prepared: list[Prepared], late: Collection[int] = ()) -> StoreResult:
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

    def _write_batch(self, prepared: list[Prepared], late: Collection[int] = ()) -> StoreResult:
        """Write one batch in one transaction. The memories at the positions in `late` are inserted
        after the others: a concurrent batch that inserts the same key holds it until it commits,
        and the rest of this batch's work need not wait for that (what is inserted is the same)."""
        result = StoreResult(ids=[None] * len(prepared), existing=[None] * len(prepared))
        by_tenant, repeats = _by_tenant(prepared, result)
        # Tenants in one order for every batch, and within a tenant each statement takes its row locks
        # in key order; so two writers whose batches share tenants (store_many's parallel writers, or
        # two processes) always lock in the same global order and never deadlock. The late memories
        # are the exception (write retries a deadlock of theirs in key order).
        tenants = sorted(by_tenant)
        staged = {i for rows in by_tenant.values() for i in rows}
        late_tenants = sorted({prepared[i].tenant for i in late if i in staged})
        with self.db.connection() as conn, conn.transaction():
            conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(self.statement_timeout_ms),))
            lock_tenants(conn, tenants)  # shared: a lifecycle write of these tenants waits for the batch
            conn.execute(load_sql("ingest/stage"))  # several statements, no parameters: one round trip
            # One COPY per table for the whole batch; every statement below reads its tenant's rows.
            result.copy_rows += self.copy_batch(conn, prepared, [i for t in tenants for i in by_tenant[t]], late)
            self._insert_own_rows(conn, tenants, late_tenants)
            self._update_shared_rows(conn, tenants)
            ids = dict(conn.execute("SELECT row_no, memory_id FROM stage_memories").fetchall())
            existing = self._existing_ids(conn, sorted({prepared[row].tenant for row, i in ids.items() if i is None}))
        for rows in by_tenant.values():
            for row in rows:
                result.ids[row] = ids.get(row)
                if ids.get(row) is None:
                    result.duplicates += 1
                    result.existing[row] = existing.get(row)
                else:
                    result.inserted += 1
        for row, first in repeats.items():  # a record repeating an earlier one of the batch
            result.existing[row] = result.ids[first] or result.existing[first]
        return result

    @staticmethod
    def _existing_ids(conn: psycopg.Connection, tenants: Sequence[str]) -> dict[int, int]:
        """{stage row: id of the memory already stored under its key} for the duplicates of `tenants`
        (one probe of the key each; only when the batch had duplicates)."""
        found: dict[int, int] = {}
        for tenant in tenants:
            set_tenant(conn, tenant)
            found.update(conn.execute(load_sql("ingest/existing_ids")).fetchall())
        return found

    def pipelined(self, conn: psycopg.Connection) -> contextlib.AbstractContextManager[Any]:
        """Pipeline mode (when libpq has it) for a caller's run of statements (see _pipeline)."""
        return self._pipeline(conn)

    @staticmethod
    def stage(conn: psycopg.Connection) -> None:
        """Create (once per connection) and empty the staging tables rederive reads: statement by
        statement, so that it can be sent in a pipeline (which takes one statement per query)."""
        for statement in _STATEMENT_END.split(load_sql("ingest/stage")):
            if statement.strip():
                conn.execute(statement)

    def rederive(self, conn: psycopg.Connection, prepared: Sequence[Prepared], ids: Sequence[int]) -> None:
        """Write the derived rows of memories that exist already (an update): postings, BM25
        statistics, entities and co-occurrences, attributes and their supersession, the graph mirror;
        in the caller's transaction, whose tenant is the memories' tenant, after `stage` (which the
        caller may send in a pipeline with its own statements). One COPY, then one round trip."""
        self.copy_batch(conn, list(prepared), list(range(len(prepared))))
        with self._pipeline(conn, self.graph_writer is None):  # the graph writer reports its errors itself
            conn.execute("UPDATE stage_memories SET memory_id = (%s::bigint[])[row_no + 1]", (list(ids),))
            conn.execute(load_sql("ingest/insert_terms"), {"k1": self.k1, "b": self.b})
            conn.execute(load_sql("ingest/insert_attributes"))
            self._update_shared_rows(conn, [prepared[0].tenant] if prepared else [])

    def _insert_own_rows(self, conn: psycopg.Connection, tenants: Sequence[str], late_tenants: Sequence[str]) -> None:
        """Step 1, rows only this batch writes: memories (and their index entries: the bulk of the
        work), postings, attributes. They lock nothing another batch needs, except the dedup key of a
        memory both batches insert (the second waits for the first to finish): so the late memories,
        whose keys a batch in flight inserts, go in after all the others."""
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
                conn.execute(load_sql("ingest/insert_history"))

    def _update_shared_rows(self, conn: psycopg.Connection, tenants: Sequence[str]) -> None:
        """Step 2, shared rows every batch of a tenant updates (shard statistics, document
        frequencies, entities and edges, the graph mirror), last: they stay locked only from here to
        COMMIT, so a concurrent writer's step 1 is never blocked by them."""
        with self._pipeline(conn, self.graph_writer is None):
            for tenant in tenants:
                with self._pipeline(conn, self.graph_writer is not None):
                    set_tenant(conn, tenant)
                    conn.execute(load_sql("ingest/update_docs"))
                    conn.execute(load_sql("ingest/update_df"))
                    conn.execute(load_sql("ingest/insert_entities"))
                if self.graph_writer is not None:
                    self.graph_writer(conn, tenant)
                if self.single_valued["exact"] or self.single_valued["prefixes"]:
                    conn.execute(load_sql("ingest/supersede"), self.single_valued)

    def copy_batch(
        self, conn: psycopg.Connection, prepared: list[Prepared], rows: list[int], late: Collection[int] = ()
    ) -> int:
        """COPY the batch into the stage: one row per memory (its terms and entities as arrays), one
        per attribute; returns the number of rows staged (StoreResult.copy_rows)."""
        count = 0
        with conn.cursor() as cur:
            columns = ", ".join(name for name, _ in _STAGE_MEMORIES)
            with cur.copy(f"COPY stage_memories ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types([kind for _, kind in _STAGE_MEMORIES])
                for i in rows:
                    p = prepared[i]
                    copy.write_row(_stage_row(i, p, i in late))
                    count += 1 + len(p.terms) + len(p.entities)
            if any(prepared[i].attributes for i in rows):
                with cur.copy(
                    "COPY stage_attributes (row_no, subject, attribute, value) FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["int4", "text", "text", "text"])
                    for i in rows:
                        for subject, attribute, value in prepared[i].attributes:
                            copy.write_row((i, subject, attribute.lower(), value))
                            count += 1
        return count


# The columns of stage_memories (sql/ingest/stage.sql) and their binary COPY types, in _stage_row's order.
_STAGE_MEMORIES = (
    ("row_no", "int4"), ("tenant", "text"), ("memory_type", "text"), ("external_id", "text"),
    ("dedup_key", "text"), ("content", "text"), ("context", "text"), ("metadata", "jsonb"),
    ("importance", "float4"), ("pinned", "bool"), ("created_at", "timestamptz"), ("valid_from", "timestamptz"),
    ("valid_to", "timestamptz"), ("embedding", "vector"),
    ("doc_len", "int4"), ("terms", "text[]"), ("tfs", "int4[]"), ("entity_names", "text[]"),
    ("entity_norms", "text[]"), ("late", "bool"),
)  # fmt: skip


def _stage_row(i: int, p: Prepared, late: bool) -> tuple[Any, ...]:
    """One memory's stage row: its terms and entities travel as arrays."""
    r = p.record
    return (
        i, p.tenant, p.memory_type, r.external_id, p.dedup_key, r.content, r.context, Jsonb(r.metadata),
        r.importance, bool(r.pinned), r.created_at, r.valid_from, r.valid_to, r.embedding, p.doc_len, list(p.terms),
        list(p.terms.values()),
        p.entities, [normalize_entity(name) for name in p.entities], late,
    )  # fmt: skip


_Pending = tuple[concurrent.futures.Future[StoreResult], int, set[Key]]


def _add(total: StoreResult, result: StoreResult, return_ids: bool) -> None:
    total.inserted += result.inserted
    total.duplicates += result.duplicates
    total.copy_rows += result.copy_rows
    if return_ids:  # a list entry per record: the one thing here that grows with the stream
        total.ids.extend(result.ids)
        total.existing.extend(result.existing)


def _finish_in_flight(
    pending: collections.deque[_Pending], collect: Callable[[concurrent.futures.Future[StoreResult], int], None]
) -> None:
    """After an error: let the batches in flight end; an earlier batch's failure is the error to report."""
    while pending:
        future, size, _ = pending.popleft()
        try:
            collect(future, size)
        except BaseException as earlier:
            for later, _, _ in pending:
                concurrent.futures.wait([later])
            pending.clear()
            raise earlier from None


def _by_tenant(prepared: Sequence[Prepared], result: StoreResult) -> tuple[dict[str, list[int]], dict[int, int]]:
    """The batch's positions by tenant, each key once (a duplicate inside the batch counts as one),
    and {position of a repeat: position of the key's first record}."""
    by_tenant: dict[str, list[int]] = {}
    first: dict[Key, int] = {}
    repeats: dict[int, int] = {}
    for i, p in enumerate(prepared):
        if p.key in first:
            result.duplicates += 1
            repeats[i] = first[p.key]
            continue
        first[p.key] = i
        by_tenant.setdefault(p.tenant, []).append(i)
    return by_tenant, repeats


# The end of a statement in a SQL file: a semicolon at the end of a line (a comment may follow it).
_STATEMENT_END = re.compile(r";[ \t]*(?:--[^\n]*)?\n")


def attribute_patterns(names: Sequence[str]) -> dict[str, list[str]]:
    """Attribute names as the parameters of sql/ingest/supersede.sql: exact names, and LIKE prefixes
    for the names ending in " *" ("favourite *": every favourite)."""
    exact = [n.lower() for n in names if not n.endswith("*")]
    prefixes = [_like_escape(n[:-1].lower()) + "%" for n in names if n.endswith("*")]
    return {"exact": exact, "prefixes": prefixes}


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def ramped(items: Iterable[T], size: int, first: int = 0) -> Iterator[list[T]]:
    """`items` in lists of `size`. When `first` is between 0 and `size` and there are more than `size`
    items, the first list holds `first` and each next one twice the last, until they reach `size`: a
    stream that fits in one list stays one (one transaction, its fixed costs paid once). To tell, one
    list's worth is read ahead; if reading the next item raises, the items before it come first, as
    a list of their own, then the error."""
    iterator = iter(items)
    if not 0 < first < size:
        first = size
    else:
        head = list(itertools.islice(iterator, size))
        try:
            more = list(itertools.islice(iterator, 1))
        except Exception:
            if head:
                yield head
            raise
        if not more:
            first = size
        iterator = itertools.chain(head, more, iterator)
    step = first
    while batch := list(itertools.islice(iterator, step)):
        yield batch
        step = min(size, 2 * step)
