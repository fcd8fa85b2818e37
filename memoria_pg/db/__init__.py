"""Database access: the one connection pool, tenant transactions, SQL files, migrations, the
embedded server and the AGE graph mirror."""

from .database import (
    APP_ROLE,
    VECTOR_HELP,
    Capabilities,
    Database,
    detect_capabilities,
    require_vector,
    scalar,
    schema_current,
    set_tenant,
)
from .resources import load_sql, migrations_dir, sql_dir

__all__ = [
    "APP_ROLE",
    "VECTOR_HELP",
    "Capabilities",
    "Database",
    "detect_capabilities",
    "load_sql",
    "migrations_dir",
    "require_vector",
    "scalar",
    "schema_current",
    "set_tenant",
    "sql_dir",
]
