"""The one place that connects: the connection pool, server capabilities, tenant transactions."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import datetime as dt
import functools
import json
import logging
import re
import select
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import numpy as np
import orjson
import psycopg
import psycopg_pool
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader
from psycopg.types.json import set_json_loads

from ..errors import ExtensionMissing, PoolTimeout, SchemaError, ServerError, first_line
from .budget import QueryBudget, current_budget
from .pipeline import answered, tenant_block
from .resources import LEGACY_VERSION_TABLE, VERSION_TABLE, head_revision, known_revisions

APP_ROLE = "memoria_app"
# The tenant write lock: a transaction-level advisory lock on (TENANT_LOCK_CLASS, hashtext(tenant)).
# Ingestion and the best-effort writes of a query (access statistics, traces) take it shared, so they
# run side by side; a lifecycle write (update, invalidate, delete, forget, erase) takes it exclusive,
# so it runs alone in its tenant. See set_tenant.
TENANT_LOCK_CLASS = 0x6D656D6F  # 'memo'; the two-key form keeps it apart from one-key advisory locks
TENANT_LOCKS = {"shared": "pg_advisory_xact_lock_shared", "exclusive": "pg_advisory_xact_lock"}


def tenant_lock_call(kind: str, tenant_sql: str) -> str:
    """The SQL call that takes the tenant write lock of the tenant `tenant_sql` evaluates to."""
    return f"{TENANT_LOCKS[kind]}({TENANT_LOCK_CLASS}, hashtext({tenant_sql}))"


_log = logging.getLogger(__name__)
RENEW_AFTER_S = 0.01  # a budgeted transaction's statement timeout is renewed once it is older
SECRET_KEYS = ("password", "sslpassword")  # conninfo keys whose values redact_dsn masks
P = ParamSpec("P")
R = TypeVar("R")
VECTOR_HELP = (
    "memoria-pg needs the pgvector extension (>= 0.8): install it on the server "
    "(Debian/Ubuntu: postgresql-NN-pgvector; managed services: enable 'vector'), "
    "or run without a DSN to use the embedded server, which ships it"
)


@dataclass(frozen=True)
class Capabilities:
    server_version: str
    vector: str | None  # installed version, None when not installed
    vector_available: bool
    pg_trgm: bool
    age: str | None  # installed AGE version
    age_available: bool
    schema_ready: bool
    # The revision memoria-pg's migrations recorded (db/migrate.VERSION_TABLE; None: not recorded there)
    schema_revision: str | None = None

    @property
    def graph_backend(self) -> str:
        return "age" if self.age and self.schema_ready else "sql"


def scalar(conn: psycopg.Connection, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Any:
    """The first column of the one row a statement returns."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise ServerError(f"the statement returned no row: {query[:80]}")
    return row[0]


def detect_capabilities(conn: psycopg.Connection) -> Capabilities:
    rows = conn.execute(
        "SELECT a.name, a.installed_version FROM pg_available_extensions a WHERE a.name IN ('vector', 'pg_trgm', 'age')"
    ).fetchall()
    available = {name: version for name, version in rows}
    version = scalar(conn, "SHOW server_version")
    schema = scalar(conn, "SELECT to_regclass('memoria.memories') IS NOT NULL")
    revision = schema_revision(conn) if schema else None
    graph = False
    if available.get("age"):
        graph = scalar(conn, "SELECT to_regclass('memoria_graph.\"Entity\"') IS NOT NULL")
    return Capabilities(
        server_version=version,
        vector=available.get("vector"),
        vector_available="vector" in available,
        pg_trgm=bool(available.get("pg_trgm")) or "pg_trgm" in available,
        age=available.get("age") if graph else None,
        age_available="age" in available,
        schema_ready=bool(schema),
        schema_revision=revision,
    )


def schema_revision(conn: psycopg.Connection) -> str | None:
    """The schema revision memoria-pg's migrations recorded (None: none; migrate.current). Without
    Alembic: this library's revisions are told by their migrations' file names (known_revisions), so
    that a revision another application recorded in public.alembic_version does not count."""
    known = known_revisions()
    for table in (VERSION_TABLE, LEGACY_VERSION_TABLE):
        if scalar(conn, "SELECT to_regclass(%s)", (f"public.{table}",)) is None:
            continue
        rows = conn.execute(sql.SQL("SELECT version_num FROM public.{}").format(sql.Identifier(table))).fetchall()
        ours = [str(r[0]) for r in rows if table == VERSION_TABLE or r[0] in known]
        if ours:
            return ours[0]
    return None


