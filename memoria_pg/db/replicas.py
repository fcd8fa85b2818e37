"""Read replicas: the query path's read-only statements on PostgreSQL hot standbys, with read-your-writes.

`ReadRouter.choose(tenant)` picks, per query, the server its reads run on: a standby of `replica_dsns`
with the fewest queries of this process in flight on it (ties in turn), among those that answer, whose
replay lags the primary by at most `replica_max_lag_ms`, and that have replayed the tenant's last write
made through this process (`wrote(tenant)` keeps the primary's WAL position, pg_current_wal_lsn(), after
each write call); a standby that has not replayed it is waited for up to `replica_wait_ms`, then the
query goes to the primary. A standby that fails (cannot connect, terminated mid-query, a statement
cancelled by a recovery conflict) is left out for `replica_retry_s`; the query is run again elsewhere
(QueryPipeline.run). Writes, the access statistics and traces always go to the primary.

What each standby has replayed (and its lag) is known from its last status check, at most
STATUS_TTL_S old: replay only moves forward, so a check is needed only when that is too old or behind
the tenant's write. The state is per process: writes of another process (another service worker, the
CLI) are not waited for; a standby that serves them lags by at most `replica_max_lag_ms`.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import psycopg
import psycopg_pool

from ..errors import MemoriaError, PoolTimeout
from .budget import current_budget
from .database import Capabilities, Database, scalar

STATUS_TTL_S = 0.1  # a standby's replay position and lag are checked again once this old
POLL_S = 0.002  # while waiting for a standby to replay the tenant's last write
CONNECT_WAIT_S = 0.5  # how long a status check waits for a standby's pooled connection
FIRST_CONNECT_WAIT_S = 2.0  # the same before the standby first answered (its pool may still be connecting)
MAX_TENANTS = 100_000  # tenants whose last write position is kept; older ones raise the floor
UNKNOWN = 2**63 - 1  # a write whose WAL position could not be read: that tenant reads the primary
STATUS_SQL = (
    "SELECT pg_is_in_recovery(), coalesce((pg_last_wal_replay_lsn() - '0/0')::bigint, 0), "
    "CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0 "
    "ELSE coalesce(extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000, 0) END"
)
# After a commit the primary has written WAL at least through its commit record: pg_current_wal_lsn().
# Not with synchronous_commit = off (the commit returns before its WAL is written): then the insert
# position, which may run ahead (other sessions' WAL not yet written), so a standby is waited for longer.
PRIMARY_INSERT_LSN_SQL = "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint"
PRIMARY_LSN_SQL = (
    "SELECT (CASE WHEN current_setting('synchronous_commit') = 'off' THEN pg_current_wal_insert_lsn() "
    "ELSE pg_current_wal_lsn() END - '0/0')::bigint"
)


class ReplicaFailed(MemoriaError):
    """A standby failed while a query read from it (QueryPipeline.run runs the query again elsewhere)."""


def server_failure(exc: BaseException) -> bool:
    """The server or the connection failed (not the statement): a broken or refused connection, a
    terminated backend, a statement a standby cancelled because it conflicted with recovery."""
    if isinstance(exc, PoolTimeout | ReplicaFailed):
        return True
    if isinstance(exc, psycopg.errors.SerializationFailure):
        return "conflict with recovery" in (exc.diag.message_primary or str(exc))
    if isinstance(exc, psycopg.OperationalError):
        return exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))
    return False


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def server_label(dsn: str) -> str:
    """host:port of a DSN (never its credentials)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "?"
    return f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}"


@dataclass
class Replica:
    """One standby: its pool and what this process last learnt of it."""

    name: str
    db: Database
    in_flight: int = 0
    down_until: float = 0.0
    replayed: int = 0  # WAL position replayed at the last check
    lag_ms: float = 0.0
    checked_at: float = float("-inf")
    note: str = ""  # why it was last left out
    answered: bool = False  # a status check has succeeded once
    errors_seen: int = 0  # the pool's failed connects when last looked at


@dataclass
class ReadTarget:
    """Where one query reads: a standby, or the primary (`replica` None) and why."""

    db: Database
    replica: Replica | None = None
    note: str | None = None
    routing_ms: float = 0.0
    required_lsn: int = 0

    @property
    def name(self) -> str:
        return self.replica.name if self.replica is not None else "primary"


