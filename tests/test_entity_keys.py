"""Migration 0014: the references of memory_entities and entity_edges to entities are checked once per
statement by triggers instead of per row by foreign keys; the guarantees stay the foreign keys' (a missing
entity is refused, a deleted entity takes its mentions and edges with it, a referenced key cannot change),
and the derived rows after store, update and delete are exactly a recount from the memories."""

from __future__ import annotations

import psycopg
import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem
from memoria_pg.db import migrate

APP_ROLE = "memoria_app"
FOREIGN_KEYS = {
    "memory_entities_entity_id_fkey": "FOREIGN KEY (tenant, entity_id) REFERENCES memoria.entities(tenant, id) "
    "ON DELETE CASCADE",
    "entity_edges_src_id_fkey": "FOREIGN KEY (tenant, src_id) REFERENCES memoria.entities(tenant, id) ON DELETE CASCADE",
    "entity_edges_dst_id_fkey": "FOREIGN KEY (tenant, dst_id) REFERENCES memoria.entities(tenant, id) ON DELETE CASCADE",
}


def foreign_keys(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE contype = 'f' AND confrelid = 'memoria.entities'::regclass"
        ).fetchall()
    return dict(rows)


def derived(dsn: str, tenant: str) -> tuple[dict, dict, set]:
    """Edges (by entity names), mentions and entities as stored, for one tenant."""
    with psycopg.connect(dsn) as conn:
        edges = conn.execute(
            "SELECT s.norm_name, d.norm_name, ed.weight FROM memoria.entity_edges ed "
            "LEFT JOIN memoria.entities s ON s.tenant = ed.tenant AND s.id = ed.src_id "
            "LEFT JOIN memoria.entities d ON d.tenant = ed.tenant AND d.id = ed.dst_id WHERE ed.tenant = %s",
            (tenant,),
        ).fetchall()
        mentions = conn.execute(
            "SELECT e.norm_name, me.memory_id, me.ordinal FROM memoria.memory_entities me "
            "LEFT JOIN memoria.entities e ON e.tenant = me.tenant AND e.id = me.entity_id WHERE me.tenant = %s",
            (tenant,),
        ).fetchall()
        entities = conn.execute("SELECT norm_name FROM memoria.entities WHERE tenant = %s", (tenant,)).fetchall()
    return {(a, b): w for a, b, w in edges}, {(n, m): o for n, m, o in mentions}, {n for (n,) in entities}


def recount(dsn: str, tenant: str) -> tuple[dict, set]:
    """The edges and entities the stored mentions imply (co_occurs' window), counted from scratch."""
    with psycopg.connect(dsn) as conn:
        edges = conn.execute(
            "SELECT s.norm_name, d.norm_name, count(*) FROM memoria.memory_entities a "
            "JOIN memoria.memory_entities b ON b.tenant = a.tenant AND b.memory_id = a.memory_id "
            "  AND b.entity_id > a.entity_id AND memoria.co_occurs(a.ordinal, b.ordinal) "
            "JOIN memoria.entities s ON s.tenant = a.tenant AND s.id = a.entity_id "
            "JOIN memoria.entities d ON d.tenant = b.tenant AND d.id = b.entity_id "
            "WHERE a.tenant = %s GROUP BY 1, 2",
            (tenant,),
        ).fetchall()
        entities = conn.execute(
            "SELECT DISTINCT e.norm_name FROM memoria.memory_entities me "
            "JOIN memoria.entities e ON e.tenant = me.tenant AND e.id = me.entity_id WHERE me.tenant = %s",
            (tenant,),
        ).fetchall()
    return {(a, b): n for a, b, n in edges}, {n for (n,) in entities}


def test_at_head_the_references_are_triggers_and_0014s_downgrade_restores_the_foreign_keys(empty_dsn):
    migrate.upgrade(empty_dsn, "0013")
    assert foreign_keys(empty_dsn) == FOREIGN_KEYS
    migrate.upgrade(empty_dsn, "0014")
    assert foreign_keys(empty_dsn) == {}
    migrate.downgrade(empty_dsn, "0013")
    assert foreign_keys(empty_dsn) == FOREIGN_KEYS
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE '%reference%'").fetchone()[0] == 0
    migrate.upgrade(empty_dsn)
    assert foreign_keys(empty_dsn) == {}