def schema_revision_note(revision: str | None) -> str | None:
    """What to tell a user whose database schema is not at this library's revision (None: it is, or
    none is recorded)."""
    head = head_revision()
    if revision is None or revision == head:
        return None
    if revision < head:
        return (
            f"the database schema is at revision {revision}, older than this library's {head}: run "
            "`memoria-pg db upgrade` (or MemorySystem.migrate()). Until then what the newer revisions "
            "changed is missing or differs: from 0021 on, a query's BM25 terms are Snowball stems, which "
            "an older database's postings are not, so BM25 finds fewer memories"
        )
    return (
        f"the database schema is at revision {revision}, newer than this library's {head}: upgrade "
        "memoria-pg to the version that migrated it (an older library may misread what the newer revisions changed)"
    )


def require_vector(caps: Capabilities) -> None:
    if not caps.vector_available:
        raise ExtensionMissing(VECTOR_HELP)


class Database:
    """A psycopg pool whose connections run as the row-level-security role memoria_app."""

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 2,
        max_size: int = 10,
        timeout: float = 10.0,
        statement_timeout_ms: int = 30000,
        ef_search: int = 100,
        capabilities: Capabilities | None = None,
    ) -> None:
        """`capabilities`: those of the primary this server is a hot standby of (db/replicas.py): the
        server is not probed, and the pool opens without waiting for it (it may be down)."""
        self.dsn = dsn
        self.timeout = timeout
        self._statement_timeout_ms = statement_timeout_ms
        self._ef_search = ef_search
        standby = capabilities is not None
        self.capabilities = capabilities if capabilities is not None else _probe(dsn)
        self._sweeping = threading.Lock()  # held while a sweep of the pool runs (_sweep)
        # Where the read blocks of `transaction(..., background_end=True)` end (their Sync, then the
        # connection's return to the pool) once their body has read what it needs.
        self._enders = cf.ThreadPoolExecutor(max_workers=2, thread_name_prefix="memoria-block-end")
        self._ending: set[cf.Future[None]] = set()  # the block ends submitted and not done (settle)
        self._ending_lock = threading.Lock()
        self.pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            configure=self._configure,
            check=self._check,
            name="memoria-standby" if standby else "memoria",
            kwargs={"connect_timeout": 5} if standby else None,
        )
        self.pool.open(wait=not standby, timeout=max(timeout, 10.0))

    def _configure(self, conn: psycopg.Connection) -> None:
        conn.autocommit = True
        register_vector(conn)
        register_readable_times(conn)
        set_json_loads(json_loads, conn)
        if self.capabilities.age:
            # A no-op when the server preloads AGE; needed (and allowed) before dropping privileges.
            with contextlib.suppress(psycopg.Error):
                conn.execute("LOAD 'age'")
        conn.execute(f"SET ROLE {APP_ROLE}")
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (str(self._statement_timeout_ms),))
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(self._ef_search),))
        # Worker statements filter shards with "%(memory_type)s IS NULL OR memory_type = ...": only a
        # custom plan prunes partitions; a cached generic plan walked every partition's HNSW index
        # (many times slower: docs/measurements.md, "Why these defaults"; a custom plan is also the only one that
        # takes a tenant's own HNSW index, db/vector_indexes.py), and psycopg prepares statements after
        # a few executions.
        conn.execute("SET plan_cache_mode = force_custom_plan")
        # No JIT: every statement here is bounded (a few ms), but estimates can multiply past
        # jit_above_cost (the graph walk: reached entities x memory types x the per-entity limit, with
        # memoria.memory_types, a few rows autovacuum never analyzes, guessed at 1,200) and the
        # compilation then costs far more than the work (docs/measurements.md, "Why these defaults").
        conn.execute("SET jit = off")
        # Without iterative scans an HNSW scan stops after ef_search tuples: a worker limit above
        # ef_search, or a tenant filter, would silently return fewer rows (vector.sql re-sorts).
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false)")
        conn.execute(
            "SET search_path = memoria, public, ag_catalog"
            if self.capabilities.age
            else "SET search_path = memoria, public"
        )

    def _check(self, conn: psycopg.Connection) -> None:
        """The liveness probe of every checkout (a connection it raises on is replaced), without a
        round trip when the connection has nothing to say: a backend that went away while the
        connection sat in the pool (terminated, restarted server) has sent its FATAL error and closed
        the socket, so the socket is readable; only then is a statement sent, and it raises.
        An idle, healthy connection's socket has nothing to read. (The round trip per checkout this
        replaces was 6-8 per V4 query.) The role is asserted by the borrower: `connection`'s
        SET ROLE, or the first statement of a tenant transaction (set_tenant, which the scheduler's workers run too)."""
        conn.autocommit = True
        if conn.closed or conn.broken:
            raise psycopg.OperationalError("the pooled connection is closed")
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
        if readable:
            try:
                conn.execute("SELECT 1")
            except psycopg.OperationalError:
                self._sweep()
                raise

    def _sweep(self) -> None:
        """Check every idle connection of the pool now, in a background thread (one sweep at a time),
        after one of them was found dead: the server closed them all at once (a restart, a failover,
        pg_terminate_backend). Otherwise each next borrower meets a dead one in turn, and the pool's
        own check of a checkout backs off between failures (1, 2, 4 s...): with 10 dead connections
        a borrower waited out its whole pool timeout, though new connections were ready."""
        if not self._sweeping.acquire(blocking=False):
            return

        def sweep() -> None:
            try:
                self.pool.check()
            except Exception:  # the pool closed meanwhile: nothing to sweep
                pass
            finally:
                self._sweeping.release()

        threading.Thread(target=sweep, name="memoria-pool-sweep", daemon=True).start()

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None, *, app_role: bool = True) -> Iterator[psycopg.Connection]:
        """A pooled connection, waiting at most `timeout` (default: the pool timeout), else PoolTimeout.

        It runs as the application role: `app_role` re-asserts it with a SET ROLE (one round trip), so
        that a borrower that ran RESET ROLE cannot hand the next one a connection that runs as the
        login user, outside row-level security. A caller whose first statement sets the role itself
        (set_tenant, the scheduler's workers) passes app_role=False and saves the round trip."""
        wait = self.timeout if timeout is None else timeout
        failed_connects = self.pool.get_stats().get("connections_errors", 0)
        borrowed: psycopg.Connection | None = None
        try:
            with self.pool.connection(timeout=wait) as conn:
                borrowed = conn
                if app_role:
                    conn.execute(f"SET ROLE {APP_ROLE}")
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            if self.pool.get_stats().get("connections_errors", 0) > failed_connects:
                # Not a busy pool: the server refused new connections (down, restarting, full).
                raise PoolTimeout(
                    f"no database connection within {wait:g}s: the pool cannot connect to PostgreSQL "
                    f"({redact_dsn(self.dsn)}); is the server running? The pool reconnects when it is back"
                ) from exc
            raise PoolTimeout(
                f"no database connection became free within {wait:g}s "
                f"(pool max_size={self.pool.max_size}); raise MEMORIA_POOL_MAX_SIZE or "
                "MEMORIA_POOL_TIMEOUT, or lower the number of concurrent queries"
            ) from exc
        except psycopg.OperationalError:  # after PoolTimeout, which is one too
            # The connection died under its borrower (not a timeout or a lock wait, which leave it
            # usable): those idle in the pool likely died with it.
            if borrowed is not None and borrowed.broken and not self.pool.closed:
                self._sweep()
            raise

    @contextlib.contextmanager
    def transaction(
        self,
        tenant: str,
        *,
        generic_plans: bool = False,
        lock_timeout_ms: int | None = None,
        synchronous_commit: bool = True,
        implicit: bool = False,
        tenant_lock: str | None = None,
        background_end: bool = False,
        write_behind: Callable[[Exception | None], None] | None = None,
    ) -> Iterator[psycopg.Connection]:
        """A pooled connection inside a transaction whose row-level-security tenant is `tenant`.

        `generic_plans`: prepared statements run on their cached generic plan (the connections force
        custom plans, which the workers' shard filters need), for a statement whose planning costs more
        than it gains: the final CTE. `lock_timeout_ms`: how long its statements wait for a lock.
        `synchronous_commit` False: its COMMIT returns before its WAL is flushed (a crash may lose it;
        for best-effort writes only: the access statistics), so a standby-aware caller must take the
        WAL insert position as its write's (ReadRouter.wrote(..., asynchronous=True)).
        `implicit`: the transaction is the one PostgreSQL opens for the statements of a pipeline up to
        its Sync (db/pipeline.tenant_block): no BEGIN and no COMMIT round trip, the settings go with the
        first statement. Only for a body of reads (or one write) that fetches each result it needs: the
        block ends with a commit even when the body raises. `tenant_lock`: "shared" or "exclusive", the
        tenant write lock (set_tenant), held to the end.
        `background_end` (with `implicit`, a body of reads) ends the block after the caller goes on
        (_end_in_background); so does `write_behind` (one best-effort write, its result unread), called
        then with None or the write's error (rolled back). A body that raises ends its block in place.
        Inside a query's budget (db/budget.py) its statements may run for what remains of the budget
        (at most statement_timeout_ms), and running out of it is QueryTimeout.
        """
        budget = current_budget()
        settings = functools.partial(
            set_tenant, generic_plans=generic_plans, lock_timeout_ms=lock_timeout_ms,
            synchronous_commit=synchronous_commit, tenant_lock=tenant_lock,
        )  # fmt: skip
        wait = self.timeout if budget is None else min(self.timeout, budget.require_ms() / 1000.0)
        enforced = contextlib.nullcontext() if budget is None else budget.enforced(pool_wait_capped=wait < self.timeout)
        with enforced, contextlib.ExitStack() as block:
            conn = block.enter_context(self.connection(timeout=wait, app_role=False))
            pipeline = block.enter_context(tenant_block(conn, implicit))
            if budget is None:
                settings(conn, tenant)
            else:
                left, cap = budget.require_ms(), self._statement_timeout_ms
                settings(conn, tenant, statement_timeout_ms=min(left, cap) if cap else left)
                budget.applied()
            yield conn
            if implicit and (write_behind is not None or (background_end and answered(pipeline))):
                self._end_in_background(block.pop_all(), write_behind)

    def _end_in_background(
        self, block: contextlib.ExitStack, done: Callable[[Exception | None], None] | None = None
    ) -> None:
        """End a read block (`transaction`'s background_end) in the enders' thread; where that cannot
        start (the pool is closing), here. Called once the body has ended without an error with every
        statement answered (pipeline.answered): the block's end, its Sync (the end of a transaction
        that wrote nothing) and the connection's return to the pool, runs while the caller goes on; the
        results are all in hand, so the caller no longer waits a round trip for the server to say so.
        A body that raises, or that left a result unread, ends its block in place, as without
        background_end. (docs/measurements.md, "Why these defaults".) With `done` (transaction's
        write_behind) the block's end answers a write: `done` is told whether it failed."""
        try:
            future = self._enders.submit(_end_block, block, done)
            with self._ending_lock:
                self._ending.add(future)
            future.add_done_callback(self._ended)
        except RuntimeError:  # the executor was shut down: Database.close runs
            _end_block(block, done)

    def _ended(self, future: cf.Future[None]) -> None:
        with self._ending_lock:
            self._ending.discard(future)

    def ending(self) -> int:
        """How many blocks are ending in the background now (each holds its pooled connection)."""
        with self._ending_lock:
            return len(self._ending)

    def settle(self, timeout: float | None = None) -> bool:
        """Wait (at most `timeout` s) until the blocks ending in the background when this is called have
        ended: read blocks, and the writes a query did not wait for (the access statistics of ranked
        queries: transaction's write_behind). True if they all have."""
        with self._ending_lock:
            pending = list(self._ending)
        _, not_done = cf.wait(pending, timeout=timeout)
        return not not_done

    def renew_budget(self, conn: psycopg.Connection) -> None:
        """Before the next statement of a transaction opened inside a query's budget: a statement's
        timeout counts from its own start, so once the transaction is more than RENEW_AFTER_S old its
        timeout becomes what remains of the budget now (QueryTimeout when nothing does)."""
        budget = current_budget()
        if budget is not None and budget.since_applied() > RENEW_AFTER_S:
            self._apply_budget(conn, budget)

    def _apply_budget(self, conn: psycopg.Connection, budget: QueryBudget) -> None:
        left, cap = budget.require_ms(), self._statement_timeout_ms
        conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(min(left, cap) if cap else left),))
        budget.applied()

    def close(self) -> None:
        self._enders.shutdown(wait=True)  # every read block ended, its connection back in the pool
        self.pool.close()


