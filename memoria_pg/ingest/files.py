"""Reading memories from JSONL and CSV files, each record tagged with its line for error messages."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InputError

CSV_JSON_FIELDS = ("metadata", "entities", "attributes", "embedding")


def detect_format(path: Path, fmt: str | None) -> str:
    if fmt:
        return fmt
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return "csv"
    raise InputError(f"cannot tell the format of {path.name}: use a .jsonl or .csv name, or --format")


def read_records(path: Path, fmt: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, record) pairs; where is 'FILE line N'. Raises InputError on the first unreadable line."""
    fmt = detect_format(path, fmt)
    if fmt == "jsonl":
        yield from _jsonl(path)
    elif fmt == "csv":
        yield from _csv(path)
    else:
        raise InputError(f"unknown format {fmt!r}: use jsonl or csv")


def _jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    # Bytes, decoded line by line: a text-mode reader decodes ahead in chunks, so a bad byte on
    # line 2 would be reported on line 1.
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            where = f"{path.name} line {lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{where}: not valid UTF-8 ({exc.reason})") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(record, dict):
                raise InputError(f"{where}: expected a JSON object, got {type(record).__name__}")
            yield where, record


def _csv(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        with path.open("r", encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or "content" not in reader.fieldnames:
                raise InputError(f"{path.name} line 1: the CSV header must name a 'content' column")
            for row in reader:
                where = f"{path.name} line {reader.line_num}"
                if None in row:
                    raise InputError(f"{where}: more fields than the header has")
                yield where, _csv_row(row, where)
    except UnicodeDecodeError as exc:
        raise InputError(f"{path.name}: not valid UTF-8 ({exc.reason})") from None


def _csv_row(row: dict[str, str], where: str) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for key, value in row.items():
        if value is None or value == "":
            continue
        if key in CSV_JSON_FIELDS:
            if key == "entities" and not value.lstrip().startswith("["):
                record[key] = [v.strip() for v in value.split(";") if v.strip()]
                continue
            try:
                record[key] = json.loads(value)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: column {key!r} is not valid JSON ({exc.msg})") from None
        elif key == "pinned":
            record[key] = value.strip().lower() in ("1", "true", "yes")
        else:
            record[key] = value
    return record
