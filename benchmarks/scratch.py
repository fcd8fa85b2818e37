"""A scratch database for a benchmark, and its Markdown report written under results/."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "scale"


def add_arguments(parser: argparse.ArgumentParser, db: str) -> None:
    """--dsn (the server's admin DSN), --db (the scratch database's name), --keep and --out."""
    parser.add_argument(
        "--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", "postgresql://postgres@127.0.0.1:55432/postgres")
    )
    parser.add_argument("--db", default=db, help="the scratch database, made anew and dropped at the end")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--out", default=str(RESULTS))


@contextlib.contextmanager
def scratch_database(dsn: str, name: str, *, keep: bool = False) -> Iterator[str]:
    """A fresh database `name` on the server of `dsn` (dropped first if it is there): its DSN. Dropped
    at the end unless `keep`."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = name
    try:
        yield psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]
    finally:
        if not keep:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def heading(title: str) -> str:
    """A report's first line: `title`, the UTC time and the commit of this checkout."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return f"# {title} ({dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit})"


def write_report(lines: list[str], out: str | Path, kind: str) -> Path:
    """Prints the report and writes it to <out>/<UTC timestamp>-<kind>.md."""
    text = "\n".join(lines) + "\n"
    print(text)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%S')}-{kind}.md"
    path.write_text(text, encoding="utf-8")
    print(f"written: {path}")
    return path
