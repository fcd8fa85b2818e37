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
end of its load, `memoria-pg serve` periodically, MemorySystem's auto_migrate when it crosses 0016,
and a MemorySystem's IndexKeeper in the background after a write that took a tenant past the bound
(Config.vector_index_auto). One sync at a time per database (an advisory lock). The tenant is the one
value written into SQL text here: DDL takes no parameters, so it is quoted by psycopg (sql.Literal); the
index and partition names come from a hash and from the catalog, never from input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import psycopg
from psycopg import sql

from ..errors import SyncRunning
from .database import Database, connect

PREFIX = "memories_vec_"
REGISTRY_SINCE = 15  # the schema revision (0015) that added memoria.vector_indexes
SHARED_HNSW_DROPPED = 16  # and the one (0016) that dropped the shards' shared HNSW index
log = logging.getLogger(__name__)
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
    # "build" (none yet, or an unusable one), "drop" (below half the bound, or its place under the cap
    # taken), "keep", "skip" (above the bound, but the memory type holds its cap of larger tenants' indexes)
    action: str
    index_name: str
    seconds: float | None = None  # how long the build or drop took (None: not done)

    def line(self) -> str:
        """What was done, as the CLI reports it."""
        if self.action == "skip":
            return (
                f"no vector index for tenant {self.tenant!r}, {self.memory_type} ({self.rows} memories): the memory "
                "type holds vector_index_max_per_type indexes of larger tenants; it is searched exactly"
            )
        return (
            f"{self.action} the vector index of tenant {self.tenant!r}, {self.memory_type} ({self.rows} memories) "
            f"in {self.seconds or 0:.1f}s"
        )


def index_name(tenant: str, memory_type: str) -> str:
    """The index of (tenant, memory type): a hash, so any tenant name gives a valid identifier."""
    return PREFIX + hashlib.sha256(f"{tenant}\x00{memory_type}".encode()).hexdigest()[:24]


def plan(
    conn: psycopg.Connection, min_rows: int, tenants: Iterable[str] | None = None, *, max_per_type: int = 0
) -> list[Action]:
    """What sync would do: a build for each (tenant, type) above `min_rows` memories without a usable
    index, a drop for each recorded one whose rows fell below half of it (or to none), a keep for the rest.
    With `max_per_type` (Config.vector_index_max_per_type; 0: no limit), a memory type's partition holds
    at most that many, the largest tenants' (_capped)."""
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
    if max_per_type <= 0:
        return actions
    others = [] if wanted is None else _indexed_elsewhere(conn, wanted)
    return _capped(actions, set(recorded) | {(a.tenant, a.memory_type) for a in others}, max_per_type, others)


# Every partial index on a partition costs each insert into it a predicate check and an index open, and
# each HNSW plan there a predicate proof, whichever tenant the row or the query is for (docs/
# measurements.md, "Many tenants' own indexes on one partition"): Config.vector_index_max_per_type.
SWAP_FACTOR = 2  # a tenant without an index takes the place of an indexed one with under 1/2 its rows
_INDEXED_ELSEWHERE = """
SELECT v.tenant, v.memory_type, coalesce(d.n_docs, 0), v.index_name
FROM memoria.vector_indexes v
LEFT JOIN memoria.bm25_docs d ON d.tenant = v.tenant AND d.memory_type = v.memory_type
WHERE NOT v.tenant = ANY(%(tenants)s::text[])
"""


def _indexed_elsewhere(conn: psycopg.Connection, tenants: list[str]) -> list[Action]:
    """The recorded indexes of the tenants a sync limited to `tenants` does not plan for ("keep"):
    they hold places under the cap too, and one may give its place to a larger tenant."""
    return [
        Action(tenant, memory_type, int(rows), "keep", name)
        for tenant, memory_type, rows, name in conn.execute(_INDEXED_ELSEWHERE, {"tenants": tenants}).fetchall()
    ]


