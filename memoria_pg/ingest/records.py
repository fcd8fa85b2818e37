"""Records -> prepared memories: validation, tokenization and extraction (no database access but
KnownTypes' look-up of a memory type it does not know)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ..core import validation
from ..core.entities import EntityExtractor, RuleBasedExtractor, extract_attributes
from ..core.text import content_hash, dedupe_names, indexable_key, indexable_name, indexed_term_counts
from ..core.types import MemoryRecord
from ..errors import InputError

Key = tuple[str, str, str]


@dataclass
class Prepared:
    """A validated record with what its batch writes: BM25 postings, entities and attributes."""

    record: MemoryRecord
    tenant: str
    memory_type: str
    dedup_key: str
    terms: dict[str, int]
    doc_len: int
    entities: list[str]
    attributes: list[tuple[str, str, str]]

    @property
    def key(self) -> Key:
        """What makes a memory a duplicate: tenant, memory type and dedup key (content hash or external id)."""
        return self.tenant, self.memory_type, self.dedup_key


def coerce_record(raw: MemoryRecord | Mapping[str, Any], where: str) -> MemoryRecord:
    """A MemoryRecord from a record or a mapping (JSONL/CSV row), with its fields checked."""
    if isinstance(raw, MemoryRecord):
        return raw
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: expected an object with at least 'content', got {type(raw).__name__}")
    known = set(MemoryRecord.__dataclass_fields__)
    unknown = set(raw) - known
    if unknown:
        raise InputError(f"{where}: unknown fields {sorted(unknown)}; allowed: {sorted(known)}")
    if "content" not in raw:
        raise InputError(f"{where}: missing required field 'content'")
    values = dict(raw)
    for name in ("importance", "created_at"):
        if values.get(name) is None or (isinstance(values[name], str) and values[name] == ""):
            values.pop(name, None)
    if values.get("pinned") is None:
        values.pop("pinned", None)
    return MemoryRecord(**values)


@dataclass(frozen=True)
class RecordRules:
    """What a record is checked against: the known memory types, defaults and limits."""

    memory_types: Collection[str]  # KnownTypes in a MemorySystem: a name it lacks is looked up
    default_type: str
    default_tenant: str
    dim: int
    max_chars: int
    entity_extractor: EntityExtractor | None = None


def prepare(raw: MemoryRecord | Mapping[str, Any], where: str, now: dt.datetime, rules: RecordRules) -> Prepared:
    """Validate one record (InputError names it) and derive its postings, entities and attributes."""
    record = _validated(coerce_record(raw, where), where, now, rules)
    terms, doc_len = indexed_term_counts(record.content, record.context)
    speaker = record.metadata.get("speaker") if isinstance(record.metadata.get("speaker"), str) else None
    if record.entities is None:
        entities = (rules.entity_extractor or RuleBasedExtractor()).extract(record.content, ())
        if speaker:
            entities = [speaker, *entities]
        # Extracted names too long to be an index key are not entities (a run of capitalized words);
        # of the others, the first MAX_ENTITIES in text order (the speaker first).
        entities = dedupe_names([name for name in entities if indexable_name(name)])[: validation.MAX_ENTITIES]
    else:
        entities = validation.entity_names(record.entities, where)
    if record.attributes is None:
        attributes = [a for a in extract_attributes(record.content, speaker=speaker) if indexable_key(a[0])]
    else:
        attributes = validation.attribute_triples(record.attributes, where)
    key = f"ext:{record.external_id}" if record.external_id else f"sha256:{content_hash(record.content)}"
    assert record.tenant is not None and record.memory_type is not None
    return Prepared(
        record, record.tenant, record.memory_type, key, dict(terms), doc_len, dedupe_names(entities), attributes
    )


def _validated(record: MemoryRecord, where: str, now: dt.datetime, rules: RecordRules) -> MemoryRecord:
    """The record with every field checked and normalized in place (tenant and type defaulted)."""
    record.content = validation.clean_text(record.content, "content", where, rules.max_chars)
    # Omitted (None): the defaults. Given, they are checked: "" is no tenant and no memory type.
    record.tenant = validation.tenant(record.tenant if record.tenant is not None else rules.default_tenant, where)
    kind = record.memory_type if record.memory_type is not None else rules.default_type
    record.memory_type = validation.memory_type(kind, rules.memory_types, where)
    record.metadata = validation.metadata(record.metadata, where)
    record.importance = validation.importance(record.importance, where)
    validation.pinned(record.pinned, where)
    record.created_at = validation.created_at(record.created_at, where, now)
    if record.valid_from is not None:
        record.valid_from = validation.moment(record.valid_from, "valid_from", where)
    if record.valid_to is not None:
        record.valid_to = validation.moment(record.valid_to, "valid_to", where)
        start = record.valid_from or record.created_at
        if record.valid_to < start:
            raise InputError(
                f"{where}: valid_to {record.valid_to.isoformat()} is before the memory begins to hold "
                f"({start.isoformat()}, its valid_from or created_at): a memory cannot stop holding before it starts"
            )
    if record.external_id is not None:
        record.external_id = validation.external_id(record.external_id, where)
    if record.embedding is not None:
        record.embedding = validation.vector(record.embedding, rules.dim, f"{where}: embedding")
    if isinstance(record.context, str) and not record.context.strip():
        record.context = None  # only whitespace: no context
    if record.context is not None:
        record.context = validation.clean_text(record.context, "context", where, rules.max_chars)
    return record
