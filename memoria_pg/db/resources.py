"""Locates sql/ and migrations/: at the repository top in a checkout, inside the wheel otherwise."""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def _locate(top: str, package: str) -> Path:
    if (_REPO / top).is_dir() and (_REPO / "pyproject.toml").is_file():
        return _REPO / top
    return Path(str(resources.files(package)))


def sql_dir() -> Path:
    return _locate("sql", "memoria_pg._sql")


def migrations_dir() -> Path:
    return _locate("migrations", "memoria_pg._migrations")


# Alembic's record of the schema's revision: a table of its own, not Alembic's default public.alembic_version,
# which the application whose database memoria-pg shares may keep for its own migrations (the two
# histories would then read each other's revision: "Can't locate revision"). In public, not in schema
# memoria, which the first migration creates and the last downgrade drops.
VERSION_TABLE = "memoria_alembic_version"
LEGACY_VERSION_TABLE = "alembic_version"  # where revisions up to 0019 recorded it (migrate.adopt_version_table)
_REVISION_FILE = re.compile(r"(\d{4})_\w+\.py")


@functools.cache
def known_revisions() -> tuple[str, ...]:
    """This library's schema revisions, oldest first, from its migrations' file names (NNNN_name.py:
    revision NNNN), without importing Alembic, which the query path's start-up does not load."""
    names = (f.name for f in (migrations_dir() / "versions").iterdir())
    found = sorted(m.group(1) for name in names if (m := _REVISION_FILE.fullmatch(name)))
    if not found:
        raise FileNotFoundError(f"no migrations in {migrations_dir() / 'versions'}")
    return tuple(found)


def head_revision() -> str:
    """This library's newest schema revision."""
    return known_revisions()[-1]


@functools.cache
def load_sql(name: str) -> str:
    """The text of sql/<name>.sql (name may contain a sub-folder: 'workers/vector')."""
    path = sql_dir() / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file {path}")
    return path.read_text(encoding="utf-8")
