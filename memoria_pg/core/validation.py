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
from .text import MAX_KEY_BYTES, MAX_NAME_CHARS, indexable_key, indexable_name

MAX_TENANT_CHARS = 200
MAX_FIELD_CHARS = 500  # an external id, an attribute's subject, name or value
FUTURE_TOLERANCE = dt.timedelta(days=1)
# psycopg reads a timestamptz as a datetime in the session's time zone, and datetime ends at the years
# 1 and 9999: a time within a day of either end could not be read back in some time zone (and a query
# whose candidates include it would fail). Times are kept a day inside.
MIN_TIME = dt.datetime(1, 1, 2, tzinfo=dt.UTC)
MAX_TIME = dt.datetime(9999, 12, 30, tzinfo=dt.UTC)
# Below this norm a vector has no meaningful direction; stored vectors are scaled to unit length, so
# float32 cosine distances never see a norm that underflows (distance NaN, or 0 to half the queries).
MIN_VECTOR_NORM = 1e-6
MAX_TOP_K = 10_000
MAX_METADATA_BYTES = 65_536  # a memory's metadata as UTF-8 JSON
MAX_METADATA_DEPTH = 32  # nesting of objects and arrays in metadata
# Entities of one memory: its mentions, co-occurrence pairs and graph mirror grow with them (the AGE
# mirror faster than linearly: 1,000 names took 4.9 s, 5,000 took 79 s in one statement holding the
# tenant's statistics). The most any memory of the five dev sets has is 255 (a long LongMemEval turn).
MAX_ENTITIES = 256


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


def tenant(value: object, where: str | None = None) -> str:
    """A tenant that can be set as a transaction's tenant (memoria.tenant). Every path that takes a
    tenant (store, store_many, query, the CLI, the graph functions) checks it here: an empty or
    non-string tenant is an error, never the default tenant."""
    if where is not None:  # a record's field: clean_text's messages, naming the record
        if not isinstance(value, str):
            raise InputError(f"{where}: tenant must be a non-empty string, got {type(value).__name__}")
        return clean_text(value, "tenant", where, MAX_TENANT_CHARS)
    if not isinstance(value, str):
        raise InputError(f"tenant must be a non-empty string, got {type(value).__name__}")
    if not value.strip() or "\x00" in value or not encodable(value):
        raise InputError("tenant must be a non-empty string of valid UTF-8 text without NUL bytes")
    if len(value) > MAX_TENANT_CHARS:
        raise InputError(f"tenant has {len(value)} characters; the limit is {MAX_TENANT_CHARS}")
    return value


def tenant_or_default(value: object, default: str) -> str:
    """The tenant given (checked), or `default` when it was omitted (None): "", 0 or False is an
    error, never the default tenant."""
    return default if value is None else tenant(value)


def shown(value: object, limit: int = 80) -> str:
    """A value as an error message echoes it: its repr, cut to `limit` characters (a caller may send
    10,000)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def memory_type(value: str | None, known: Collection[str], where: str | None = None) -> str | None:
    """`value` when it is None or one of the `known` memory types."""
    if value is None or value in known:
        return value
    prefix = f"{where}: " if where else ""
    raise InputError(
        f"{prefix}unknown memory_type {shown(value)}; known types: {list(known)} (add one with `memoria-pg types add "
        "NAME`)"
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
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOP_K:
        raise InputError(f"top_k must be a positive integer (at most {MAX_TOP_K:,}), got {value!r}")
    return value


def count(value: object, what: str) -> int:
    """A positive integer (a batch size, a number of writers); bools are not counts."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{what} must be a positive integer, got {value!r}")
    return value