def _probe(dsn: str) -> Capabilities:
    """The server's capabilities, checked: pgvector present, the schema installed (a revision this
    library does not know is a warning)."""
    with connect(dsn, autocommit=True, connect_timeout=10) as conn:
        capabilities = detect_capabilities(conn)
    require_vector(capabilities)
    if not capabilities.schema_ready:
        raise SchemaError(
            "the memoria schema is not installed in this database: run `memoria-pg db upgrade` "
            "(or MemorySystem.migrate())"
        )
    note = schema_revision_note(capabilities.schema_revision)
    if note is not None:
        _log.warning(note)
    return capabilities


def _end_block(block: contextlib.ExitStack, done: Callable[[Exception | None], None] | None = None) -> None:
    """A read block's end, after its body read every result: its Sync and the connection's return.
    Nothing is left to report to the caller: a failure here (a connection lost after its answer came)
    leaves the connection to the pool, which discards a broken one. A write's block (`done`, from
    transaction's write_behind) reports its outcome to `done`, which must not raise."""
    try:
        block.close()
    except Exception as exc:
        if done is not None:
            done(exc)
            return
        _log.debug("ending a read block failed after its results were read: %s", first_line(exc))
        return
    if done is not None:
        done(None)


@contextlib.contextmanager
def schema_current() -> Iterator[None]:
    """Turns a statement's missing table or column into SchemaError: the database's schema is
    older than this library (its transaction rolls back, so nothing was written)."""
    try:
        yield
    except (psycopg.errors.UndefinedColumn, psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction) as exc:
        raise SchemaError(
            f"the database schema is older than this library ({exc.diag.message_primary}): run `memoria-pg db upgrade`"
        ) from exc
    except psycopg.errors.InvalidColumnReference as exc:
        if "ON CONFLICT" not in (exc.diag.message_primary or ""):
            raise
        # An upsert's conflict target names a key of a later revision (0009's keys with the tenant).
        raise SchemaError(
            f"the database schema is older than this library ({exc.diag.message_primary}): run `memoria-pg db upgrade`"
        ) from exc


