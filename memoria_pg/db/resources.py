"""Locates sql/ and migrations/: at the repository top in a checkout, inside the wheel otherwise."""

from __future__ import annotations

import functools
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


@functools.cache
def load_sql(name: str) -> str:
    """The text of sql/<name>.sql (name may contain a sub-folder: 'workers/vector')."""
    path = sql_dir() / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file {path}")
    return path.read_text(encoding="utf-8")