def vector(value: object, dim: int, what: str) -> np.ndarray:
    """`dim` finite numbers (not strings or booleans) with a norm of at least MIN_VECTOR_NORM,
    scaled to unit length in float64 (unless it has unit length already) and returned as float32:
    cosine distance ignores the length, and a unit vector's float32 norm cannot underflow."""
    if isinstance(value, (str, bytes, Mapping)):
        raise InputError(f"{what} must be a list of numbers ({dim}), got {type(value).__name__}")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a list of numbers ({dim})") from None
    if array.dtype.kind not in "fiu" or (isinstance(value, (list, tuple)) and bool in map(type, value)):
        raise InputError(f"{what} must be a list of numbers ({dim}, not strings or booleans)")
    if array.shape != (dim,):
        raise InputError(f"{what} has shape {array.shape}, expected ({dim},)")
    array = array.astype(np.float64)
    if not np.all(np.isfinite(array)):
        raise InputError(f"{what} must be finite and non-zero (cosine distance is undefined otherwise)")
    scale = float(np.max(np.abs(array)))
    scaled = array / scale if scale > 0 else array
    length = float(np.linalg.norm(scaled))  # in [1, sqrt(dim)] unless all zero: no underflow
    if not scale * length >= MIN_VECTOR_NORM:
        raise InputError(
            f"{what} must be finite and non-zero: its norm {scale * length:.3g} is below {MIN_VECTOR_NORM:g} "
            "(cosine distance is undefined for it)"
        )
    if abs(scale * length - 1.0) <= 1e-6:  # unit length already (a model's): stored as given
        given: np.ndarray = array.astype(np.float32)
        return given
    unit: np.ndarray = (scaled / length).astype(np.float32)
    return unit


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
    """A storable UTC time (storable_time) at most FUTURE_TOLERANCE ahead of `now`; None is `now`."""
    if value is None:
        return now
    value = storable_time(value, "created_at", where)
    if value > now + FUTURE_TOLERANCE:
        raise InputError(f"{where}: created_at {value.isoformat()} is in the future")
    return value


