"""Reading memories from JSONL, CSV and TSV files, each record tagged with its line for error messages."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import InputError

CSV_JSON_FIELDS = ("metadata", "entities", "attributes", "embedding")
CSV_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
FORMATS = ("jsonl", "csv", "tsv")
_BOM = b"\xef\xbb\xbf"


def detect_format(path: Path, fmt: str | None) -> str:
    if fmt:
        return fmt
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return suffix[1:]
    raise InputError(f"cannot tell the format of {path.name}: use a .jsonl, .csv or .tsv name, or --format")


def read_records(path: Path, fmt: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, record) pairs; where is 'FILE line N'. Raises InputError on the first unreadable line."""
    fmt = detect_format(path, fmt)
    if fmt == "jsonl":
        yield from _jsonl(path)
    elif fmt in ("csv", "tsv"):
        yield from _csv(path, "\t" if fmt == "tsv" else ",")
    else:
        raise InputError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")


def _jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    # Bytes, decoded line by line: a text-mode reader decodes ahead in chunks, so a bad byte on
    # line 2 would be reported on line 1.
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            where = f"{path.name} line {lineno}"
            line = _decoded(raw[len(_BOM) :] if lineno == 1 and raw.startswith(_BOM) else raw, where)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            except RecursionError:
                raise InputError(f"{where}: JSON nested too deeply") from None
            if not isinstance(record, dict):
                raise InputError(f"{where}: expected a JSON object, got {type(record).__name__}")
            yield where, record


def _decoded(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not valid UTF-8 ({exc.reason} at byte {exc.start + 1})") from None


def _lines(fh: BinaryIO, name: str) -> Iterator[str]:
    """The file's lines (ended by \\n, \\r\\n or \\r, as a text file opened with newline="" reads them),
    decoded one by one (an invalid byte names its line), without a leading BOM."""
    lineno = 0
    for chunk in fh:
        for raw in chunk.splitlines(keepends=True):
            lineno += 1
            if lineno == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            yield _decoded(raw, f"{name} line {lineno}")


def _csv(path: Path, delimiter: str) -> Iterator[tuple[str, dict[str, Any]]]:
    # strict: a quote that is never closed is an error at the end of the file, not the rest of the
    # file read as one field. A field over csv.field_size_limit() (128 KiB, more than max_content_chars)
    # is an error naming its record's line.
    with path.open("rb") as fh:
        reader = csv.reader(_lines(fh, path.name), delimiter=delimiter, strict=True)
        header = _csv_next(reader, f"{path.name} line 1")
        if header is None or "content" not in header:
            kind = "TSV" if delimiter == "\t" else "CSV"
            raise InputError(f"{path.name} line 1: the {kind} header must name a 'content' column")
        while True:
            start = reader.line_num + 1
            row = _csv_next(reader, f"{path.name} line {start}")
            if row is None:
                return
            where = f"{path.name} line {start}"
            if not row:
                continue  # a blank line
            if len(row) > len(header):
                raise InputError(f"{where}: more fields than the header has ({len(row)} > {len(header)})")
            yield where, _csv_row(dict(zip(header, row)), where)


def _csv_next(reader: Any, where: str) -> list[str] | None:
    """The reader's next row, None at the end; InputError (naming where the row starts) on a row
    csv cannot read: a quote never closed, a field over the size limit, a NUL byte."""
    try:
        row: list[str] = next(reader)
    except StopIteration:
        return None
    except csv.Error as exc:
        message = str(exc)
        if "unexpected end of data" in message:
            message = "a quoted field is never closed (a missing quote runs to the end of the file)"
        raise InputError(f"{where}: unreadable row: {message}") from None
    return row


def _csv_row(row: dict[str, str], where: str) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for key, value in row.items():
        if value == "":
            continue
        if key in CSV_JSON_FIELDS:
            if key == "entities" and not value.lstrip().startswith("["):
                record[key] = [v.strip() for v in value.split(";") if v.strip()]
                continue
            try:
                record[key] = json.loads(value)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: column {key!r} is not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise InputError(f"{where}: column {key!r} is JSON nested too deeply") from None
        elif key == "pinned":
            flag = CSV_BOOLEANS.get(value.strip().lower())
            if flag is None:
                raise InputError(f"{where}: pinned must be true or false (or 1/0, yes/no), got {value!r}")
            record[key] = flag
        else:
            record[key] = value
    return record
