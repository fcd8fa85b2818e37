"""Alembic, driven from the library and the CLI (`memoria-pg db ...`)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TextIO

from alembic import command
from alembic.config import Config as AlembicConfig

from ..errors import ExtensionMissing
from .database import VECTOR_HELP, connect, scalar
from .resources import migrations_dir


def alembic_config(
    dsn: str, *, memory_types: tuple[str, ...] = (), use_age: bool = True, stdout: TextIO | None = None
) -> AlembicConfig:
    path = migrations_dir()
    cfg = AlembicConfig(str(path / "alembic.ini"), stdout=stdout or io.StringIO())
    cfg.set_main_option("script_location", str(path))
    cfg.set_main_option("version_locations", str(path / "versions"))
    cfg.attributes["dsn"] = dsn
    cfg.attributes["memory_types"] = tuple(memory_types)
    cfg.attributes["use_age"] = use_age
    return cfg


def upgrade(dsn: str, revision: str = "head", *, memory_types: tuple[str, ...] = (), use_age: bool = True) -> None:
    _check_vector(dsn)
    command.upgrade(alembic_config(dsn, memory_types=memory_types, use_age=use_age), revision)


def downgrade(dsn: str, revision: str = "base") -> None:
    connect(dsn, autocommit=True, connect_timeout=10).close()  # "cannot connect" before Alembic starts
    command.downgrade(alembic_config(dsn), revision)


def current(dsn: str) -> str | None:
    with connect(dsn, autocommit=True) as conn:
        if scalar(conn, "SELECT to_regclass('public.alembic_version')") is None:
            return None
        row = conn.execute("SELECT version_num FROM public.alembic_version").fetchone()
        return row[0] if row else None


def history(dsn: str) -> list[tuple[str, str | None, str]]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config(dsn))
    return [
        (s.revision, _down(s.down_revision), (s.doc or "").splitlines()[0])
        for s in reversed(list(script.walk_revisions()))
    ]


def add_memory_type(dsn: str, name: str) -> bool:
    from ..config import valid_identifier

    valid_identifier(name, "memory type")
    with connect(dsn, autocommit=True) as conn, conn.transaction():
        return bool(scalar(conn, "SELECT memoria.add_memory_type(%s)", (name,)))


def _check_vector(dsn: str) -> None:
    with connect(dsn, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    if row is None:
        raise ExtensionMissing(VECTOR_HELP)


def _down(revision: str | Sequence[str] | None) -> str | None:
    return revision if revision is None or isinstance(revision, str) else ",".join(revision)
