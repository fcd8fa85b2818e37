"""store_many with concurrent writers (Ingestor.store_batches) and migration 0005's index changes.

The writers must leave exactly what one writer leaves: the same memories, postings, statistics,
entities, edges and attributes; results in input order; an error stops the stream after the batches
already in flight, and every batch is still all-or-nothing.
"""

from __future__ import annotations

import random
import threading
import time
import types

import psycopg
import pytest

from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.db import migrate
from memoria_pg.errors import InputError
from memoria_pg.ingest import ramped
from memoria_pg.system import MemorySystem

WORDS = "apple banana cherry damson elder fig grape hazel iris juniper kiwi lemon mango".split()
PEOPLE = ["Alice Novak", "Bob Stone", "Carol Diaz", "Dan Wu", "Eve Moss"]


def records(n: int, seed: int = 5) -> list[dict]:
    """Tenants, types and entities shared across batches; every 7th record repeats an earlier one
    (a duplicate that may sit in a batch still being written by the other writer)."""
    r = random.Random(seed)
    out: list[dict] = []
    for i in range(n):
        if i % 7 == 6:
            out.append(dict(out[r.randrange(len(out))]))
            continue
        a, b = r.sample(PEOPLE, 2)
        out.append(
            {
                "content": f"{a} and {b} talked about {' '.join(r.sample(WORDS, 3))} ({i}). "
                f"{a}'s favourite colour is {r.choice(['teal', 'red', 'blue'])}.",
                "tenant": r.choice("xyz"),
                "memory_type": r.choice(["general", "fact", "episodic"]),
            }
        )
    return out


def state(dsn: str) -> dict[str, object]:
    """Everything ingestion derives, keyed by content rather than ids (ids differ between runs)."""
    with psycopg.connect(dsn) as conn:
        q = lambda sql: sorted(conn.execute(sql).fetchall())  # noqa: E731
        return {
            "memories": q("SELECT tenant, memory_type, content, doc_len FROM memoria.memories"),
            "postings": q(
                "SELECT t.tenant, m.content, t.term, t.tf, t.doc_len FROM memoria.memory_terms t "
                "JOIN memoria.memories m ON m.id = t.memory_id"
            ),
            "docs": q("SELECT tenant, memory_type, n_docs, sum_len FROM memoria.bm25_docs"),
            "df": q("SELECT tenant, memory_type, term, df FROM memoria.bm25_terms"),
            "entities": q("SELECT tenant, norm_name FROM memoria.entities"),
            "mentions": q(
                "SELECT m.content, e.norm_name FROM memoria.memory_entities me "
                "JOIN memoria.memories m ON m.id = me.memory_id JOIN memoria.entities e ON e.id = me.entity_id"
            ),
            # An edge is stored once, from its smaller entity id (migration 0017), and the ids follow the
            # order the writers' batches first named the entities, which two writers may change: an edge
            # is compared by its two names, whichever end holds which.
            "edges": q(
                "SELECT ed.tenant, least(a.norm_name, b.norm_name), greatest(a.norm_name, b.norm_name), ed.weight "
                "FROM memoria.entity_edges ed "
                "JOIN memoria.entities a ON a.id = ed.src_id JOIN memoria.entities b ON b.id = ed.dst_id"
            ),
            "attributes": q(
                "SELECT a.tenant, m.content, a.subject, a.attribute, a.value FROM memoria.memory_attributes a "
                "JOIN memoria.memories m ON m.id = a.memory_id"
            ),
        }


