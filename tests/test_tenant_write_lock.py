"""The tenant write lock (db/database.set_tenant): lifecycle writes run alone in their tenant, ingestion
batches side by side, and what raced before is consistent now. Threads against the real server."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem, NotFound

ROUNDS = 12


@pytest.fixture
def pair(config: Config):
    """Two systems on one database (two pools, as two processes would be)."""
    with (
        MemorySystem(config, embedder=HashEmbedder()) as one,
        MemorySystem(config, embedder=HashEmbedder()) as two,
    ):
        yield one, two


def problems(dsn: str) -> list[tuple[str, object]]:
    """What a race could leave behind: statistics that disagree with the memories and postings, and
    rows of memories that do not exist."""
    checks = {
        "bm25_docs": """
            WITH m AS (SELECT tenant, memory_type, count(*) AS n, sum(doc_len) AS s FROM memoria.memories GROUP BY 1, 2)
            SELECT coalesce(m.tenant, d.tenant) FROM m FULL JOIN memoria.bm25_docs d USING (tenant, memory_type)
            WHERE coalesce(m.n, 0) <> coalesce(d.n_docs, 0) OR coalesce(m.s, 0) <> coalesce(d.sum_len, 0)""",
        "df": """
            WITH p AS (SELECT tenant, memory_type, term, count(*) AS df FROM memoria.memory_terms GROUP BY 1, 2, 3)
            SELECT coalesce(p.term, b.term) FROM p FULL JOIN memoria.bm25_terms b USING (tenant, memory_type, term)
            WHERE coalesce(p.df, 0) <> coalesce(b.df, 0)""",
    }
    for table in ("memory_terms", "memory_entities", "memory_access", "query_trace_candidates"):
        checks[f"{table} of missing memories"] = (
            f"SELECT x.memory_id FROM memoria.{table} x WHERE NOT EXISTS "
            "(SELECT 1 FROM memoria.memories m WHERE m.tenant = x.tenant AND m.id = x.memory_id)"
        )
    checks["history of missing memories"] = (
        "SELECT h.memory_id FROM memoria.memory_history h WHERE NOT EXISTS (SELECT 1 FROM memoria.memories m "
        "WHERE m.tenant = h.tenant AND m.id = h.memory_id) AND NOT EXISTS (SELECT 1 FROM memoria.memory_history d "
        "WHERE d.tenant = h.tenant AND d.memory_id = h.memory_id AND d.event = 'deleted')"
    )
    with psycopg.connect(dsn) as conn:
        return [(name, row) for name, query in checks.items() for row in conn.execute(query).fetchall()]


def race(*calls: Callable[[int], None], rounds: int = ROUNDS) -> collections.Counter[str]:
    """Each call in its own thread, `rounds` times, the threads released together each round; what
    each call raised, by exception type ("ok" when nothing)."""
    outcomes: collections.Counter[str] = collections.Counter()
    barrier = threading.Barrier(len(calls))

    def loop(index: int, call: Callable[[int], None]) -> None:
        for i in range(rounds):
            barrier.wait()
            try:
                call(i)
                outcomes[f"{index}:ok"] += 1
            except Exception as exc:  # counted, and the test says which
                outcomes[f"{index}:{type(exc).__name__}"] += 1

    threads = [threading.Thread(target=loop, args=(i, call)) for i, call in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_erasure_racing_a_bulk_load_leaves_nothing_behind(pair, dsn):
    """erase_tenant deleted table by table while a batch committed in between: the batch's postings,
    mentions and history outlived its memories, and BM25's document frequencies drifted."""
    one, two = pair
    for r in range(ROUNDS):
        one.store_many([{"content": f"Alice met Bob about the budget {r}-{j}", "tenant": "t"} for j in range(20)])
        outcomes = race(
            lambda i, r=r: two.store_many(
                [{"content": f"Carol met Dan about plans {r}-{j}", "tenant": "t"} for j in range(30)], batch_size=10
            ),
            lambda i: one.erase_tenant("t") and None,
            rounds=1,
        )
        assert outcomes == {"0:ok": 1, "1:ok": 1}
        assert problems(dsn) == [], f"round {r}"


