"""Entity references checked once per statement, not once per row: the foreign keys to entities become triggers.

memory_entities (tenant, entity_id) and entity_edges (tenant, src_id), (tenant, dst_id) referenced
memoria.entities (tenant, id) through foreign keys, ON DELETE CASCADE. A foreign key checks every
inserted row with its own query (an after-row trigger: an index probe and a row lock each); an
abstract's ingestion inserts about 12 mentions and 62 co-occurrence edges, so 136 such checks, and they
were 3.3 of the 4.6 ms of server CPU sql/ingest/insert_entities.sql cost per SciFact abstract (70% of
that statement, half of the whole ingestion: results/ingest/, benchmarks/ingest_explain.py --setup).

The same guarantees, kept by statement-level triggers over the statement's transition tables:

    after INSERT on memory_entities / entity_edges (once per statement)
        every distinct (tenant, entity id) the new rows reference exists in memoria.entities, and is
        locked FOR KEY SHARE until the transaction ends, as a foreign key's check locks it (a concurrent
        delete of the entity waits, then removes the new rows with it, see below); one index probe per
        distinct entity, not per row. A missing one raises foreign_key_violation (SQLSTATE 23503) with
        the message the foreign key gave, naming the former constraint; under row-level security
        another tenant's entity is missing exactly as an id nobody has (no existence oracle: SECURITY.md)
    after UPDATE OF the key columns (per row, and only when a key changes: never in the library,
        whose only update of these tables is entity_edges.weight)
        the same check for the new key
    after DELETE on entities (once per statement)
        the mentions and edges of the deleted entities are deleted (what ON DELETE CASCADE did). The
        library never relies on it (memoria.remove_derived deletes an entity only when no memory
        mentions it, after subtracting its edges; erasing a tenant deletes children first)
    after UPDATE OF tenant, id on entities (per row, when the key changes: the app role may update
        neither)
        refused while a mention or an edge references the old key (the foreign keys' NO ACTION)

The trigger functions are SECURITY INVOKER (they run as the writer, under row-level security, as the
rows it wrote are), with a fixed search_path. Under Citus (docs/scale-out.md) triggers on distributed
tables need citus.enable_unsafe_triggers and transition tables are not supported there: a Citus
deployment keeps the foreign keys (this revision's downgrade restores them exactly).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# (table, constraint, key columns, whose trigger function)
FOREIGN_KEYS = (
    ("memory_entities", "memory_entities_entity_id_fkey", "tenant, entity_id"),
    ("entity_edges", "entity_edges_src_id_fkey", "tenant, src_id"),
    ("entity_edges", "entity_edges_dst_id_fkey", "tenant, dst_id"),
)

# The entity keys a statement's new rows reference, per table (from the transition table `added`).
KEYS = {
    "memory_entities": "SELECT DISTINCT n.tenant, n.entity_id FROM added n",
    "entity_edges": "SELECT n.tenant, n.src_id FROM added n UNION SELECT n.tenant, n.dst_id FROM added n",
}
CONSTRAINT = {"memory_entities": "memory_entities_entity_id_fkey", "entity_edges": "entity_edges_src_id_fkey"}


def _check_function(table: str) -> str:
    # `wanted` distinct keys; `found` of them exist and are now locked. Locking clauses are not allowed
    # with aggregates, hence the count over a locking subquery.
    return f"""
CREATE FUNCTION memoria.{table}_reference_entities() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    wanted bigint;
    found_n bigint;
    missing record;
BEGIN
    WITH k (tenant, id) AS MATERIALIZED ({KEYS[table]})
    SELECT (SELECT count(*) FROM k),
           (SELECT count(*) FROM (SELECT 1 FROM memoria.entities e JOIN k ON e.tenant = k.tenant AND e.id = k.id
                                  FOR KEY SHARE OF e) l)
    INTO wanted, found_n;
    IF found_n < wanted THEN
        SELECT k.tenant, k.id INTO missing FROM ({KEYS[table]}) k (tenant, id)
        WHERE NOT EXISTS (SELECT 1 FROM memoria.entities e WHERE e.tenant = k.tenant AND e.id = k.id) LIMIT 1;
        RAISE foreign_key_violation USING
            MESSAGE = 'insert or update on table "{table}" violates foreign key constraint "{CONSTRAINT[table]}"',
            DETAIL = format('Key (tenant, id)=(%s, %s) is not present in table "entities".',
                            missing.tenant, missing.id);
    END IF;
    RETURN NULL;
END
$fn$;
"""


# A changed key of one row (UPDATE OF its key columns): the statement-level function over a one-row set.
def _update_function(table: str) -> str:
    columns = "NEW.entity_id" if table == "memory_entities" else "NEW.src_id), (NEW.tenant, NEW.dst_id"
    return f"""