def test_two_writers_leave_what_one_writer_leaves(config, admin_dsn, template_dsn):
    from tests.conftest import TEMPLATE, create_database, drop_database

    data = records(300)
    results, states = {}, {}
    for writers in (1, 2):
        name, dsn = create_database(admin_dsn, TEMPLATE)
        try:
            with MemorySystem(config.replace(dsn=dsn), embedder=HashEmbedder()) as system:
                results[writers] = system.store_many(data, batch_size=16, writers=writers)
            states[writers] = state(dsn)
            with psycopg.connect(dsn) as conn:
                stored = {
                    row[0]: row[1:]
                    for row in conn.execute("SELECT id, tenant, memory_type, content FROM memoria.memories")
                }
            # ids per record, in input order: each id is the memory stored from that very record
            for record, memory_id in zip(data, results[writers].ids):
                if memory_id is not None:
                    assert stored[memory_id] == (record["tenant"], record["memory_type"], record["content"])
        finally:
            drop_database(admin_dsn, name)
    one, two = results[1], results[2]
    assert (two.inserted, two.duplicates, two.copy_rows) == (one.inserted, one.duplicates, one.copy_rows)
    assert one.duplicates == sum(1 for i in range(300) if i % 7 == 6)
    # Every distinct record got exactly one id. Which copy of a duplicate gets it may differ with two
    # writers: a copy in a later batch can commit before the earlier batch that holds the original.
    for result in (one, two):
        winners: dict[tuple, int] = {}
        for record, memory_id in zip(data, result.ids):
            key = (record["tenant"], record["memory_type"], record["content"])
            winners[key] = winners.get(key, 0) + (memory_id is not None)
        assert set(winners.values()) == {1}
    assert states[2] == states[1]


def test_ids_follow_the_input_order_and_progress_counts_every_batch(system, dsn):
    seen: list[int] = []
    data = [{"content": f"note number {i}", "tenant": "t"} for i in range(50)]
    result = system.store_many(data, batch_size=8, writers=2, progress=seen.append)
    assert seen == [8] * 6 + [2]
    with psycopg.connect(dsn) as conn:
        by_content = dict(conn.execute("SELECT content, id FROM memoria.memories").fetchall())
    assert result.ids == [by_content[r["content"]] for r in data]


def test_a_call_without_its_own_batch_size_starts_with_small_batches(config, dsn):
    # ingest_first_batch_size: the writers start on a small batch, the next ones double up to the
    # batch size; every record is written once, in input order.
    seen: list[int] = []
    data = [{"content": f"ramped note {i}", "tenant": "t"} for i in range(50)]
    cfg = config.replace(ingest_batch_size=16, ingest_first_batch_size=4)
    with MemorySystem(cfg, embedder=HashEmbedder()) as system:
        result = system.store_many(data, writers=2, progress=seen.append)
        assert seen == [4, 8, 16, 16, 6]
        small: list[int] = []
        system.store_many(data[:12], progress=small.append)  # fits in one batch: one transaction
        assert small == [12]
        unramped: list[int] = []
        system.store_many(data[:40], progress=unramped.append, batch_size=16)  # its own size: every batch full
        assert unramped == [16, 16, 8]
    with psycopg.connect(dsn) as conn:
        by_content = dict(conn.execute("SELECT content, id FROM memoria.memories").fetchall())
    assert result.ids == [by_content[r["content"]] for r in data]
    assert len(by_content) == 50


@pytest.mark.parametrize(
    ("n", "size", "first", "sizes"),
    [
        (50, 16, 4, [4, 8, 16, 16, 6]),
        (17, 16, 4, [4, 8, 5]),
        (16, 16, 4, [16]),  # a stream that fits in one batch stays one
        (10, 16, 4, [10]),
        (50, 16, 0, [16, 16, 16, 2]),  # 0: no ramp
        (50, 16, 16, [16, 16, 16, 2]),  # as large as the batch: no ramp
        (50, 16, 40, [16, 16, 16, 2]),
        (7, 5, 1, [1, 2, 4]),
        (0, 16, 4, []),
    ],
)
def test_ramped_batches(n, size, first, sizes):
    batches = list(ramped(range(n), size, first))
    assert [len(b) for b in batches] == sizes
    assert [x for b in batches for x in b] == list(range(n))


@pytest.mark.parametrize(("bad", "sizes"), [(16, [16]), (30, [4, 8, 16]), (5, []), (0, [])])
def test_ramped_batches_before_a_failing_item_come_first(bad, sizes):
    # what a file reader's bad line does: the batches before it are handed on, then its error
    def items():
        for i in range(50):
            if i == bad:
                raise ValueError(f"line {i + 1}")
            yield i

    got = []
    with pytest.raises(ValueError, match=f"line {bad + 1}"):
        for batch in ramped(items(), 16, 4):
            got.append(len(batch))
    assert got == sizes


