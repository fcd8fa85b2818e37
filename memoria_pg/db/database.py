"""The one place that connects: the connection pool, server capabilities, tenant transactions."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg_pool
from pgvector.psycopg import register_vector

from ..errors import ExtensionMissing, PoolTimeout, SchemaError, ServerError

APP_ROLE = "memoria_app"
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
    ) -> None:
        self.dsn = dsn
        self.timeout = timeout
        self._statement_timeout_ms = statement_timeout_ms
        self._ef_search = ef_search
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
                self.capabilities = detect_capabilities(conn)
        except psycopg.OperationalError as exc:
            raise ServerError(f"cannot connect to PostgreSQL ({_safe(dsn)}): {exc}") from exc
        require_vector(self.capabilities)
        if not self.capabilities.schema_ready:
            raise SchemaError(
                "the memoria schema is not installed in this database: run `memoria-pg db upgrade` "
                "(or MemorySystem.migrate())"
            )
        self.pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            configure=self._configure,
            check=self._check,
            name="memoria",
        )
        self.pool.open(wait=True, timeout=max(timeout, 10.0))

    def _configure(self, conn: psycopg.Connection) -> None:
        conn.autocommit = True
        register_vector(conn)
        if self.capabilities.age:
            # A no-op when the server preloads AGE; needed (and allowed) before dropping privileges.
            with contextlib.suppress(psycopg.Error):
                conn.execute("LOAD 'age'")
        conn.execute(f"SET ROLE {APP_ROLE}")
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (str(self._statement_timeout_ms),))
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(self._ef_search),))
        # Worker statements filter shards with "%(memory_type)s IS NULL OR memory_type = ...": only a
        # custom plan prunes partitions; a cached generic plan walks every partition's HNSW index
        # (many times slower: README, "Why these defaults"), and psycopg prepares statements after
        # a few executions.
        conn.execute("SET plan_cache_mode = force_custom_plan")
        # No JIT: every statement here is bounded (a few ms), but estimates can multiply past
        # jit_above_cost (the graph walk: reached entities x memory types x the per-entity limit, with
        # memoria.memory_types, a few rows autovacuum never analyzes, guessed at 1,200) and the
        # compilation then costs far more than the work (README, "Why these defaults").
        conn.execute("SET jit = off")
        # Without iterative scans an HNSW scan stops after ef_search tuples: a worker limit above
        # ef_search, or a tenant filter, would silently return fewer rows (vector.sql re-sorts).
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false)")
        conn.execute(
            "SET search_path = memoria, public, ag_catalog"
            if self.capabilities.age
            else "SET search_path = memoria, public"
        )

    @staticmethod
    def _check(conn: psycopg.Connection) -> None:
        # The liveness probe of every checkout (a dead connection raises and is replaced) also
        # re-asserts the role: a borrower that ran RESET ROLE cannot hand the next one a connection
        # that runs as the login user, outside row-level security.
        conn.autocommit = True
        conn.execute(f"SET ROLE {APP_ROLE}")

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection]:
        """A pooled connection, waiting at most `timeout` (default: the pool timeout), else PoolTimeout."""
        wait = self.timeout if timeout is None else timeout
        failed_connects = self.pool.get_stats().get("connections_errors", 0)
        try:
            with self.pool.connection(timeout=wait) as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            if self.pool.get_stats().get("connections_errors", 0) > failed_connects:
                # Not a busy pool: the server refused new connections (down, restarting, full).
                raise PoolTimeout(
                    f"no database connection within {wait:g}s: the pool cannot connect to PostgreSQL "
                    f"({_safe(self.dsn)}); is the server running? The pool reconnects when it is back"
                ) from exc
            raise PoolTimeout(
                f"no database connection became free within {wait:g}s "
                f"(pool max_size={self.pool.max_size}); raise MEMORIA_POOL_MAX_SIZE or "
                "MEMORIA_POOL_TIMEOUT, or lower the number of concurrent queries"
            ) from exc

    @contextlib.contextmanager
    def transaction(self, tenant: str, *, generic_plans: bool = False) -> Iterator[psycopg.Connection]:
        """A pooled connection inside a transaction whose row-level-security tenant is `tenant`.

        `generic_plans`: prepared statements run on their cached generic plan in this transaction
        (the connections otherwise force custom plans, which the workers' shard filters need), for a
        statement without a partition key parameter whose planning costs more than it gains: the
        final CTE (planning it per execution costs a quarter of its time, for the same rows).
        """
        with self.connection() as conn, conn.transaction():
            set_tenant(conn, tenant, generic_plans=generic_plans)
            yield conn

    def close(self) -> None:
        self.pool.close()


@contextlib.contextmanager
def schema_current() -> Iterator[None]:
    """Turns a statement's missing table or column into SchemaError: the database's schema is
    older than this library (its transaction rolls back, so nothing was written)."""
    try:
        yield
    except (psycopg.errors.UndefinedColumn, psycopg.errors.UndefinedTable) as exc:
        raise SchemaError(
            f"the database schema is older than this library ({exc.diag.message_primary}): run `memoria-pg db upgrade`"
        ) from exc


def set_tenant(conn: psycopg.Connection, tenant: str, *, generic_plans: bool = False) -> None:
    """The transaction's tenant (and, with `generic_plans`, its plan cache mode) in one round trip."""
    if generic_plans:
        conn.execute(
            "SELECT set_config('memoria.tenant', %s, true), set_config('plan_cache_mode', 'force_generic_plan', true)",
            (tenant,),
        )
    else:
        conn.execute("SELECT set_config('memoria.tenant', %s, true)", (tenant,))


def _safe(dsn: str) -> str:
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "invalid DSN"
    info.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in info.items())
