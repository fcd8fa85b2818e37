"""The evaluation's databases: an admin connection (given, or an embedded server in a temporary
directory) and a fresh database per data set, dropped afterwards."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
from psycopg import sql

Log = Callable[[str], None]


@contextlib.contextmanager
def admin_server(dsn: str | None, log: Log) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    from memoria_pg import start_embedded_server, stop_embedded_server

    parent = Path(tempfile.mkdtemp(prefix="memoria-eval-pg-"))
    parent.chmod(0o755)  # the embedded server may run as its own system user
    data_dir = parent / "pgdata"
    log(f"starting an embedded server in {data_dir}")
    try:
        yield start_embedded_server(data_dir, keep_running=False)
    finally:
        with contextlib.suppress(Exception):
            stop_embedded_server(data_dir)
        shutil.rmtree(parent, ignore_errors=True)


@contextlib.contextmanager
def fresh_database(admin_dsn: str, name: str, keep: bool, log: Log) -> Iterator[str]:
    dbname = f"memoria_eval_{name}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    params = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    params["dbname"] = dbname
    try:
        yield psycopg.conninfo.make_conninfo(**params)
    finally:
        if keep:
            log(f"   kept database {dbname}")
        else:
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))


def server_version(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        vector = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        age = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'age'").fetchone()
    parts = [f"PostgreSQL {version}", f"pgvector {vector[0] if vector else 'missing'}"]
    if age:
        parts.append(f"AGE {age[0]} available")
    return ", ".join(parts)