def _capped(actions: list[Action], recorded: set[tuple[str, str]], cap: int, others: list[Action]) -> list[Action]:
    """`actions` with at most `cap` indexes per memory type. A recorded index holds its place (a drop
    aside); a (tenant, type) without one is built, largest first, while there is room, and otherwise
    left searched exactly ("skip"), unless it has more than SWAP_FACTOR times the rows of the smallest
    indexed tenant, whose place it then takes (that one's "drop", its "build"): the largest tenants get
    the indexes, and tenants of about one size do not trade places back and forth. Above the cap (lowered
    since the builds), the smallest are dropped. `others`: the indexes of tenants a limited sync does not
    plan for; one of them appears in the result only if it is dropped."""
    decided: dict[tuple[str, str], Action] = {}
    pool = [*actions, *others]
    for memory_type in sorted({a.memory_type for a in pool}):
        group = {a.tenant: a for a in pool if a.memory_type == memory_type}
        held = sorted(
            (a.rows, a.tenant) for a in group.values() if a.action != "drop" and (a.tenant, memory_type) in recorded
        )
        while len(held) > cap:
            _, tenant = held.pop(0)
            decided[(tenant, memory_type)] = dataclasses.replace(group[tenant], action="drop")
        new = [a for a in group.values() if a.action == "build" and (a.tenant, memory_type) not in recorded]
        for a in sorted(new, key=lambda a: (-a.rows, a.tenant)):
            if len(held) >= cap and held and a.rows > SWAP_FACTOR * held[0][0]:
                _, tenant = held.pop(0)
                decided[(tenant, memory_type)] = dataclasses.replace(group[tenant], action="drop")
            if len(held) >= cap:
                decided[(a.tenant, memory_type)] = dataclasses.replace(a, action="skip")
                continue
            held = sorted([*held, (a.rows, a.tenant)])
    out = [decided.get((a.tenant, a.memory_type), a) for a in actions]
    return out + [decided[(a.tenant, a.memory_type)] for a in others if (a.tenant, a.memory_type) in decided]


def sync(
    dsn: str,
    min_rows: int,
    *,
    tenants: Iterable[str] | None = None,
    dry_run: bool = False,
    progress: Callable[[Action], None] | None = None,
    connected: Callable[[psycopg.Connection], None] | None = None,
    max_per_type: int = 0,
) -> list[Action]:
    """Build the missing per-tenant HNSW indexes and drop those no longer needed (module docstring);
    `dsn`: a user that owns the memoria tables (the one that runs the migrations). With `min_rows`
    0 (vector_exact_max_rows 0: the vector worker never searches exactly) every (tenant, memory type)
    with a memory gets one; `max_per_type` (Config.vector_index_max_per_type, 0: no limit) caps them
    per memory type (plan). `connected` is handed the sync's connection first (IndexKeeper cancels a
    build through it)."""
    with connect(dsn, autocommit=True) as conn:
        if connected:
            connected(conn)
        if not dry_run and not conn.execute(_LOCK).fetchone()[0]:  # type: ignore[index]
            raise SyncRunning(
                "another `memoria-pg db vector-indexes` is running on this database: try again when it ends"
            )
        try:
            actions = plan(conn, min_rows, tenants, max_per_type=max_per_type)
            if dry_run:
                return actions
            if any(a.action == "build" for a in actions):
                _enough_memory_to_build(conn)
            done, built_on = _carry_out(conn, actions, progress)
            for partition in sorted(built_on):
                # The planner takes a tenant's index by the tenant's estimated rows: right after a bulk
                # load (the usual moment of a build) the statistics may not know the tenant yet, and the
                # plan would stay an exact search until autovacuum's ANALYZE.
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier("memoria", partition)))
            return done
        finally:
            if not dry_run and not conn.closed:
                conn.execute(_UNLOCK)