def storable_time(value: object, what: str, where: str | None = None) -> dt.datetime:
    """An aware datetime in UTC from an ISO 8601 string, date or datetime (naive times are UTC), between
    MIN_TIME and MAX_TIME: one that can be stored and read back in any session time zone."""
    prefix = f"{where}: " if where else ""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"{prefix}{what} {value!r} is not an ISO 8601 date-time") from None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if not isinstance(value, dt.datetime):
        raise InputError(f"{prefix}{what} must be an ISO 8601 string or datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    try:
        utc = value.astimezone(dt.UTC)
    except (OverflowError, ValueError):
        utc = None  # before the year 1 or after 9999 in UTC
    if utc is None or not MIN_TIME <= utc <= MAX_TIME:
        raise InputError(
            f"{prefix}{what} {value.isoformat()} cannot be stored and read back: use a time from "
            f"{MIN_TIME.isoformat()} to {MAX_TIME.isoformat()}"
        )
    return utc


def metadata(value: object, where: str) -> dict[str, Any]:
    """A JSON object that PostgreSQL's jsonb can hold (no NaN, NUL or lone surrogates), nested at most
    MAX_METADATA_DEPTH deep and at most MAX_METADATA_BYTES as UTF-8 JSON."""
    value = value if value is not None else {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: metadata must be a JSON object, got {type(value).__name__}")
    if not _nested_within(value, MAX_METADATA_DEPTH):  # first: the checks below recurse
        raise InputError(f"{where}: metadata is nested more than {MAX_METADATA_DEPTH} levels deep")
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: metadata is not JSON-serializable: {exc}") from None
    if _any_string(value, lambda s: "\x00" in s):
        raise InputError(f"{where}: metadata contains a NUL byte; remove it (PostgreSQL jsonb cannot hold \\u0000)")
    if _any_string(value, lambda s: not s.isascii() and any("\ud800" <= ch <= "\udfff" for ch in s)):
        raise InputError(f"{where}: metadata contains an invalid (surrogate) character; pass valid UTF-8 text")
    if len(text) > MAX_METADATA_BYTES:  # escaped JSON is ASCII: measure the UTF-8 form
        size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
        if size > MAX_METADATA_BYTES:
            raise InputError(
                f"{where}: metadata is {size:,} bytes as JSON, over the limit of {MAX_METADATA_BYTES:,}; "
                "keep large data in the content or outside memoria"
            )
    return value


def external_id(value: object, where: str) -> str:
    """The caller's id of a memory: a string (an integer is taken as its decimal digits)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"{where}: external_id must be a string, got {type(value).__name__}")
    text = clean_text(str(value), "external_id", where, MAX_FIELD_CHARS)
    if not indexable_key(text):
        raise InputError(f"{where}: external_id is over {MAX_KEY_BYTES:,} bytes in UTF-8 (it is an index key)")
    return text


def entity_names(value: object, where: str) -> list[str]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InputError(f"{where}: entities must be a list of names, got {type(value).__name__}")
    names = [clean_text(e, "entity", where, MAX_NAME_CHARS) for e in value]
    if len(names) > MAX_ENTITIES:
        raise InputError(
            f"{where}: {len(names):,} entities; a memory may name at most {MAX_ENTITIES} (split it into several "
            "memories, or give the ones that matter)"
        )
    for name in names:
        if not indexable_name(name):
            raise InputError(
                f"{where}: entity {name[:40]!r}... is over {MAX_NAME_CHARS} characters or {MAX_KEY_BYTES:,} bytes "
                "once normalized (NFKC)"
            )
    return names


def attribute_triples(value: object, where: str) -> list[tuple[str, str, str]]:
    """[subject, attribute, value] triples (lists, tuples or {subject, attribute, value} objects)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InputError(f"{where}: attributes must be a list of [subject, attribute, value] triples")
    triples: list[tuple[str, str, str]] = []
    for item in value:
        if isinstance(item, Mapping):
            item = (item.get("subject"), item.get("attribute"), item.get("value"))
        if not isinstance(item, (list, tuple)) or len(item) != 3:
            raise InputError(f"{where}: attributes must be [subject, attribute, value] triples")
        subject, name, text = (clean_text(v, "attribute field", where, MAX_FIELD_CHARS) for v in item)
        if not indexable_key(subject):
            raise InputError(f"{where}: an attribute's subject is over {MAX_KEY_BYTES:,} bytes in UTF-8")
        triples.append((subject, name, text))
    return triples


def _nested_within(value: object, limit: int) -> bool:
    """Whether a JSON-like value nests objects and arrays at most `limit` deep (iterative: a value
    nested deeper than Python's recursion limit is refused, not a RecursionError)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def _any_string(value: object, test: Callable[[str], bool]) -> bool:
    """Whether `test` holds for any string in a JSON-like value (keys included)."""
    if isinstance(value, str):
        return test(value)
    if isinstance(value, dict):
        return any(_any_string(k, test) or _any_string(v, test) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_any_string(v, test) for v in value)
    return False


def moment(value: object, what: str, where: str | None = None) -> dt.datetime:
    """An aware UTC datetime from an ISO 8601 string, date or datetime (naive times are UTC): a
    validity start, an `as_of`, a `before`; one that can be stored and read back (storable_time)."""
    return storable_time(value, what, where)


MAX_MEMORY_ID = 2**63 - 1  # a bigint


def memory_id(value: object) -> int:
    """A memory id: a positive integer (not a bool) that a bigint holds."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MEMORY_ID:
        raise InputError(f"a memory id must be a positive integer up to {MAX_MEMORY_ID}, got {shown(value, 40)}")
    return value


def metadata_filter(value: object) -> dict[str, Any]:
    """A `where` filter: {metadata key: value}, matched by JSON containment."""
    if not isinstance(value, dict) or not value:
        raise InputError("where must be a non-empty object of metadata keys and values, e.g. {'speaker': 'Maya'}")
    return metadata(value, "where")