def test_a_bad_record_stops_the_stream_after_the_batches_in_flight(system, dsn):
    data = [{"content": f"entry {i}", "tenant": "t"} for i in range(40)]
    data[25] = {"content": "late", "importance": "high"}  # batch 4 (records 25..32)
    with pytest.raises(InputError, match="record 26"):
        system.store_many(data, batch_size=8, writers=2)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 24  # batches 1-3 whole
        assert conn.execute("SELECT sum(n_docs) FROM memoria.bm25_docs").fetchone()[0] == 24


def test_a_failed_write_is_raised_and_its_batch_written_not_at_all(system, dsn):
    writer = system.ingestor.graph_writer
    calls = []

    def fail_once(conn, tenant):
        calls.append(tenant)
        # The second batch's (not the second call's: the two writers' batches may end in either order)
        if conn.execute("SELECT 1 FROM stage_memories WHERE content = 'entry 8'").fetchone():
            raise RuntimeError("graph mirror unavailable")
        if writer is not None:
            writer(conn, tenant)

    system.ingestor.graph_writer = fail_once
    data = [{"content": f"entry {i}", "tenant": "t"} for i in range(40)]
    with pytest.raises(RuntimeError, match="graph mirror unavailable"):
        system.store_many(data, batch_size=8, writers=2)
    system.ingestor.graph_writer = writer
    with psycopg.connect(dsn) as conn:
        contents = {r[0] for r in conn.execute("SELECT content FROM memoria.memories")}
        docs = conn.execute("SELECT coalesce(sum(n_docs), 0) FROM memoria.bm25_docs").fetchone()[0]
    assert {f"entry {i}" for i in range(8)} <= contents  # the first batch committed
    assert not contents & {f"entry {i}" for i in range(8, 16)}  # the failed one wrote nothing
    assert docs == len(contents) and len(contents) % 8 == 0
    # Re-running stores what is missing and nothing twice.
    again = system.store_many(data, batch_size=8, writers=2)
    assert again.inserted == 40 - len(contents) and again.duplicates == len(contents)


def test_late_memories_leave_what_the_same_batch_leaves_in_key_order(config, admin_dsn, template_dsn):
    """write with some memories marked late (inserted after the others) stores exactly what the
    plain write stores: memories, postings, statistics, entities, edges, attributes and ids."""
    from tests.conftest import TEMPLATE, create_database, drop_database

    data = records(60, seed=11)
    results, states = {}, {}
    for late in ((), set(range(0, 60, 3))):
        name, dsn = create_database(admin_dsn, TEMPLATE)
        try:
            with MemorySystem(config.replace(dsn=dsn), embedder=HashEmbedder()) as system:
                system.store_many(data[:20], batch_size=20)  # some of the batch is already stored
                results[bool(late)] = system.ingestor.write(system.ingestor.prepare_batch(data[10:]), late)
                with psycopg.connect(dsn) as conn:
                    stored = {
                        r[0]: r[1:]
                        for r in conn.execute("SELECT id, tenant, memory_type, content FROM memoria.memories")
                    }
            states[bool(late)] = state(dsn)
        finally:
            drop_database(admin_dsn, name)
        result = results[bool(late)]
        for record, memory_id in zip(data[10:], result.ids):
            if memory_id is not None:
                assert stored[memory_id] == (record["tenant"], record["memory_type"], record["content"])
    plain, late = results[False], results[True]
    assert late.inserted > 0 and late.duplicates >= 10
    assert (late.inserted, late.duplicates, late.copy_rows) == (plain.inserted, plain.duplicates, plain.copy_rows)
    assert [i is None for i in late.ids] == [i is None for i in plain.ids]
    assert states[True] == states[False]


