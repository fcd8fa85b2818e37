"""Database access: the one connection pool, tenant transactions, SQL files, migrations, the
embedded server and the AGE graph mirror."""

from .database import (
    APP_ROLE,
    VECTOR_HELP,
    Capabilities,
    Database,
    connect,
    detect_capabilities,
    lock_tenants,
    redact_dsn,
    require_vector,
    scalar,
    schema_current,
    server_errors,
    set_tenant,
    translating,
    vector_of,
)
from .pipeline import pipelined
from .resources import load_sql, migrations_dir, sql_dir

__all__ = [
    "APP_ROLE",
    "VECTOR_HELP",
    "Capabilities",
    "Database",
    "connect",
    "detect_capabilities",
    "load_sql",
    "lock_tenants",
    "migrations_dir",
    "pipelined",
    "redact_dsn",
    "require_vector",
    "scalar",
    "schema_current",
    "server_errors",
    "set_tenant",
    "sql_dir",
    "translating",
    "vector_of",
]