def set_tenant(
    conn: psycopg.Connection,
    tenant: str,
    *,
    generic_plans: bool = False,
    statement_timeout_ms: int | None = None,
    lock_timeout_ms: int | None = None,
    synchronous_commit: bool = True,
    tenant_lock: str | None = None,
) -> None:
    """The transaction's tenant, role and plan cache mode (and, when asked, its statement and lock
    timeouts, an asynchronous commit and the tenant write lock) in one round trip. The role is the
    application role whatever the session's is (`Database.connection`'s app_role); the plan mode is
    the pool's custom plans, or cached generic ones with `generic_plans`, whatever a previous borrower
    left.

    `tenant_lock` ("shared" or "exclusive"): the tenant write lock, held until the transaction ends.
    Why: a lifecycle write reads the tenant's rows and then changes them over several statements, each
    with its own snapshot (READ COMMITTED). Beside another writer of the tenant that goes wrong in
    ways no row lock prevents: an erasure that deletes table by table misses the rows a batch commits
    meanwhile (its postings outlive its memories); two updates that move memories between shards, or
    change which entities they mention, lock shared rows in opposite orders (a deadlock); a delete
    meets a row another update moved to another shard (a serialization failure). Lifecycle writes are
    rare beside ingestion and queries, so they take the lock exclusive and run one at a time in their
    tenant; ingestion batches take it shared and still run side by side (they lock rows in one global
    order). It is taken in this first statement, so every later statement of the transaction reads a
    snapshot taken after the writers before it committed. Two tenants whose names share a hashtext
    value only wait for each other."""
    settings = [
        ("memoria.tenant", tenant),
        ("role", APP_ROLE),
        ("plan_cache_mode", "force_generic_plan" if generic_plans else "force_custom_plan"),
    ]
    if statement_timeout_ms is not None:
        settings.append(("statement_timeout", str(statement_timeout_ms)))
    if lock_timeout_ms is not None:
        settings.append(("lock_timeout", str(lock_timeout_ms)))
    if not synchronous_commit:
        settings.append(("synchronous_commit", "off"))
    calls = ", ".join(f"set_config('{name}', %s, true)" for name, _ in settings)  # names: the constants above
    values = [value for _, value in settings]
    if tenant_lock is not None:
        calls += f", {tenant_lock_call(tenant_lock, '%s')}"  # a name of the fixed set above
        values.append(tenant)
    conn.execute(f"SELECT {calls}", values)


