"""Edges of the lifecycle found by review (2026-12-03): a validity that starts in the future, the entity
bound of one memory, an unknown type when listing, migration 0020's index."""

from __future__ import annotations

import psycopg
import pytest

from memoria_pg import InputError, MemorySystem
from memoria_pg.core.validation import MAX_ENTITIES
from memoria_pg.db import migrate


@pytest.mark.parametrize("candidates", [True, False])
@pytest.mark.parametrize("ranking", [True, False])
def test_a_memory_that_starts_to_hold_in_the_future_is_not_returned_now(system: MemorySystem, candidates, ranking):
    """A memory stored with valid_from after now does not hold yet: a query as of now leaves it out
    (the full final CTE and its first-rows form alike), one as of a time after its start returns it."""
    now = system.store("Maya lives in Lisbon.", tenant="t")
    later = system.store("Maya lives in Porto.", tenant="t", valid_from="2099-03-01")
    found = system.query("where does Maya live", tenant="t", ranking=ranking, candidates=candidates)
    assert [c.memory_id for c in found.memories] == [now]
    then = system.query("where does Maya live", tenant="t", ranking=ranking, as_of="2099-06-01")
    assert later in [c.memory_id for c in then.memories]
    everything = system.query("where does Maya live", tenant="t", ranking=ranking, include_invalid=True)
    assert {c.memory_id for c in everything.memories} == {now, later}
    v3 = system.query("where does Maya live", tenant="t", v4=False, ranking=ranking)
    assert [c.memory_id for c in v3.memories] == [now]


def test_a_memory_names_at_most_max_entities(system: MemorySystem, dsn):
    """One memory naming thousands of people made the graph upkeep run for minutes in one statement:
    extraction keeps the first MAX_ENTITIES names in text order, and a record that lists more is an
    InputError naming it."""
    names = [f"Person{chr(65 + i // 26)}{chr(65 + i % 26)} Novak{i}" for i in range(MAX_ENTITIES + 100)]
    memory_id = system.store("We met " + ", ".join(names) + ".", tenant="t")
    with psycopg.connect(dsn) as conn:
        stored = conn.execute(
            "SELECT e.name FROM memoria.memory_entities me JOIN memoria.entities e ON e.id = me.entity_id "
            "WHERE me.memory_id = %s",
            (memory_id,),
        ).fetchall()
    assert len(stored) == MAX_ENTITIES and {r[0] for r in stored} == set(names[:MAX_ENTITIES])
    with pytest.raises(InputError, match=rf"record 1: {MAX_ENTITIES + 1} entities; a memory may name at most"):
        system.store("Met them all.", tenant="t", entities=names[: MAX_ENTITIES + 1])
    assert system.store("Met a few.", tenant="t", entities=names[:MAX_ENTITIES])


def test_listing_an_unknown_type_is_an_input_error(system: MemorySystem):
    with pytest.raises(InputError, match="unknown memory_type 'nope'"):
        system.list_memories(tenant="t", memory_type="nope")
    with pytest.raises(InputError, match="memory_type"):
        system.list_memories(tenant="t", memory_type="general\x00x")
    assert system.list_memories(tenant="t", memory_type="fact") == []


def test_0020_replaces_the_invalid_index_and_its_downgrade_restores_it(empty_dsn):
    def indexes() -> set[str]:
        with psycopg.connect(empty_dsn) as conn:
            rows = conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'memoria' AND tablename = 'memories'"
            ).fetchall()
        return {r[0] for r in rows}

    migrate.upgrade(empty_dsn, "0019")
    assert "memories_invalid" in indexes() and "memories_bounded" not in indexes()
    migrate.upgrade(empty_dsn, "0020")
    assert "memories_bounded" in indexes() and "memories_invalid" not in indexes()
    migrate.downgrade(empty_dsn, "0019")
    assert "memories_invalid" in indexes() and "memories_bounded" not in indexes()


def test_a_closed_system_says_it_is_closed(config):
    import asyncio

    from memoria_pg import AsyncMemorySystem, HashEmbedder, ServerError

    system = MemorySystem(config, embedder=HashEmbedder())
    system.close()
    with pytest.raises(ServerError, match=r"this memory system is closed \(its close\(\) was called\)"):
        system.query("x", tenant="t")

    async def run() -> None:
        memory = await AsyncMemorySystem.open(config, embedder=HashEmbedder())
        await memory.close()
        with pytest.raises(ServerError, match="this memory system is closed"):
            await memory.store("x", tenant="t")

    asyncio.run(run())


def test_an_end_before_the_start_is_refused_and_restoring_what_holds_records_nothing(system: MemorySystem):
    memory_id = system.store("Maya lives in Lisbon.", tenant="t", created_at="2026-01-01")
    with pytest.raises(InputError, match=rf"before memory {memory_id} began to hold \(2026-01-01"):
        system.invalidate(memory_id, tenant="t", at="2025-06-01")
    assert system.get(memory_id, tenant="t").valid_to is None
    system.restore(memory_id, tenant="t")  # it holds: nothing to undo
    assert [e.event for e in system.history(memory_id, tenant="t")] == ["stored"]
    system.invalidate(memory_id, tenant="t", at="2026-02-01")
    system.restore(memory_id, tenant="t")
    assert [e.event for e in system.history(memory_id, tenant="t")] == ["stored", "invalidated", "restored"]