class WritePositions:
    """The primary's WAL position after each tenant's last write through this process, for at most
    MAX_TENANTS tenants: a tenant forgotten raises the floor every tenant's reads must have replayed."""

    def __init__(self) -> None:
        self._lsn: collections.OrderedDict[str, int] = collections.OrderedDict()
        self.floor = 0
        self._lock = threading.Lock()

    def record(self, tenants: Iterable[str] | None, lsn: int) -> None:
        """`tenants` None: the write may have been any tenant's (the floor moves)."""
        with self._lock:
            if tenants is None:
                self.floor = max(self.floor, lsn)
                return
            for tenant in tenants:
                self._lsn[tenant] = max(lsn, self._lsn.pop(tenant, 0))
            while len(self._lsn) > MAX_TENANTS:
                self.floor = max(self.floor, self._lsn.popitem(last=False)[1])

    def required(self, tenant: str) -> int:
        with self._lock:
            return max(self.floor, self._lsn.get(tenant, 0))


@dataclass
class ReplicaSettings:
    max_lag_ms: int = 1000
    wait_ms: int = 50
    retry_s: float = 5.0
    pool_min_size: int = 1
    pool_max_size: int = 10
    pool_timeout: float = 10.0
    statement_timeout_ms: int = 30000
    ef_search: int = 100