def lock_tenants(conn: psycopg.Connection, tenants: Sequence[str]) -> None:
    """The tenant write lock, shared, on each of `tenants` (an ingestion batch's), to the end of the
    transaction (set_tenant says why). Shared locks do not wait for each other, so the order is free."""
    conn.execute(
        f"SELECT count({tenant_lock_call('shared', 't')}) FROM unnest(%s::text[]) AS t",
        (list(tenants),),
    )


def redact_dsn(dsn: str) -> str:
    """The DSN as it can be shown, its passwords masked whatever its form: a URL's user:password@, a
    ?password= or &password= parameter, a key=value password=... with or without quotes, sslpassword.
    libpq's own parser reads the DSN before and after masking: the masked text is shown only when it
    parses to the same settings with every secret replaced; otherwise the settings are shown as
    key=value conninfo with the secrets masked. A DSN libpq cannot parse is not shown at all."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<a DSN libpq cannot parse, not shown>"
    if not any(key in info for key in SECRET_KEYS):
        return dsn
    expected = {k: "***" if k in SECRET_KEYS else v for k, v in info.items()}
    masked = _MASK_URL_PASSWORD.sub(r"\1***@", dsn) if _URL.match(dsn) else dsn
    masked = _MASK_PARAMETER.sub(r"\1***", masked) if _URL.match(dsn) else _MASK_KEYWORD.sub(r"\1***", masked)
    try:
        if psycopg.conninfo.conninfo_to_dict(masked) == expected:
            return masked
    except psycopg.Error:
        pass
    return psycopg.conninfo.make_conninfo("", **expected)


_URL = re.compile(r"^postgres(?:ql)?://", re.IGNORECASE)
_MASK_URL_PASSWORD = re.compile(r"^(postgres(?:ql)?://[^/?#@]*?:)[^/?#@]*@", re.IGNORECASE)
_MASK_PARAMETER = re.compile(r"([?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)
_MASK_KEYWORD = re.compile(r"(\b(?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s']\S*)")


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection:
    """psycopg.connect, with a failure to connect as ServerError ("cannot connect", the DSN redacted):
    the one place a "cannot connect" message comes from."""
    try:
        return psycopg.connect(dsn, **kwargs)
    except psycopg.OperationalError as exc:
        raise ServerError(f"cannot connect to PostgreSQL ({redact_dsn(dsn)}): {exc}") from exc


CLOSED = "this memory system is closed (its close() was called): open a new one"


def describe(exc: psycopg.Error) -> str:
    """A one-line account of a driver error met while a connection was in use."""
    message = first_line(exc)
    if isinstance(exc, psycopg_pool.PoolClosed):
        return CLOSED
    if isinstance(exc, psycopg.OperationalError) and (exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))):
        return (
            f"the connection to PostgreSQL failed while in use ({message}); its transaction was rolled back, "
            "retry once the server is back"
        )
    return f"PostgreSQL raised {type(exc).__name__} ({exc.sqlstate or 'no SQLSTATE'}): {message}"


@contextlib.contextmanager
def server_errors() -> Iterator[None]:
    """Driver and pool errors that leave a library call become ServerError with the driver's error
    chained (`__cause__`); memoria-pg's own errors pass unchanged."""
    try:
        yield
    except psycopg.Error as exc:
        raise ServerError(describe(exc)) from exc