def test_derived_rows_after_store_update_and_delete_are_a_recount(config: Config):
    texts = [
        "Alice Johnson, Bob Stone, Carol King, Dan Brown and Erin Wu met Frank Ocean in Lisbon with Globex.",
        "Alice Johnson and Gina Park flew to Berlin; Bob Stone stayed in Lisbon.",
        "Carol King wrote to Dan Brown about Initech, Globex and Umbrella in Paris and Rome.",
    ]
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        ids = system.store_many([{"content": t, "tenant": "t"} for t in texts]).ids
        system.store("Gina Park met Alice Johnson.", tenant="other")
        edges, mentions, entities = derived(config.dsn, "t")
        assert (edges, entities) == recount(config.dsn, "t") and len(edges) > 30
        assert all(name is not None for name, _ in mentions)
        system.update(ids[0], content="Frank Ocean met Hana Sato and Carol King in Oslo.", tenant="t")
        system.delete(ids[1], tenant="t")
        edges, mentions, entities = derived(config.dsn, "t")
        assert (edges, entities) == recount(config.dsn, "t")
        assert "alice johnson" not in entities and "hana sato" in entities
        for memory_id in (ids[0], ids[2]):
            system.delete(memory_id, tenant="t")
        assert derived(config.dsn, "t") == ({}, {}, set())
        assert derived(config.dsn, "other")[2] == {"gina park", "alice johnson"}


def test_a_known_entity_is_read_not_rewritten_by_later_batches(config: Config):
    # insert_entities upserts only the names the tenant does not have yet: a stored entity keeps its row
    # version (no dead tuple, no row lock a concurrent batch would wait on), and the new mentions link to it
    def versions(conn: psycopg.Connection) -> dict[str, tuple[int, str]]:
        rows = conn.execute("SELECT norm_name, id, xmin::text FROM memoria.entities WHERE tenant = 't'").fetchall()
        return {name: (entity_id, xmin) for name, entity_id, xmin in rows}

    with MemorySystem(config, embedder=HashEmbedder()) as system:
        system.store_many([{"content": "Maya Novak met Jonas Berg in Lisbon.", "tenant": "t"}])
        with psycopg.connect(config.dsn) as conn:
            before = versions(conn)
        second = system.store_many(
            [{"content": "Jonas Berg and Maya Novak flew to Oslo.", "tenant": "t"},
             {"content": "Lisbon, then Oslo: Ines Duarte joined Jonas Berg.", "tenant": "t"}]
        ).ids  # fmt: skip
        with psycopg.connect(config.dsn) as conn:
            after = versions(conn)
            linked = conn.execute(
                "SELECT me.memory_id, e.norm_name FROM memoria.memory_entities me "
                "JOIN memoria.entities e ON e.tenant = me.tenant AND e.id = me.entity_id WHERE me.memory_id = ANY(%s)",
                (second,),
            ).fetchall()
    assert {"maya novak", "jonas berg", "lisbon"} <= set(before)
    assert {name: after[name] for name in before} == before  # same ids, same row versions
    assert {"oslo", "ines duarte"} <= set(after) - set(before)
    assert {(second[0], "jonas berg"), (second[0], "maya novak"), (second[1], "lisbon")} <= set(linked)
    edges, _, entities = derived(config.dsn, "t")
    assert (edges, entities) == recount(config.dsn, "t")


def as_app(conn: psycopg.Connection, tenant: str) -> None:
    conn.execute(f"SET ROLE {APP_ROLE}")
    conn.execute("SELECT set_config('memoria.tenant', %s, false)", (tenant,))


@pytest.fixture
def stored(config: Config) -> dict[str, int]:
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        memory = system.store("Maya Novak met Jonas Berg in Lisbon.", tenant="acme")
        system.store("Maya Novak met Jonas Berg in Lisbon.", tenant="globex")
        # an acme entity whose id is above every globex one: an edge runs from the smaller id (0017)
        system.store("Zoe Quist met Maya Novak.", tenant="acme")
    with psycopg.connect(config.dsn) as conn:
        ids = dict(conn.execute("SELECT tenant || ' ' || norm_name, id FROM memoria.entities").fetchall())
    return {"memory": memory, **ids}


