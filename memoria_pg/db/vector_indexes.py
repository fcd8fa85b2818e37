"""Per-tenant HNSW indexes: a large tenant's vectors get an HNSW graph of their own (migration 0015).

The vector worker searches a tenant's memories of a type exactly up to `vector_exact_max_rows` and with
HNSW above. There is no shared HNSW index (migration 0016 dropped the shards' one: every insert paid
for it and only large tenants read it, through a graph of which they owned a fraction). `sync` gives
each (tenant, memory type) above the bound a partial HNSW index on the type's partition,

    CREATE INDEX CONCURRENTLY memories_vec_<hash> ON memoria.memories_<type>
        USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)
        WHERE tenant = '<tenant>'

and records it in memoria.vector_indexes. The vector worker's HNSW statement (sql/workers/vector.sql)
names the tenant as a value, so its custom plan proves the predicate and the planner takes the
tenant's own graph; a tenant without one yet (grown past the bound since the last sync) is searched
exactly by the same statement (the covering index of 0004, then a sort): no recall lost, a cost that
grows with the tenant until the next sync. An index whose (tenant, type) has fallen below half the
bound (memories deleted, the tenant erased) is dropped, so a tenant hovering at the bound is not
rebuilt back and forth.

Built CONCURRENTLY (writes go on; a failed build leaves an invalid index, which the next sync drops and
builds again), never on the query path nor in a migration: `memoria-pg db vector-indexes` runs it
(after a bulk load, or from cron), `memoria-pg db upgrade` after migrating, `memoria-pg ingest` at the
end of its load, `memoria-pg serve` periodically, and MemorySystem's auto_migrate when it crosses
0016. One sync at a time per database (an advisory lock). The tenant is the one value written into SQL
text here: DDL takes no parameters, so it is quoted by psycopg (sql.Literal); the index and partition
names come from a hash and from the catalog, never from input.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Iterable

import psycopg
from psycopg import sql

from ..errors import SyncRunning
from .database import connect

PREFIX = "memories_vec_"
REGISTRY_SINCE = 15  # the schema revision (0015) that added memoria.vector_indexes
SHARED_HNSW_DROPPED = 16  # and the one (0016) that dropped the shards' shared HNSW index
# pg_try_advisory_lock key of a sync: one per database
_LOCK = "SELECT pg_try_advisory_lock(hashtextextended('memoria.vector_indexes', 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('memoria.vector_indexes', 0))"
# an HNSW build runs much faster while its graph fits in memory
BUILD_MAINTENANCE_WORK_MEM_MB = 256

_SIZES = """
SELECT d.tenant, d.memory_type, d.n_docs
FROM memoria.bm25_docs d
WHERE %(tenants)s::text[] IS NULL OR d.tenant = ANY(%(tenants)s::text[])
ORDER BY d.tenant, d.memory_type
"""
_RECORDED = """
SELECT v.tenant, v.memory_type, v.index_name,
       coalesce((SELECT i.indisvalid FROM pg_catalog.pg_index i
                 WHERE i.indexrelid = pg_catalog.to_regclass('memoria.' || pg_catalog.quote_ident(v.index_name))),
                false) AS usable
FROM memoria.vector_indexes v
WHERE %(tenants)s::text[] IS NULL OR v.tenant = ANY(%(tenants)s::text[])
"""
# the partition a memory type's rows live in: its own, or the default one
_PARTITION = """
SELECT coalesce(
    (SELECT c.relname::text FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'memoria.memories'::regclass AND c.relname = 'memories_' || %(memory_type)s),
    'memories_default')
"""
_RECORD = """
INSERT INTO memoria.vector_indexes (tenant, memory_type, index_name, rows_at_build)
VALUES (%(tenant)s, %(memory_type)s, %(index_name)s, %(rows)s)
ON CONFLICT (tenant, memory_type) DO UPDATE
    SET index_name = excluded.index_name, rows_at_build = excluded.rows_at_build, built_at = now()