def translating(method: Callable[P, R]) -> Callable[P, R]:
    """A public method whose driver errors become ServerError (server_errors)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with server_errors():
            return method(*args, **kwargs)

    return wrapper


# A stored time a datetime cannot hold in the session's time zone (before the year 1 or after 9999, as
# versions before issue 15's fix could store; validation keeps new times a day inside) reads as the
# nearest one it can hold instead of failing the read: one such memory cannot fail every query whose
# candidates include it. Registered on every pooled connection, for both result formats.
_EARLIEST = dt.datetime.min.replace(tzinfo=dt.UTC)
_LATEST = dt.datetime.max.replace(tzinfo=dt.UTC)


class ReadableTimeLoader(TimestamptzBinaryLoader):
    def load(self, data: Any) -> dt.datetime:
        try:
            value: dt.datetime = super().load(data)
        except psycopg.DataError:
            return _EARLIEST if int.from_bytes(bytes(data), "big", signed=True) < 0 else _LATEST  # since 2000
        return value


class ReadableTimeTextLoader(TimestamptzLoader):
    def load(self, data: Any) -> dt.datetime:
        try:
            value: dt.datetime = super().load(data)
        except psycopg.DataError:
            return _EARLIEST if b"BC" in bytes(data) or bytes(data) == b"-infinity" else _LATEST
        return value


def register_readable_times(context: psycopg.Connection | psycopg.Cursor[Any]) -> None:
    """timestamptz results of `context` (a connection or a cursor) through the readable-time loaders."""
    context.adapters.register_loader("timestamptz", ReadableTimeLoader)
    context.adapters.register_loader("timestamptz", ReadableTimeTextLoader)


# The statements of the query's hot path (the final CTE, V3's statement) clamp the times they return to
# [CLAMPED_EARLIEST, CLAMPED_LATEST] in SQL: 16 hours inside what a datetime holds, so that every session
# time zone (at most 15:59 from UTC) can hold them, and psycopg's C loader reads them (1.2 against 0.2
# microseconds a value: ~250 values a query) instead of the loaders above, which are Python. A clamped
# value reads as the nearest readable time (nearest_readable), as they make it; validation keeps new
# times a day inside, so no time stored since is changed.
CLAMPED_EARLIEST = _EARLIEST + dt.timedelta(hours=16)
CLAMPED_LATEST = _LATEST - dt.timedelta(hours=16)
_C_TIMES = psycopg.adapters.get_loader(psycopg.postgres.types["timestamptz"].oid, psycopg.pq.Format.BINARY)


def register_clamped_times(cur: psycopg.Cursor[Any] | psycopg.RawCursor[Any]) -> None:
    """Binary timestamptz results of `cur` through psycopg's own loader (C in psycopg[binary]): for
    statements whose times are clamped in SQL (CLAMPED_EARLIEST); the others raise on a legacy time."""
    if _C_TIMES is not None:
        cur.adapters.register_loader("timestamptz", _C_TIMES)


def nearest_readable(value: dt.datetime) -> dt.datetime:
    """A time clamped in SQL (CLAMPED_EARLIEST, CLAMPED_LATEST) as the readable-time loaders read it."""
    if value <= CLAMPED_EARLIEST:
        return _EARLIEST
    if value >= CLAMPED_LATEST:
        return _LATEST
    return value


# 19 digits in a row may be an integer beyond 64 bits, which orjson would read as a float.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def json_loads(data: bytes | bytearray | memoryview | str) -> Any:
    """A json or jsonb value (a memory's metadata: ~100 of them in a query's candidates) read by
    orjson, 4-5x faster than the standard module. The standard module reads what orjson would read
    otherwise: a text with 19 digits in a row (jsonb numbers have arbitrary precision; orjson reads an
    integer beyond 64 bits as a float) and what orjson refuses (a lone surrogate escape)."""
    raw = data.encode() if isinstance(data, str) else data
    if _LONG_DIGITS.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(bytes(raw))


def vector_of(value: Any) -> np.ndarray | None:
    """A stored embedding as float32: pgvector reads a binary result as its Vector, a text one as an array."""
    if value is None:
        return None
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)