CREATE FUNCTION memoria.{table}_reference_entities_row() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    missing record;
BEGIN
    FOR missing IN SELECT k.tenant, k.id FROM (VALUES (NEW.tenant, {columns})) k (tenant, id) LOOP
        PERFORM 1 FROM memoria.entities e WHERE e.tenant = missing.tenant AND e.id = missing.id FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE foreign_key_violation USING
                MESSAGE = 'insert or update on table "{table}" violates foreign key constraint "{CONSTRAINT[table]}"',
                DETAIL = format('Key (tenant, id)=(%s, %s) is not present in table "entities".',
                            missing.tenant, missing.id);
        END IF;
    END LOOP;
    RETURN NULL;
END
$fn$;
"""


ENTITY_FUNCTIONS = r"""
CREATE FUNCTION memoria.entities_delete_references() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    DELETE FROM memoria.memory_entities me USING gone g WHERE me.tenant = g.tenant AND me.entity_id = g.id;
    DELETE FROM memoria.entity_edges ed USING gone g WHERE ed.tenant = g.tenant AND ed.src_id = g.id;
    DELETE FROM memoria.entity_edges ed USING gone g WHERE ed.tenant = g.tenant AND ed.dst_id = g.id;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION memoria.entities_keep_referenced_keys() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM memoria.memory_entities me WHERE me.tenant = OLD.tenant AND me.entity_id = OLD.id) THEN
        RAISE foreign_key_violation USING
            MESSAGE = 'update or delete on table "entities" violates foreign key constraint '
                      '"memory_entities_entity_id_fkey" on table "memory_entities"';
    END IF;
    IF EXISTS (SELECT 1 FROM memoria.entity_edges ed WHERE ed.tenant = OLD.tenant AND ed.src_id = OLD.id)
       OR EXISTS (SELECT 1 FROM memoria.entity_edges ed WHERE ed.tenant = OLD.tenant AND ed.dst_id = OLD.id) THEN
        RAISE foreign_key_violation USING
            MESSAGE = 'update or delete on table "entities" violates foreign key constraint '
                      '"entity_edges_src_id_fkey" on table "entity_edges"';
    END IF;
    RETURN NULL;
END
$fn$;
"""

TRIGGERS = r"""
CREATE TRIGGER memory_entities_reference_entities AFTER INSERT ON memoria.memory_entities
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memoria.memory_entities_reference_entities();
CREATE TRIGGER memory_entities_reference_entities_row AFTER UPDATE OF tenant, entity_id ON memoria.memory_entities
    FOR EACH ROW WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.entity_id IS DISTINCT FROM NEW.entity_id)
    EXECUTE FUNCTION memoria.memory_entities_reference_entities_row();
CREATE TRIGGER entity_edges_reference_entities AFTER INSERT ON memoria.entity_edges
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memoria.entity_edges_reference_entities();
CREATE TRIGGER entity_edges_reference_entities_row AFTER UPDATE OF tenant, src_id, dst_id ON memoria.entity_edges
    FOR EACH ROW WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.src_id IS DISTINCT FROM NEW.src_id
                       OR OLD.dst_id IS DISTINCT FROM NEW.dst_id)
    EXECUTE FUNCTION memoria.entity_edges_reference_entities_row();
CREATE TRIGGER entities_delete_references AFTER DELETE ON memoria.entities
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION memoria.entities_delete_references();
CREATE TRIGGER entities_keep_referenced_keys AFTER UPDATE OF tenant, id ON memoria.entities
    FOR EACH ROW WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION memoria.entities_keep_referenced_keys();
"""

FUNCTIONS = (
    "memoria.memory_entities_reference_entities()",
    "memoria.memory_entities_reference_entities_row()",
    "memoria.entity_edges_reference_entities()",
    "memoria.entity_edges_reference_entities_row()",
    "memoria.entities_delete_references()",
    "memoria.entities_keep_referenced_keys()",
)
TRIGGER_NAMES = (
    ("memory_entities", "memory_entities_reference_entities"),
    ("memory_entities", "memory_entities_reference_entities_row"),
    ("entity_edges", "entity_edges_reference_entities"),
    ("entity_edges", "entity_edges_reference_entities_row"),
    ("entities", "entities_delete_references"),
    ("entities", "entities_keep_referenced_keys"),
)


def upgrade() -> None:
    for table, name, _ in FOREIGN_KEYS:
        op.execute(f"ALTER TABLE memoria.{table} DROP CONSTRAINT {name}")
    for table in KEYS:
        op.execute(_check_function(table))
        op.execute(_update_function(table))
    op.execute(ENTITY_FUNCTIONS)
    op.execute(TRIGGERS)
    for signature in FUNCTIONS:  # trigger functions: nobody calls them directly
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")


def downgrade() -> None:
    for table, name in TRIGGER_NAMES:
        op.execute(f"DROP TRIGGER {name} ON memoria.{table}")
    for signature in FUNCTIONS:
        op.execute(f"DROP FUNCTION {signature}")
    for table, name, columns in FOREIGN_KEYS:
        op.execute(
            f"ALTER TABLE memoria.{table} ADD CONSTRAINT {name} FOREIGN KEY ({columns}) "
            "REFERENCES memoria.entities (tenant, id) ON DELETE CASCADE"
        )