@pytest.mark.parametrize("kind", ["types", "entities"])
def test_updates_that_cross_shards_or_entities_do_not_deadlock(pair, dsn, kind):
    """Two memories moving between the same two shards in opposite directions, or swapping the people
    they mention across shards, locked shared rows in opposite orders: a deadlock (ServerError)."""
    one, two = pair
    if kind == "types":
        a = one.store("alpha one", tenant="t", memory_type="general")
        b = one.store("bravo two", tenant="t", memory_type="fact")
        calls = (
            lambda i: one.update(a, tenant="t", memory_type=["fact", "general"][i % 2]) and None,
            lambda i: two.update(b, tenant="t", memory_type=["general", "fact"][i % 2]) and None,
        )
    else:
        a = one.store("Alice met Bob.", tenant="t", memory_type="general")
        b = one.store("Carol met Dan.", tenant="t", memory_type="fact")
        calls = (
            lambda i: (
                one.update(a, tenant="t", content=["Carol met Dan", "Alice met Bob"][i % 2] + f" at noon {i}.") and None
            ),
            lambda i: (
                two.update(b, tenant="t", content=["Alice met Bob", "Carol met Dan"][i % 2] + f" at dusk {i}.") and None
            ),
        )
    assert race(*calls, rounds=2 * ROUNDS) == {"0:ok": 2 * ROUNDS, "1:ok": 2 * ROUNDS}
    assert problems(dsn) == []


def test_a_store_racing_a_move_to_another_shard_does_not_fail(pair, dsn):
    one, two = pair
    a = one.store("alpha one", tenant="t", memory_type="general")
    outcomes = race(
        lambda i: (
            one.store_many(
                [{"content": f"record {i} {t}", "tenant": "t", "memory_type": t} for t in ("fact", "general")]
            )
            and None
        ),
        lambda i: two.update(a, tenant="t", memory_type=["fact", "general"][i % 2]) and None,
        rounds=2 * ROUNDS,
    )
    assert outcomes == {"0:ok": 2 * ROUNDS, "1:ok": 2 * ROUNDS}
    assert problems(dsn) == []


def test_an_operation_on_a_memory_another_moves_to_another_shard_waits_for_it(pair, dsn):
    """A delete or update of a row a concurrent update had moved to another partition failed with a
    serialization failure ("tuple to be locked was already moved to another partition")."""
    one, two = pair
    ids = one.store_many([{"content": f"word{i}", "tenant": "t"} for i in range(ROUNDS)]).ids
    moved = race(
        lambda i: one.update(ids[i], tenant="t", memory_type="fact") and None,
        lambda i: two.update(ids[i], tenant="t", importance=0.9) and None,
    )
    assert moved == {"0:ok": ROUNDS, "1:ok": ROUNDS}
    assert {one.get(i, tenant="t").memory_type for i in ids} == {"fact"}
    outcomes = race(
        lambda i: one.update(ids[i], tenant="t", memory_type="general") and None,
        lambda i: two.delete(ids[i], tenant="t") and None,
    )
    # Whichever runs first: a delete always succeeds, an update after it finds nothing.
    assert outcomes["1:ok"] == ROUNDS and outcomes["0:ok"] + outcomes["0:NotFound"] == ROUNDS, outcomes
    assert problems(dsn) == []


def test_queries_racing_deletes_leave_no_access_statistics_or_trace_rows(pair, dsn):
    """A ranked, traced query that returned a memory being deleted wrote its access statistics and
    trace rows after the delete had removed them."""
    one, two = pair
    ids = one.store_many([{"content": f"budget meeting notes number {i}", "tenant": "t"} for i in range(60)]).ids
    stop = threading.Event()
    queried = collections.Counter()

    def query() -> None:
        while not stop.is_set():
            response = two.query("budget meeting notes", tenant="t", top_k=30, ranking=True, trace=True)
            queried["traces"] += response.diagnostics.trace_id is not None

    threads = [threading.Thread(target=query) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for memory_id in ids:
            one.delete(memory_id, tenant="t")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert queried["traces"] > 0
    assert problems(dsn) == []


def test_a_lifecycle_write_holds_its_tenant_only(pair):
    """While a lifecycle write's transaction is open, a store of its tenant waits for it, a store of
    another tenant and a query of its own do not."""
    one, two = pair
    one.store("Alice lives in Paris.", tenant="t")
    stored: dict[str, float] = {}

    def store(tenant: str) -> None:
        two.store(f"Bob lives in Rome ({tenant}).", tenant=tenant)
        stored[tenant] = time.monotonic()

    with one.db.transaction("t", tenant_lock="exclusive"):
        held = time.monotonic()
        waiting = threading.Thread(target=store, args=("t",))
        waiting.start()
        store("u")  # another tenant: not held up
        assert [c.content for c in two.query("Paris", tenant="t", ranking=False).candidates][:1] == [
            "Alice lives in Paris."
        ]
        time.sleep(0.3)
        assert "t" not in stored  # still waiting for the lifecycle write
        released = time.monotonic()
    waiting.join(timeout=30)
    assert stored["u"] < released <= stored["t"] and held < stored["u"]
    with pytest.raises(NotFound):
        one.get(10**12, tenant="t")
