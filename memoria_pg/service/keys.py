"""API keys: the token format, its hash, creating / listing / revoking keys, and checking one.

A key is the token `mpg_<key_id>_<secret>`: key_id, 12 random lower-case letters and digits, names the
key in `memoria-pg keys list` and `revoke`; secret is 32 random bytes (256 bits). The database keeps
sha256(token) only (migration 0011), never the token, which is printed once when the key is created.
A plain sha256 is enough for random tokens: salts and slow hashes protect guessable passwords, and a
256-bit secret cannot be guessed; it also lets a check be one index probe on the hash (and one dict
probe in the cache). Looking up by hash instead of comparing secrets is what keeps the check free of
timing leaks: the only value compared is the hash of what the caller sent, which the caller knows
already, so how long a comparison takes says nothing about any stored key.

Management (create, list, revoke) connects with the DSN as the login user and SET ROLE
memoria_key_admin; the server's pooled connections run as memoria_app and can only check a key, through
memoria.api_key_principal(hash).
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import re
import secrets
import string
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from .. import InputError, MemorySystem, SchemaError, ServerError
from ..core import validation
from ..errors import first_line

PREFIX = "mpg"
_TOKEN = re.compile(r"^mpg_([a-z0-9]{12})_([A-Za-z0-9_-]{43})$")
_KEY_ID = re.compile(r"^[a-z0-9]{12}$")
_ALPHABET = string.ascii_lowercase + string.digits
KEY_ADMIN_ROLE = "memoria_key_admin"


@dataclass(frozen=True)
class Principal:
    """Who a request is: a tenant key, an admin key, or nobody (a server without keys, on loopback)."""

    key_id: str | None
    tenant: str | None  # the key's tenant; None for an admin key and for nobody
    admin: bool = False


@dataclass(frozen=True)
class KeyInfo:
    key_id: str
    tenant: str | None
    admin: bool
    description: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None


def new_token() -> tuple[str, str]:
    """(key_id, token) of a new key."""
    key_id = "".join(secrets.choice(_ALPHABET) for _ in range(12))
    return key_id, f"{PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"


def well_formed(token: str) -> bool:
    return _TOKEN.match(token) is not None


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


# -- management, as memoria_key_admin ------------------------------------------------------------
@contextmanager
def _admin_connection(dsn: str) -> Iterator[psycopg.Connection]:
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            try:
                conn.execute(f"SET ROLE {KEY_ADMIN_ROLE}")
            except psycopg.errors.InvalidParameterValue as exc:
                raise SchemaError(
                    f"the role {KEY_ADMIN_ROLE} does not exist: run `memoria-pg db upgrade` (migration 0011)"
                ) from exc
            except psycopg.errors.InsufficientPrivilege as exc:
                raise ServerError(
                    f"this login may not manage API keys (it is not a member of {KEY_ADMIN_ROLE}): use the user that "
                    "ran `memoria-pg db upgrade`, or GRANT memoria_key_admin TO it"
                ) from exc
            try:
                yield conn
            except psycopg.errors.UndefinedTable as exc:
                raise SchemaError("the API key table is missing: run `memoria-pg db upgrade` (migration 0011)") from exc
    except psycopg.OperationalError as exc:
        raise ServerError(f"cannot connect to PostgreSQL: {exc}") from exc


_COLUMNS = "key_id, tenant, admin, description, created_at, revoked_at"


def create_key(dsn: str, *, tenant: str | None, admin: bool = False, description: str = "") -> tuple[KeyInfo, str]:
    """A new key for `tenant` (or an admin key, tenant None): its details and the token, shown once."""
    if admin == (tenant is not None):
        raise InputError(
            "a key is either bound to a tenant (--tenant T) or an admin key (--admin), not both or neither"
        )
    if tenant is not None:
        validation.tenant(tenant)
    key_id, token = new_token()
    with _admin_connection(dsn) as conn:
        row = conn.execute(
            f"INSERT INTO memoria.api_keys (key_id, tenant, admin, key_hash, description) "
            f"VALUES (%s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
            (key_id, tenant, admin, digest(token), description),
        ).fetchone()
    assert row is not None
    return KeyInfo(*row), token


def list_keys(dsn: str, *, include_revoked: bool = False) -> list[KeyInfo]:
    where = "" if include_revoked else "WHERE revoked_at IS NULL"
    with _admin_connection(dsn) as conn:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM memoria.api_keys {where} ORDER BY created_at, key_id").fetchall()
    return [KeyInfo(*row) for row in rows]


def revoke_key(dsn: str, key_id: str) -> bool:
    """Revoke a live key; False when no live key has that id."""
    if not _KEY_ID.match(key_id):
        raise InputError(f"{key_id!r} is not a key id (12 lower-case letters and digits, see `memoria-pg keys list`)")
    with _admin_connection(dsn) as conn:
        cur = conn.execute(
            "UPDATE memoria.api_keys SET revoked_at = now() WHERE key_id = %s AND revoked_at IS NULL", (key_id,)
        )
        return cur.rowcount == 1


def any_key(dsn: str) -> bool:
    """Whether a live key exists (as memoria_app, which may ask nothing more of the key table)."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute("SET ROLE memoria_app")
            row = conn.execute("SELECT memoria.api_keys_exist()").fetchone()
    except psycopg.errors.UndefinedFunction as exc:
        raise SchemaError("the database has no API keys yet: run `memoria-pg db upgrade` (migration 0011)") from exc
    except psycopg.OperationalError as exc:
        raise ServerError(f"cannot connect to PostgreSQL: {exc}") from exc
    return bool(row and row[0])