"""
_FORGET = "DELETE FROM memoria.vector_indexes WHERE tenant = %(tenant)s AND memory_type = %(memory_type)s"


@dataclasses.dataclass(frozen=True)
class Action:
    """What sync does (or, dry, would do) for one (tenant, memory type)."""

    tenant: str
    memory_type: str
    rows: int  # the tenant's memories of the type now
    action: str  # "build" (none yet, or an unusable one), "drop" (below half the bound), "keep"
    index_name: str
    seconds: float | None = None  # how long the build or drop took (None: not done)

    def line(self) -> str:
        """What was done, as the CLI reports it."""
        return (
            f"{self.action} the vector index of tenant {self.tenant!r}, {self.memory_type} ({self.rows} memories) "
            f"in {self.seconds or 0:.1f}s"
        )


def index_name(tenant: str, memory_type: str) -> str:
    """The index of (tenant, memory type): a hash, so any tenant name gives a valid identifier."""
    return PREFIX + hashlib.sha256(f"{tenant}\x00{memory_type}".encode()).hexdigest()[:24]


def plan(conn: psycopg.Connection, min_rows: int, tenants: Iterable[str] | None = None) -> list[Action]:
    """What sync would do: a build for each (tenant, type) above `min_rows` memories without a usable
    index, a drop for each recorded one whose rows fell below half of it (or to none), a keep for the rest."""
    floor = max(1, min_rows // 2)
    wanted = None if tenants is None else sorted(set(tenants))
    sizes = {(t, mt): int(n) for t, mt, n in conn.execute(_SIZES, {"tenants": wanted}).fetchall()}
    recorded = {(t, mt): (name, bool(usable)) for t, mt, name, usable in conn.execute(_RECORDED, {"tenants": wanted})}
    actions = []
    for key in sorted(set(sizes) | set(recorded)):
        tenant, memory_type = key
        rows = sizes.get(key, 0)
        name, usable = recorded.get(key, (index_name(tenant, memory_type), False))
        if key in recorded and rows < floor:
            actions.append(Action(tenant, memory_type, rows, "drop", name))
        elif rows > min_rows or key in recorded:
            actions.append(Action(tenant, memory_type, rows, "keep" if usable else "build", name))
    return actions


def sync(
    dsn: str,
    min_rows: int,
    *,
    tenants: Iterable[str] | None = None,
    dry_run: bool = False,
    progress: Callable[[Action], None] | None = None,
) -> list[Action]:
    """Build the missing per-tenant HNSW indexes and drop those no longer needed (module docstring);
    `dsn`: a user that owns the memoria tables (the one that runs the migrations). With `min_rows`
    0 (vector_exact_max_rows 0: the vector worker never searches exactly) every (tenant, memory type)
    with a memory gets one."""
    with connect(dsn, autocommit=True) as conn:
        if not dry_run and not conn.execute(_LOCK).fetchone()[0]:  # type: ignore[index]
            raise SyncRunning(
                "another `memoria-pg db vector-indexes` is running on this database: try again when it ends"
            )
        try:
            actions = plan(conn, min_rows, tenants)
            if dry_run:
                return actions
            if any(a.action == "build" for a in actions):
                _enough_memory_to_build(conn)
            done, built_on = [], set()
            for action in actions:
                if action.action != "keep":
                    started = time.perf_counter()
                    if action.action == "build":
                        built_on.add(_build(conn, action))
                    else:
                        _drop(conn, action)
                    action = dataclasses.replace(action, seconds=time.perf_counter() - started)
                    if progress:
                        progress(action)
                done.append(action)
            for partition in sorted(built_on):
                # The planner takes a tenant's index by the tenant's estimated rows: right after a bulk
                # load (the usual moment of a build) the statistics may not know the tenant yet, and the
                # plan would stay an exact search until autovacuum's ANALYZE.
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier("memoria", partition)))
            return done
        finally:
            if not dry_run and not conn.closed:
                conn.execute(_UNLOCK)


def _build(conn: psycopg.Connection, action: Action) -> str:
    """Builds the action's index; returns the partition it is on."""
    partition: str = conn.execute(_PARTITION, {"memory_type": action.memory_type}).fetchone()[0]  # type: ignore[index]
    index = sql.Identifier("memoria", action.index_name)
    # an invalid leftover of a failed concurrent build (or a recorded index gone bad) goes first
    conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(index))
    conn.execute(
        sql.SQL(
            "CREATE INDEX CONCURRENTLY {name} ON {partition} USING hnsw (embedding vector_cosine_ops)"
            " WITH (m = 16, ef_construction = 64) WHERE tenant = {tenant}"
        ).format(
            name=sql.Identifier(action.index_name),
            partition=sql.Identifier("memoria", partition),
            tenant=sql.Literal(action.tenant),
        )
    )
    key = {"tenant": action.tenant, "memory_type": action.memory_type}
    conn.execute(_RECORD, {**key, "index_name": action.index_name, "rows": action.rows})
    return partition


def _enough_memory_to_build(conn: psycopg.Connection) -> None:
    """maintenance_work_mem of this session raised to BUILD_MAINTENANCE_WORK_MEM_MB, if lower."""
    mem_mb = int(conn.execute("SELECT pg_size_bytes(current_setting('maintenance_work_mem')) / 1048576").fetchone()[0])  # type: ignore[index]
    if mem_mb < BUILD_MAINTENANCE_WORK_MEM_MB:
        conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (f"{BUILD_MAINTENANCE_WORK_MEM_MB}MB",))


def _drop(conn: psycopg.Connection, action: Action) -> None:
    conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier("memoria", action.index_name)))
    conn.execute(_FORGET, {"tenant": action.tenant, "memory_type": action.memory_type})