# An edge's src_id is below its dst_id (0017's CHECK): a missing entity at src is a low id, at dst a high
# one, so that the reference, not the CHECK, is what refuses the row. The other tenant's Lisbon has an id
# between acme's Jonas Berg (its first) and Zoe Quist (its last).
@pytest.mark.parametrize(
    ("statement", "nobody"),
    [
        ("INSERT INTO memoria.memory_entities (tenant, entity_id, memory_id, memory_type) "
         "VALUES ('acme', %(own)s, %(memory)s + 1, 'general'), ('acme', %(missing)s, %(memory)s, 'general')", 10**12),
        ("INSERT INTO memoria.entity_edges (tenant, src_id, dst_id) VALUES ('acme', %(first)s, %(missing)s)", 10**12),
        ("INSERT INTO memoria.entity_edges (tenant, src_id, dst_id) VALUES ('acme', %(missing)s, %(last)s)", -1),
        ("UPDATE memoria.entity_edges SET dst_id = %(missing)s WHERE src_id = %(first)s AND dst_id = %(lisbon)s",
         10**12),
        ("UPDATE memoria.memory_entities SET entity_id = %(missing)s WHERE entity_id = %(own)s", 10**12),
        ("UPDATE memoria.entity_edges SET src_id = %(missing)s WHERE src_id = %(own)s AND dst_id = %(last)s", -1),
    ],
)  # fmt: skip
def test_a_reference_to_a_missing_or_foreign_entity_is_refused(stored, config, statement, nobody):
    messages = set()
    for missing in (stored["globex lisbon"], nobody):
        with psycopg.connect(config.dsn) as conn:
            as_app(conn, "acme")
            with pytest.raises(psycopg.errors.ForeignKeyViolation) as info:
                params = {
                    "own": stored["acme maya novak"], "lisbon": stored["acme lisbon"], "memory": stored["memory"],
                    "first": stored["acme jonas berg"], "last": stored["acme zoe quist"],
                }  # fmt: skip
                conn.execute(statement, {**params, "missing": missing})
            messages.add(info.value.diag.message_primary)
    assert len(messages) == 1  # another tenant's entity fails as one nobody has


def test_an_edge_is_stored_once_per_pair(stored, config):
    """The reverse of a stored pair is refused: the walks read an edge from both ends (0017)."""
    with psycopg.connect(config.dsn) as conn:
        as_app(conn, "acme")
        assert conn.execute(
            "SELECT weight FROM memoria.entity_edges WHERE src_id = %s AND dst_id = %s",
            (stored["acme jonas berg"], stored["acme lisbon"]),
        ).fetchone() == (1,)
        with pytest.raises(psycopg.errors.CheckViolation, match="entity_edges_one_row_per_pair"):
            conn.execute(
                "INSERT INTO memoria.entity_edges (tenant, src_id, dst_id) VALUES ('acme', %s, %s)",
                (stored["acme lisbon"], stored["acme jonas berg"]),
            )


def test_a_valid_reference_and_a_weight_change_pass(stored, config):
    with psycopg.connect(config.dsn) as conn:
        as_app(conn, "acme")
        conn.execute(
            "INSERT INTO memoria.entity_edges (tenant, src_id, dst_id) VALUES ('acme', %s, %s) "
            "ON CONFLICT (tenant, src_id, dst_id) DO UPDATE SET weight = memoria.entity_edges.weight + 1",
            (stored["acme lisbon"], stored["acme maya novak"]),
        )
        conn.execute("UPDATE memoria.entity_edges SET weight = weight + 1")
        conn.rollback()


def test_deleting_an_entity_deletes_its_mentions_and_edges(stored, config):
    entity = stored["acme jonas berg"]
    with psycopg.connect(config.dsn) as conn:
        as_app(conn, "acme")
        conn.execute("DELETE FROM memoria.entities WHERE id = %s", (entity,))
        left = conn.execute(
            "SELECT (SELECT count(*) FROM memoria.memory_entities WHERE entity_id = %(e)s), "
            "(SELECT count(*) FROM memoria.entity_edges WHERE src_id = %(e)s OR dst_id = %(e)s), "
            "(SELECT count(*) FROM memoria.entity_edges)",
            {"e": entity},
        ).fetchone()
        assert left[:2] == (0, 0) and left[2] > 0  # Maya Novak - Lisbon stays
        conn.rollback()
    with psycopg.connect(config.dsn) as conn:  # the other tenant's copy is untouched
        assert conn.execute("SELECT count(*) FROM memoria.memory_entities WHERE tenant = 'globex'").fetchone()[0] == 3


def test_a_referenced_entity_key_cannot_change(stored, config):
    with psycopg.connect(config.dsn) as conn:  # the owner (the app role may not update id)
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute("UPDATE memoria.entities SET id = id + 1000000 WHERE id = %s", (stored["acme lisbon"],))
        conn.rollback()
        conn.execute(
            "INSERT INTO memoria.entities (tenant, name, norm_name) VALUES ('acme', 'Nobody', 'nobody')"
        )  # unreferenced: its key may change
        conn.execute("UPDATE memoria.entities SET id = id + 1000000 WHERE norm_name = 'nobody'")
        conn.rollback()