class ReadRouter:
    """The primary and the standbys a query may read from (none: every query reads the primary)."""

    def __init__(self, primary: Database, dsns: Sequence[str], settings: ReplicaSettings | None = None) -> None:
        self.primary = primary
        self.settings = s = settings or ReplicaSettings()
        self.writes = WritePositions()
        self.replicas = [
            Replica(f"replica {i} ({server_label(dsn)})", _replica_database(dsn, primary.capabilities, s))
            for i, dsn in enumerate(dsns, start=1)
        ]
        self._turn = itertools.count()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self.replicas)

    def close(self) -> None:
        for replica in self.replicas:
            replica.db.close()

    # -- writes ----------------------------------------------------------------------------------
    def wrote(self, tenants: str | Iterable[str] | None, *, asynchronous: bool = False) -> None:
        """After a write call of `tenants` (None: any tenant) committed, or may have: the primary's WAL
        position now, which a standby must have replayed before it serves those tenants' queries.
        `asynchronous`: the write committed with synchronous_commit off (Database.transaction), so its
        commit record may not be written yet: the position is the WAL insert position, which a commit
        that has returned is behind on any connection."""
        if not self.enabled:
            return
        names = [tenants] if isinstance(tenants, str) else (None if tenants is None else list(tenants))
        try:
            with self.primary.connection() as conn:
                lsn = int(scalar(conn, PRIMARY_INSERT_LSN_SQL if asynchronous else PRIMARY_LSN_SQL))
        except (psycopg.Error, MemoriaError):
            lsn = UNKNOWN  # the write may be anywhere: those tenants read the primary until their next write
        self.writes.record(names, lsn)

    # -- reads -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def reading(self, tenant: str, exclude: Sequence[Replica] = ()) -> Iterator[ReadTarget]:
        """The server one query reads from, counted in flight while the block runs."""
        target = self.choose(tenant, exclude)
        replica = target.replica
        if replica is not None:
            with self._lock:
                replica.in_flight += 1
        try:
            yield target
        finally:
            if replica is not None:
                with self._lock:
                    replica.in_flight -= 1

    def choose(self, tenant: str, exclude: Sequence[Replica] = ()) -> ReadTarget:
        """A standby for the tenant's next query (see the module's docstring), else the primary."""
        t0 = time.perf_counter()
        required = self.writes.required(tenant)
        target = self._pick(required, exclude)
        target.routing_ms = (time.perf_counter() - t0) * 1000
        target.required_lsn = required
        return target

    def _pick(self, required: int, exclude: Sequence[Replica]) -> ReadTarget:
        if not self.replicas:
            return ReadTarget(self.primary)
        if required == UNKNOWN:
            return ReadTarget(self.primary, note="the tenant's last write position is unknown: primary")
        behind: list[Replica] = []
        candidates = self._candidates(exclude)
        for replica in candidates:
            state = self._usable(replica, required)
            if state == "ok":
                return ReadTarget(replica.db, replica)
            if state == "behind":
                behind.append(replica)
        if behind and self.settings.wait_ms > 0 and self._wait(behind[0], required):
            return ReadTarget(behind[0].db, behind[0], note=f"waited for the tenant's last write {lsn_text(required)}")
        left_out = [r for r in self.replicas if r not in candidates]
        notes = [f"{r.name}: {r.note}" for r in candidates + left_out]
        return ReadTarget(self.primary, note="; ".join(notes) or "no standby available")

    def _candidates(self, exclude: Sequence[Replica]) -> list[Replica]:
        """The standbys not failed recently, fewest queries of this process in flight first, ties in turn."""
        now = time.monotonic()
        turn = next(self._turn)
        n = len(self.replicas)
        with self._lock:
            order = [
                (r.in_flight, (i - turn) % n, r)
                for i, r in enumerate(self.replicas)
                if r not in exclude and r.down_until <= now
            ]
        return [r for _, _, r in sorted(order, key=lambda item: (item[0], item[1]))]

    def _usable(self, replica: Replica, required: int) -> str:
        """ok | behind (has not replayed `required` yet) | lagging | down."""
        stale = time.monotonic() - replica.checked_at > STATUS_TTL_S
        if (stale or replica.replayed < required) and not self._check(replica):
            return "down"
        if replica.lag_ms > self.settings.max_lag_ms:
            replica.note = f"replay lags {replica.lag_ms:.0f} ms (replica_max_lag_ms {self.settings.max_lag_ms})"
            return "lagging"
        if replica.replayed < required:
            replica.note = (
                f"had replayed {lsn_text(replica.replayed)}, not the tenant's last write {lsn_text(required)}"
            )
            return "behind"
        return "ok"

    def _check(self, replica: Replica) -> bool:
        """Read the standby's status; False (and left out for retry_s) when it does not answer or is no
        standby (promoted), False without leaving it out when its pool is merely busy. A pool that has
        failed to connect since the last look and holds no free connection is not waited for."""
        stats = replica.db.pool.get_stats()
        errors = stats.get("connections_errors", 0)
        if errors > replica.errors_seen and not stats.get("pool_available", 0):
            replica.errors_seen = errors
            self.failed(replica, "cannot connect")
            return False
        wait = CONNECT_WAIT_S if replica.answered else FIRST_CONNECT_WAIT_S
        try:
            with replica.db.connection(timeout=min(wait, replica.db.timeout)) as conn:
                row = conn.execute(STATUS_SQL).fetchone()
        except PoolTimeout:
            replica.errors_seen = replica.db.pool.get_stats().get("connections_errors", 0)
            if replica.errors_seen > errors:
                self.failed(replica, "cannot connect")
            else:
                replica.note = "no free pooled connection"
            return False
        except psycopg.Error as exc:
            self.failed(replica, f"status check failed ({type(exc).__name__})")
            return False
        assert row is not None
        if not row[0]:
            self.failed(replica, "not in recovery (promoted?): not used as a standby")
            return False
        replica.replayed, replica.lag_ms, replica.checked_at = int(row[1]), float(row[2]), time.monotonic()
        replica.answered, replica.errors_seen = True, replica.db.pool.get_stats().get("connections_errors", 0)
        return True

    def _wait(self, replica: Replica, required: int) -> bool:
        """Poll the standby until it has replayed `required`, at most wait_ms."""
        wait_ms = self.settings.wait_ms
        budget = current_budget()
        if budget is not None:  # inside a query: never past its budget
            wait_ms = min(wait_ms, budget.remaining_ms())
        until = time.monotonic() + wait_ms / 1000.0
        try:
            with replica.db.connection(timeout=min(CONNECT_WAIT_S, replica.db.timeout)) as conn:
                while True:
                    row = conn.execute(STATUS_SQL).fetchone()
                    assert row is not None
                    replica.replayed, replica.lag_ms = int(row[1]), float(row[2])
                    replica.checked_at = time.monotonic()
                    if replica.replayed >= required:
                        return True
                    left = until - time.monotonic()
                    if left <= 0:  # checked once more at the end of the wait
                        break
                    time.sleep(min(POLL_S, left))
        except (psycopg.Error, MemoriaError) as exc:
            self.failed(replica, f"failed while waited for ({type(exc).__name__})")
            return False
        replica.note = (
            f"had not replayed the tenant's last write {lsn_text(required)} within {self.settings.wait_ms} ms"
        )
        return False

    def failed(self, replica: Replica, why: str) -> None:
        """Leave the standby out for retry_s; what it had replayed is checked again when it is back."""
        with self._lock:
            replica.down_until = time.monotonic() + self.settings.retry_s
            replica.replayed, replica.checked_at, replica.note = 0, float("-inf"), why


def _replica_database(dsn: str, capabilities: Capabilities, s: ReplicaSettings) -> Database:
    """A standby's pool, opened without waiting: a standby that is down must not stop the library."""
    try:
        return Database(
            dsn,
            min_size=s.pool_min_size,
            max_size=s.pool_max_size,
            timeout=s.pool_timeout,
            statement_timeout_ms=s.statement_timeout_ms,
            ef_search=s.ef_search,
            capabilities=capabilities,
        )
    except psycopg_pool.PoolTimeout as exc:  # pragma: no cover - open(wait=False) does not wait
        raise PoolTimeout(f"cannot open the pool of standby {server_label(dsn)}") from exc