def _carry_out(
    conn: psycopg.Connection, actions: list[Action], progress: Callable[[Action], None] | None
) -> tuple[list[Action], set[str]]:
    """The plan's builds and drops, the drops first (a place under the cap is freed before it is taken):
    the actions in plan order, each timed, and the partitions built on."""
    done, built_on = list(actions), set()
    for k in sorted(range(len(done)), key=lambda k: done[k].action != "drop"):
        action = done[k]
        if action.action in ("build", "drop"):
            started = time.perf_counter()
            if action.action == "build":
                built_on.add(_build(conn, action))
            else:
                _drop(conn, action)
            action = done[k] = dataclasses.replace(action, seconds=time.perf_counter() - started)
        if progress and action.action != "keep":
            progress(action)
    return done, built_on


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


# The (tenant, memory type)s of one tenant above the bound, with the index each would have: read in the
# tenant's transaction (bm25_docs under row-level security; the catalog for the index, since the app
# role may not read memoria.vector_indexes).
_GROWN = """
SELECT d.memory_type FROM memoria.bm25_docs d
WHERE d.tenant = current_setting('memoria.tenant') AND d.n_docs > %(bound)s
ORDER BY d.memory_type
"""
_USABLE = """
SELECT n.name FROM unnest(%(names)s::text[]) AS n(name)
JOIN pg_catalog.pg_index i ON i.indexrelid = pg_catalog.to_regclass('memoria.' || pg_catalog.quote_ident(n.name))
WHERE i.indisvalid
"""


MAX_CHECKS_PER_WRITE = 64  # tenants IndexKeeper checks after one write call (about 0.3 ms each)
REMEMBERED_TENANTS = 10_000  # IndexKeeper forgets its checks older than every_s past that many tenants