def test_statements_one_at_a_time_leave_what_the_pipeline_leaves(config, admin_dsn, template_dsn):
    """Ingestor.pipeline = False (each statement on its own round trip, for profiling) writes the
    same rows as the default pipeline mode."""
    from tests.conftest import TEMPLATE, create_database, drop_database

    data = records(80, seed=13)
    states, results = {}, {}
    for pipeline in (True, False):
        name, dsn = create_database(admin_dsn, TEMPLATE)
        try:
            with MemorySystem(config.replace(dsn=dsn), embedder=HashEmbedder()) as system:
                system.ingestor.pipeline = pipeline
                results[pipeline] = system.store_many(data, batch_size=30)
            states[pipeline] = state(dsn)
        finally:
            drop_database(admin_dsn, name)
    assert (results[False].inserted, results[False].duplicates) == (results[True].inserted, results[True].duplicates)
    assert states[False] == states[True] and states[True]["attributes"] and states[True]["edges"]


def test_a_memory_whose_key_a_batch_in_flight_inserts_is_written_late(system, dsn):
    """store_batches marks the memories of a batch whose key a batch still being written also
    inserts; the first batch is held until the second is submitted, so it is surely in flight."""
    ingestor = system.ingestor
    write = ingestor.write
    second_submitted = threading.Event()
    lates: list[set[int]] = []

    def gated(prepared, late=()):
        lates.append(set(late))
        if len(lates) == 1:
            assert second_submitted.wait(30)
        else:
            second_submitted.set()
        return write(prepared, late)

    ingestor.write = gated
    first = [{"content": f"first batch note {i}", "tenant": "t"} for i in range(4)]
    second = [
        {"content": "a new note", "tenant": "t"},
        dict(first[2]),
        {"content": "first batch note 1", "tenant": "u"},
        dict(first[0]),
    ]
    result = system.store_many(first + second, batch_size=4, writers=2)
    assert lates == [set(), {1, 3}]  # the same tenant, type and content; not the other tenant's
    assert result.inserted == 6 and result.duplicates == 2
    # one copy of each repeated note got an id (which one: whichever batch inserted it first)
    assert [(result.ids[a] is None) + (result.ids[b] is None) for a, b in ((2, 5), (0, 7))] == [1, 1]
    assert counts_of(dsn) == (6, 6)


def test_a_deadlock_of_late_memories_is_retried_in_key_order(system, dsn):
    ingestor = system.ingestor
    write_batch = ingestor._write_batch
    calls: list[set[int]] = []

    def deadlock_first(prepared, late=()):
        calls.append(set(late))
        if len(calls) == 1:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        return write_batch(prepared, late)

    ingestor._write_batch = deadlock_first
    prepared = ingestor.prepare_batch([{"content": f"note {i}", "tenant": "t"} for i in range(5)])
    result = ingestor.write(prepared, {1, 2})
    assert calls == [{1, 2}, set()]
    assert result.inserted == 5 and counts_of(dsn) == (5, 5)
    # Without late memories the batch took its locks in key order: a deadlock is not retried.
    calls.clear()
    with pytest.raises(psycopg.errors.DeadlockDetected):
        ingestor.write(ingestor.prepare_batch([{"content": "another note", "tenant": "t"}]))
    assert calls == [set()]


def counts_of(dsn: str) -> tuple[int, int]:
    """(memories, BM25 documents) over all tenants."""
    with psycopg.connect(dsn) as conn:
        return (
            conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0],
            conn.execute("SELECT coalesce(sum(n_docs), 0) FROM memoria.bm25_docs").fetchone()[0],
        )


def hnsw_options(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.reloptions::text FROM pg_class c JOIN pg_am a ON a.oid = c.relam "
            "WHERE a.amname = 'hnsw' AND c.relnamespace = 'memoria'::regnamespace"
        ).fetchall()
    return {r[0] for r in rows}


def tsv_gin_count(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_index x JOIN pg_attribute a ON a.attrelid = x.indrelid "
            "AND a.attnum = ANY (x.indkey) JOIN pg_class c ON c.oid = x.indrelid "
            "WHERE c.relnamespace = 'memoria'::regnamespace AND a.attname = 'tsv'"
        ).fetchone()[0]


