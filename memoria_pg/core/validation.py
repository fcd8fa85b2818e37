"""Validation at the library's boundary: every caller-supplied value is checked here, once.

Each check returns the value it accepted (cleaned where that is part of the contract) or raises
InputError (a caller's value) or ConfigError (a setting) with a message naming what was wrong and
what to do. `where` names the record in a batch ("record 3", "m.jsonl line 7").
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError, InputError

MAX_TENANT_CHARS = 200
MAX_NAME_CHARS = 200  # an entity name
MAX_FIELD_CHARS = 500  # an external id, an attribute's subject, name or value
FUTURE_TOLERANCE = dt.timedelta(days=1)


def encodable(text: str) -> bool:
    """Whether `text` is valid UTF-8 (lone surrogates, e.g. from undecodable command-line bytes,
    cannot reach the server or a model)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def clean_text(value: object, what: str, where: str, max_chars: int) -> str:
    """A non-empty string of valid UTF-8 without NUL bytes and at most `max_chars` long."""
    if not isinstance(value, str):
        raise InputError(f"{where}: {what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InputError(f"{where}: {what} contains a NUL byte; remove it (PostgreSQL text cannot hold NUL)")
    if not encodable(value):
        raise InputError(f"{where}: {what} contains an invalid (surrogate) character; pass valid UTF-8 text")
    if not value.strip():
        raise InputError(f"{where}: {what} is empty")
    if len(value) > max_chars:
        hint = " (MEMORIA_MAX_CONTENT_CHARS); split it into several memories" if what == "content" else ""
        raise InputError(f"{where}: {what} has {len(value)} characters, over the limit of {max_chars}{hint}")
    return value


def query_text(text: object, max_chars: int) -> str:
    """The text of a query: a non-empty string of valid UTF-8, without NUL, at most `max_chars`."""
    if not isinstance(text, str):
        raise InputError(f"query must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InputError("query is empty")
    if "\x00" in text:
        raise InputError("query contains a NUL byte")
    if not encodable(text):
        raise InputError("query contains an invalid (surrogate) character; pass valid UTF-8 text")
    if len(text) > max_chars:
        raise InputError(f"query is {len(text)} characters; the limit is {max_chars}")
    return text


def tenant(value: object) -> str:
    """A tenant that can be set as a transaction's tenant (memoria.tenant)."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value or not encodable(value):
        raise InputError("tenant must be a non-empty string of valid UTF-8 text without NUL bytes")
    if len(value) > MAX_TENANT_CHARS:
        raise InputError(f"tenant has {len(value)} characters; the limit is {MAX_TENANT_CHARS}")
    return value


def memory_type(value: str | None, known: Collection[str], where: str | None = None) -> str | None:
    """`value` when it is None or one of the `known` memory types."""
    if value is None or value in known:
        return value
    prefix = f"{where}: " if where else ""
    raise InputError(
        f"{prefix}unknown memory_type {value!r}; known types: {list(known)} (add one with `memoria-pg types add NAME`)"
    )


def worker_names(names: Iterable[str], known: Collection[str], where: str) -> tuple[str, ...]:
    """The names as a tuple; ConfigError for a name that is not a registered worker (a setting)."""
    names = tuple(names)
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown workers {unknown}; choose from {list(known)}")
    return names


def requested_workers(names: Sequence[str] | None, known: Collection[str]) -> tuple[str, ...] | None:
    """A query's `workers=` override: None, or registered worker names (InputError otherwise)."""
    if names is None:
        return None
    if isinstance(names, str):
        raise InputError(f"workers must be a list of worker names, got the string {names!r}")
    unknown = [w for w in names if w not in known]
    if unknown:
        raise InputError(f"unknown workers {unknown}; choose from {list(known)}")
    return tuple(names)


def top_k(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"top_k must be a positive integer, got {value!r}")
    return value


def vector(value: object, dim: int, what: str) -> np.ndarray:
    """A finite, non-zero float32 vector of `dim` numbers (cosine distance is undefined otherwise)."""
    try:
        array = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a list of numbers") from None
    if array.shape != (dim,):
        raise InputError(f"{what} has shape {array.shape}, expected ({dim},)")
    if not np.all(np.isfinite(array)) or not np.any(array):
        raise InputError(f"{what} must be finite and non-zero (cosine distance is undefined otherwise)")
    return array


def importance(value: object, where: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{where}: importance must be a number between 0 and 1, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InputError(f"{where}: importance must be a number between 0 and 1, got {value!r}")
    return number


def pinned(value: object, where: str) -> bool:
    if not isinstance(value, bool) and value not in (0, 1):
        raise InputError(f"{where}: pinned must be true or false, got {value!r}")
    return bool(value)


def created_at(value: object, where: str, now: dt.datetime) -> dt.datetime:
    """An aware datetime from an ISO 8601 string, date or datetime; naive times are taken as UTC."""
    if value is None:
        return now
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"{where}: created_at {value!r} is not an ISO 8601 date-time") from None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if not isinstance(value, dt.datetime):
        raise InputError(f"{where}: created_at must be an ISO 8601 string or datetime")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    if value > now + FUTURE_TOLERANCE:
        raise InputError(f"{where}: created_at {value.isoformat()} is in the future")
    return value


def metadata(value: object, where: str) -> dict[str, Any]:
    """A JSON object that PostgreSQL's jsonb can hold (no NaN, NUL or lone surrogates)."""
    value = value if value is not None else {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: metadata must be a JSON object")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: metadata is not JSON-serializable: {exc}") from None
    if _any_string(value, lambda s: "\x00" in s):
        raise InputError(f"{where}: metadata contains a NUL byte; remove it (PostgreSQL jsonb cannot hold \\u0000)")
    if _any_string(value, lambda s: not s.isascii() and any("\ud800" <= ch <= "\udfff" for ch in s)):
        raise InputError(f"{where}: metadata contains an invalid (surrogate) character; pass valid UTF-8 text")
    return value


def entity_names(value: object, where: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InputError(f"{where}: entities must be a list of names")
    return [clean_text(e, "entity", where, MAX_NAME_CHARS) for e in value]


def attribute_triples(value: Iterable[object], where: str) -> list[tuple[str, str, str]]:
    """[subject, attribute, value] triples (lists, tuples or {subject, attribute, value} objects)."""
    triples: list[tuple[str, str, str]] = []
    for item in value:
        if isinstance(item, Mapping):
            item = (item.get("subject"), item.get("attribute"), item.get("value"))
        if not isinstance(item, (list, tuple)) or len(item) != 3:
            raise InputError(f"{where}: attributes must be [subject, attribute, value] triples")
        subject, name, text = (clean_text(v, "attribute field", where, MAX_FIELD_CHARS) for v in item)
        triples.append((subject, name, text))
    return triples


def _any_string(value: object, test: Callable[[str], bool]) -> bool:
    """Whether `test` holds for any string in a JSON-like value (keys included)."""
    if isinstance(value, str):
        return test(value)
    if isinstance(value, dict):
        return any(_any_string(k, test) or _any_string(v, test) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_any_string(v, test) for v in value)
    return False
