"""Alembic, driven from the library and the CLI (`memoria-pg db ...`)."""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from typing import TextIO

from alembic import command
from alembic.config import Config as AlembicConfig

from ..errors import ExtensionMissing
from .database import VECTOR_HELP, connect, scalar, schema_revision
from .resources import LEGACY_VERSION_TABLE, VERSION_TABLE, migrations_dir


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
    cfg.attributes["version_table"] = VERSION_TABLE
    return cfg


def upgrade(dsn: str, revision: str = "head", *, memory_types: tuple[str, ...] = (), use_age: bool = True) -> None:
    _check_vector(dsn)
    adopt_version_table(dsn)
    command.upgrade(alembic_config(dsn, memory_types=memory_types, use_age=use_age), revision)


def downgrade(dsn: str, revision: str = "base") -> None:
    adopt_version_table(dsn)  # also says "cannot connect" before Alembic starts
    command.downgrade(alembic_config(dsn), revision)


def current(dsn: str) -> str | None:
    """The schema's revision (None: not installed). Read only: a revision still recorded where
    releases up to 0019 kept it counts until the next upgrade or downgrade moves it."""
    with connect(dsn, autocommit=True) as conn:
        return schema_revision(conn)


@functools.cache
def revisions() -> frozenset[str]:
    """Every revision of memoria-pg's migrations."""
    return frozenset(revision for revision, _down, _doc in history(""))


def adopt_version_table(dsn: str) -> bool:
    """Move memoria-pg's revision from public.alembic_version (where releases up to revision 0019
    recorded it, beside any revision of the application's own Alembic history) to its own table, in
    one transaction; the legacy table is dropped when nothing else is left in it. Only a revision of
    memoria-pg's, with the memoria schema present, is moved. True when it moved one."""
    known = sorted(revisions())
    with connect(dsn, autocommit=True, connect_timeout=10) as conn, conn.transaction():
        if scalar(conn, "SELECT to_regclass(%s)", (f"public.{VERSION_TABLE}",)) is not None:
            return False
        if scalar(conn, "SELECT to_regclass(%s)", (f"public.{LEGACY_VERSION_TABLE}",)) is None:
            return False
        if scalar(conn, "SELECT to_regnamespace('memoria')") is None:
            return False
        conn.execute(f"LOCK TABLE public.{LEGACY_VERSION_TABLE} IN SHARE ROW EXCLUSIVE MODE")  # two upgrades at once
        ours = [
            r[0]
            for r in conn.execute(
                f"SELECT version_num FROM public.{LEGACY_VERSION_TABLE} WHERE version_num = ANY(%s)", (known,)
            )
        ]
        if not ours:
            return False
        conn.execute(
            f"CREATE TABLE public.{VERSION_TABLE} (version_num varchar(32) NOT NULL, "
            f"CONSTRAINT {VERSION_TABLE}_pkc PRIMARY KEY (version_num))"
        )
        conn.execute(f"INSERT INTO public.{VERSION_TABLE} (version_num) SELECT unnest(%s::text[])", (ours,))
        conn.execute(f"DELETE FROM public.{LEGACY_VERSION_TABLE} WHERE version_num = ANY(%s)", (ours,))
        if scalar(conn, f"SELECT count(*) FROM public.{LEGACY_VERSION_TABLE}") == 0:
            conn.execute(f"DROP TABLE public.{LEGACY_VERSION_TABLE}")
        return True


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