def test_0005_rebuilds_hnsw_with_m_8_and_drops_the_tsv_gin_and_its_downgrade_restores_them(empty_dsn):
    migrate.upgrade(empty_dsn, "0004")
    assert hnsw_options(empty_dsn) == {"{m=16,ef_construction=64}"}
    assert tsv_gin_count(empty_dsn) > 0
    migrate.upgrade(empty_dsn, "0005")
    assert hnsw_options(empty_dsn) == {"{m=8,ef_construction=64}"}
    assert tsv_gin_count(empty_dsn) == 0
    assert migrate.add_memory_type(empty_dsn, "recipe")  # a new shard follows the parent
    assert hnsw_options(empty_dsn) == {"{m=8,ef_construction=64}"}
    migrate.downgrade(empty_dsn, "0004")
    assert hnsw_options(empty_dsn) == {"{m=16,ef_construction=64}"}
    assert tsv_gin_count(empty_dsn) > 0


def test_writers_never_outnumber_the_pooled_connections(config, dsn):
    cfg = config.replace(pool_min_size=1, pool_max_size=1, pool_timeout=0.2, ingest_writers=2)
    with MemorySystem(cfg, embedder=HashEmbedder()) as system:
        result = system.store_many([{"content": f"pooled note {i}", "tenant": "t"} for i in range(60)], batch_size=6)
    assert result.inserted == 60


def test_pipeline_mode_only_where_libpq_supports_it(monkeypatch):
    from memoria_pg.ingest import Ingestor, RecordRules

    def ingestor() -> Ingestor:
        rules = RecordRules(
            memory_types=("general",), default_type="general", default_tenant="t", dim=384, max_chars=1000
        )
        return Ingestor(None, embedder=HashEmbedder(), rules=rules, k1=1.2, b=0.75)  # type: ignore[arg-type]

    assert ingestor().pipeline is psycopg.Pipeline.is_supported()
    monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    assert ingestor().pipeline is False


def test_batches_prepared_while_a_write_is_in_flight_make_way_for_the_writers(system, monkeypatch):
    # prepare_batch hands the interpreter to the writer threads (time.sleep(0) every YIELD_EVERY_S) only
    # while one of them is writing: the first batch, and a batch with no write in flight, run straight
    from memoria_pg.ingest import ingestor as module

    flags: list[bool] = []
    prepare_batch, write = module.Ingestor.prepare_batch, module.Ingestor.write

    def recording(self, batch, wheres=None, *, writers_busy=False):
        flags.append(writers_busy)
        return prepare_batch(self, batch, wheres, writers_busy=writers_busy)

    def slow_write(self, prepared, late=()):
        time.sleep(0.3)  # still writing when the next batch is prepared
        return write(self, prepared, late)

    monkeypatch.setattr(module.Ingestor, "prepare_batch", recording)
    monkeypatch.setattr(module.Ingestor, "write", slow_write)
    data = [{"content": f"entry {i}", "tenant": "t"} for i in range(12)]
    assert system.store_many(data, batch_size=4, writers=2).inserted == 12
    assert flags == [False, True, True]
    flags.clear()
    assert system.store_many(data[:3] + [{"content": "one more", "tenant": "t"}], batch_size=4).inserted == 1
    assert flags == [False]


def test_prepare_batch_sleeps_only_for_busy_writers_and_at_most_every_yield_interval(system, monkeypatch):
    from memoria_pg.ingest import ingestor as module

    ticks = iter(range(0, 10**6, 300))  # a clock that moves 0.3 ms a reading, for this module only
    sleeps: list[float] = []
    clock = types.SimpleNamespace(perf_counter=lambda: next(ticks) / 1e6, sleep=sleeps.append)
    monkeypatch.setattr(module, "time", clock)
    batch = [{"content": f"entry {i}", "tenant": "t", "embedding": [1.0] + [0.0] * 383} for i in range(10)]
    system.ingestor.prepare_batch(batch)
    assert sleeps == []
    system.ingestor.prepare_batch(batch, writers_busy=True)
    assert sleeps == [0] * 5  # every other record: 0.6 ms >= YIELD_EVERY_S since the last
