"""The library's own vector-index sync (Config.vector_index_auto, db/vector_indexes.IndexKeeper): a write
that takes a (tenant, memory type) past vector_exact_max_rows gets that tenant its own HNSW index in the
background, with no cron; another sync holding the lock makes it try again at the tenant's next write."""

from __future__ import annotations

import psycopg
import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem
from memoria_pg.db import vector_indexes

BOUND = 20


def recorded(dsn: str) -> dict[tuple[str, str], str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT v.tenant, v.memory_type, v.index_name FROM memoria.vector_indexes v "
            "JOIN pg_index i ON i.indexrelid = to_regclass('memoria.' || v.index_name) WHERE i.indisvalid"
        ).fetchall()
    return {(t, m): n for t, m, n in rows}


def notes(tenant: str, n: int, start: int = 0) -> list[dict]:
    return [{"content": f"note {i} about the harbour", "tenant": tenant} for i in range(start, start + n)]


@pytest.fixture
def auto(config: Config) -> Config:
    return config.replace(vector_exact_max_rows=BOUND, vector_index_auto=True)


def test_a_tenant_past_the_bound_gets_its_own_index_in_the_background(auto: Config):
    with MemorySystem(auto, embedder=HashEmbedder()) as system:
        keeper = system.index_keeper
        assert keeper is not None
        system.store_many(notes("big", BOUND - 1) + notes("small", 5))
        assert keeper.wait(30) and recorded(auto.dsn) == {}  # at the bound: nothing to build
        system.store_many(notes("big", 3, start=100))
        assert keeper.wait(60)
        assert recorded(auto.dsn) == {("big", "general"): vector_indexes.index_name("big", "general")}
        assert [(a.tenant, a.action) for a in keeper.built] == [("big", "build")]
        # More memories: the tenant has its index, nothing is built again.
        system.store_many(notes("big", 2, start=200))
        assert keeper.wait(30) and [(a.tenant, a.action) for a in keeper.built] == [("big", "build")]
        # The HNSW statement now takes the tenant's own index (its custom plan proves the predicate).
        found = system.query("harbour", tenant="big", workers=["vector"], ranking=False, top_k=3)
        assert len(found.memories) == 3


def test_single_stores_are_checked_at_most_once_per_interval(auto: Config):
    with MemorySystem(auto, embedder=HashEmbedder()) as system:
        keeper = system.index_keeper
        for i in range(BOUND + 1):  # the first store checked the tenant; the crossing one is not checked
            system.store(f"note {i} about the harbour", tenant="solo")
        assert keeper.wait(30) and recorded(auto.dsn) == {}
        keeper.every_s = 0.0  # as if a minute had passed
        system.store("note about the harbour, again", tenant="solo")
        assert keeper.wait(60) and set(recorded(auto.dsn)) == {("solo", "general")}


def test_another_sync_holding_the_lock_means_the_next_write_tries_again(auto: Config):
    with MemorySystem(auto, embedder=HashEmbedder()) as system:
        keeper = system.index_keeper
        with psycopg.connect(auto.dsn, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(hashtextextended('memoria.vector_indexes', 0))")
            system.store_many(notes("big", BOUND + 2))
            assert keeper.wait(30) and recorded(auto.dsn) == {}  # its sync found the lock taken
            other.execute("SELECT pg_advisory_unlock(hashtextextended('memoria.vector_indexes', 0))")
        system.store_many(notes("big", 1, start=100))  # checked again: not built yet
        assert keeper.wait(60) and set(recorded(auto.dsn)) == {("big", "general")}


def test_off_or_with_a_bound_of_zero_nothing_is_built(auto: Config):
    for cfg in (auto.replace(vector_index_auto=False), auto.replace(vector_exact_max_rows=0)):
        with MemorySystem(cfg, embedder=HashEmbedder()) as system:
            assert system.index_keeper is None
            system.store_many(notes("big", BOUND + 5))
        assert recorded(auto.dsn) == {}


def test_close_stops_the_keeper_and_later_writes_check_nothing(auto: Config):
    system = MemorySystem(auto, embedder=HashEmbedder())
    keeper = system.index_keeper
    system.store_many(notes("big", BOUND + 2))
    system.close()  # cancels a build under way, or finds it done: either way the thread has ended
    assert keeper.closed and (keeper._thread is None or not keeper._thread.is_alive())
    keeper.wrote(["big"])  # after close: ignored, no thread started
    assert keeper._thread is None or not keeper._thread.is_alive()


def test_an_explicit_sync_of_the_same_system_never_meets_its_keepers_lock(auto: Config):
    """sync_vector_indexes pauses the keeper (after its build under way): a bulk loader's own sync
    right after its load, as the evaluation and scale.py do, never raises SyncRunning."""
    with MemorySystem(auto, embedder=HashEmbedder()) as system:
        for round_ in range(5):
            system.store_many(notes(f"t{round_}", BOUND + 2))  # queues a build, which may be under way now
            actions = system.sync_vector_indexes()
            assert {(a.tenant, a.action) for a in actions if a.tenant == f"t{round_}"} <= {
                (f"t{round_}", "build"),
                (f"t{round_}", "keep"),
            }
        assert system.index_keeper.wait(60)
        assert set(recorded(auto.dsn)) == {(f"t{i}", "general") for i in range(5)}


def test_a_load_across_many_tenants_checks_a_bounded_number_each_time(auto: Config, monkeypatch):
    monkeypatch.setattr(vector_indexes, "MAX_CHECKS_PER_WRITE", 3)
    with MemorySystem(auto, embedder=HashEmbedder()) as system:
        keeper = system.index_keeper
        checked: list[str] = []
        real = keeper._missing
        monkeypatch.setattr(keeper, "_missing", lambda tenant: checked.append(tenant) or real(tenant))
        tenants = [f"t{i}" for i in range(7)]
        system.store_many([r for t in tenants for r in notes(t, 2)])
        assert len(checked) == 3
        system.store_many([r for t in tenants for r in notes(t, 1, start=50)])
        assert len(checked) == 6 and len(set(checked)) == 6  # the ones not checked yet come first


def test_the_keeper_forgets_checks_too_old_to_throttle(auto: Config, monkeypatch: pytest.MonkeyPatch):
    """A process that writes for ever more tenants keeps no entry per tenant it ever saw: past
    REMEMBERED_TENANTS, the checks older than the interval (which throttle nothing) are dropped, in a
    pass that runs again only once the entries have doubled (no scan per write in a burst of tenants)."""
    monkeypatch.setattr(vector_indexes, "REMEMBERED_TENANTS", 3)
    with MemorySystem(auto, embedder=HashEmbedder()) as system:
        keeper = system.index_keeper
        assert keeper is not None
        for i in range(5):
            system.store("a note about the harbour", tenant=f"t{i}")
        # a pass at the 4th found every check recent (each still throttles): the next one at 8 entries
        assert set(keeper._checked) == {f"t{i}" for i in range(5)}
        keeper.every_s = 0.0  # as if a minute had passed
        for i in range(5, 10):
            system.store("one more note about the harbour", tenant=f"t{i}")
        assert set(keeper._checked) == {"t8", "t9"}  # the pass at the 9th dropped the older ones