class IndexKeeper:
    """A library's own sync (Config.vector_index_auto): once a write takes a (tenant, memory type) past
    `bound` memories and it has no usable index of its own, `sync` runs for that tenant in a background
    thread, so a deployment of the library alone needs no cron for it (`memoria-pg serve` and
    `memoria-pg ingest` sync by themselves too).

    `wrote(tenants)` is called after each write with the tenants it touched: each is checked (one small
    statement in its transaction, nothing beside a batch's work; after a load across more than
    MAX_CHECKS_PER_WRITE tenants, that many, the least recently checked); after a single store (`throttled`), at
    most once per `every_s` seconds per tenant, so a stream of them costs a statement a minute per
    tenant and its index follows within a minute of the crossing. Builds run one at a time,
    in the order the tenants crossed. Another sync holding the database's lock (an administrator's, a
    server's) makes it retry that tenant at its next check; a DSN that may not build indexes (not the
    tables' owner) turns it off, with one warning. `close` cancels a build under way (its invalid
    leftover is dropped and built again by the next sync) and waits for the thread.
    """

    def __init__(self, db: Database, dsn: str, bound: int, *, every_s: float = 60.0, max_per_type: int = 0) -> None:
        self.db, self.dsn, self.bound, self.every_s = db, dsn, bound, every_s
        self.max_per_type = max_per_type
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: list[str] = []
        self._checked: dict[str, float] = {}
        self._forget_at = REMEMBERED_TENANTS  # _checked's size that makes wrote() drop its stale entries
        self._skipped: set[str] = set()  # tenants left without an index by the cap: checked as after a single store
        self._conn: psycopg.Connection | None = None
        self._thread: threading.Thread | None = None
        self._paused = 0  # explicit syncs of this process under way (paused)
        self._busy = False  # a sync of the keeper's under way
        self.closed = False
        self.enabled = True
        self.built: list[Action] = []  # what it did, for tests and logs

    def wrote(self, tenants: Iterable[str] | None, *, throttled: bool = False) -> None:
        """After a write: queue the tenants that crossed the bound and have no index (never raises:
        the write itself succeeded; a failed check is logged and the tenant checked again later)."""
        if not self.enabled or self.closed or tenants is None:
            return
        now = time.monotonic()
        wait = self.every_s if throttled else 0.0
        with self._lock:
            due = [
                t
                for t in tenants
                if now - self._checked.get(t, -math.inf) >= (self.every_s if t in self._skipped else wait)
                and t not in self._queue
            ]
            # a load across many tenants: those checked longest ago (or never) first, the rest next time
            due = sorted(due, key=lambda t: self._checked.get(t, -math.inf))[:MAX_CHECKS_PER_WRITE]
            for tenant in due:
                self._checked[tenant] = now
            if len(self._checked) > self._forget_at:
                self._forget_checks(now)
        for tenant in due:
            try:
                missing = self._missing(tenant)
            except Exception as exc:  # a dropped database, a restart: the next write checks again
                log.debug("vector index check of tenant %r failed: %s", tenant, exc)
                with self._lock:
                    self._checked.pop(tenant, None)
                continue
            if missing:
                self._enqueue(tenant)

    def _forget_checks(self, now: float) -> None:
        """Drops the checks of more than every_s ago (under the lock): one that old throttles nothing, and
        a process that writes for ever more tenants keeps no entry per tenant it ever saw."""
        stale = [t for t, at in self._checked.items() if now - at > self.every_s]
        for tenant in stale:
            del self._checked[tenant]
            self._skipped.discard(tenant)
        # the next pass once the entries have doubled: a burst of recent tenants costs no scan per write
        self._forget_at = max(REMEMBERED_TENANTS, 2 * len(self._checked))

    def _missing(self, tenant: str) -> list[str]:
        with self.db.transaction(tenant) as conn:
            types = [r[0] for r in conn.execute(_GROWN, {"bound": self.bound}).fetchall()]
            if not types:
                return []
            names = {index_name(tenant, t): t for t in types}
            usable = {r[0] for r in conn.execute(_USABLE, {"names": list(names)}).fetchall()}
        return [t for name, t in names.items() if name not in usable]

    def _enqueue(self, tenant: str) -> None:
        with self._lock:
            if self.closed or tenant in self._queue:
                return
            self._queue.append(tenant)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memoria-vector-indexes", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while (not self._queue or self._paused) and not self.closed:
                    self._wake.wait()
                if self.closed:
                    return
                tenant = self._queue[0]
                self._busy = True
            try:
                done = sync(
                    self.dsn, self.bound, tenants=[tenant], connected=self._connected, max_per_type=self.max_per_type
                )
                self.built.extend(a for a in done if a.action != "keep")
                with self._lock:
                    if any(a.action == "skip" for a in done):
                        self._skipped.add(tenant)
                    else:
                        self._skipped.discard(tenant)
                for a in done:
                    if a.action != "keep":  # a skip is checked again at the tenant's next write: not said each time
                        log.log(logging.DEBUG if a.action == "skip" else logging.INFO, "%s", a.line())
            except SyncRunning:
                with self._lock:  # another sync's round: checked again at the tenant's next write
                    self._checked.pop(tenant, None)
            except psycopg.errors.InsufficientPrivilege as exc:
                log.warning("per-tenant vector indexes are not built by this library: %s", exc.diag.message_primary)
                self.enabled = False
            except Exception as exc:  # cancelled by close, a dropped database, a restart: checked again later
                if not self.closed:
                    log.warning("the vector index of tenant %r was not built: %s", tenant, exc)
                with self._lock:
                    self._checked.pop(tenant, None)
            finally:
                with self._lock:
                    self._conn = None
                    self._busy = False
                    if self._queue and self._queue[0] == tenant:
                        self._queue.pop(0)
                    self._wake.notify_all()

    def _connected(self, conn: psycopg.Connection) -> None:
        with self._lock:
            self._conn = conn
            cancelled = self.closed
        if cancelled:
            conn.cancel_safe()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No build of the keeper's while the block runs (MemorySystem.sync_vector_indexes: its own sync
        would otherwise find the lock taken); waits for a build under way to end first."""
        with self._lock:
            self._paused += 1
            while self._busy and not self.closed:
                self._wake.wait()
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1
                self._wake.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Until every queued build is done (tests; a bulk loader that wants its indexes now)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._queue:
                    return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            conn, thread = self._conn, self._thread
            self._wake.notify_all()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.cancel_safe()
        if thread is not None:
            thread.join()