# -- checking, as memoria_app (the server's pool) -------------------------------------------------
@contextmanager
def _app_connection(system: MemorySystem) -> Iterator[psycopg.Connection]:
    """A pooled connection for the key check, whose driver errors are ServerError (the service's 503):
    pg_terminate_backend returns before the backend's FATAL reaches the client, so a connection can
    pass the pool's check and die on its first statement. The library's own errors pass unchanged."""
    try:
        with system.db.connection() as conn:
            yield conn
    except psycopg.Error as exc:
        raise ServerError(
            f"the API key check failed in PostgreSQL ({type(exc).__name__}: {first_line(exc)}); "
            "retry once the server is back"
        ) from exc


def lookup(system: MemorySystem, key_hash: bytes) -> Principal | None:
    """The live key with this hash, through the definer function of migration 0011."""
    with _app_connection(system) as conn:
        try:
            row = conn.execute(
                "SELECT key_id, tenant, admin FROM memoria.api_key_principal(%s)", (key_hash,)
            ).fetchone()
        except psycopg.errors.UndefinedFunction as exc:
            raise SchemaError("the database has no API keys yet: run `memoria-pg db upgrade` (migration 0011)") from exc
    return None if row is None else Principal(key_id=row[0], tenant=row[1], admin=bool(row[2]))


def keys_exist(system: MemorySystem) -> bool:
    with _app_connection(system) as conn:
        try:
            row = conn.execute("SELECT memoria.api_keys_exist()").fetchone()
        except psycopg.errors.UndefinedFunction as exc:
            raise SchemaError("the database has no API keys yet: run `memoria-pg db upgrade` (migration 0011)") from exc
    return bool(row and row[0])


class KeyCache:
    """Recent answers of the key check, each kept `ttl` seconds, at most `size` of them (oldest out
    first). A revoked key keeps working on a running server for at most `ttl` seconds."""

    def __init__(self, ttl: float, *, size: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.size = size
        self._clock = clock
        self._entries: collections.OrderedDict[bytes, tuple[float, Principal | None]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key_hash: bytes) -> tuple[bool, Principal | None]:
        """(found, principal): found is False when the hash must be looked up."""
        if self.ttl <= 0:
            return False, None
        with self._lock:
            entry = self._entries.get(key_hash)
            if entry is None or entry[0] <= self._clock():
                return False, None
            return True, entry[1]

    def put(self, key_hash: bytes, principal: Principal | None) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            self._entries[key_hash] = (self._clock() + self.ttl, principal)
            self._entries.move_to_end(key_hash)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
