"""What every evaluation data set becomes: documents (the memories) and queries with their answers.

The data is read where it lies (--data, or MEMORIA_EVAL_DATA) and is never copied: several sets
are licensed non-commercial.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoria_pg import MemoriaError

DATA_ENV = "MEMORIA_EVAL_DATA"
DATA_LAYOUT = "locomo/, scifact/, hotpotqa/, longmemeval/ and msmarco/"


class DataMissing(MemoriaError):
    """An evaluation data set is not where it was looked for."""


@dataclass(frozen=True)
class Document:
    """One memory to store. `doc_id` is the id the answers name (dia_id, corpus id, turn id)."""

    doc_id: str
    tenant: str
    content: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    created_at: dt.datetime | None = None
    context: str | None = None  # stored as the memory's context (MemoryRecord.context)


def neighbour_context(turns: list[str], i: int, n: int) -> str | None:
    """The context of a conversation's turn i (memoria's MemoryRecord.context): the n turns before
    and the n after it in the same session (`turns`), one per line; None when n is 0 or there are
    none. A stored conversation is known whole, and a turn is often only understood with the
    question it answers or the reply that confirms it."""
    if n <= 0:
        return None
    return "\n".join(turns[max(0, i - n) : i] + turns[i + 1 : i + 1 + n]) or None


@dataclass(frozen=True)
class Query:
    """One question, asked of its tenant's memories; `relevant` are the doc_ids that answer it."""

    query_id: str
    tenant: str
    text: str
    relevant: frozenset[str]
    group: str = "all"  # LoCoMo category, LongMemEval question type
    answer_sessions: frozenset[str] = frozenset()  # LongMemEval only
    # when the question is asked (LongMemEval's question_date): MemorySystem.query's reference_time
    reference_time: dt.datetime | None = None
    grades: Mapping[str, int] = field(default_factory=dict, hash=False, compare=False)  # BEIR grades; absent: 1


@dataclass
class Dataset:
    name: str
    kind: str  # "locomo" | "beir" | "longmemeval": which metrics apply
    documents: list[Document]
    queries: list[Query]
    notes: list[str] = field(default_factory=list)

    @property
    def tenants(self) -> list[str]:
        return list(dict.fromkeys(d.tenant for d in self.documents))


def default_data_root() -> Path:
    """The folder MEMORIA_EVAL_DATA names; DataMissing when it is not set (there is no default)."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    raise DataMissing(
        f"no evaluation data folder given: pass --data PATH or set {DATA_ENV} to the folder holding {DATA_LAYOUT}"
    )


def require(path: Path, what: str) -> Path:
    if not path.exists():
        raise DataMissing(
            f"{what} not found at {path}: pass the evaluation data folder (holding {DATA_LAYOUT}) "
            f"with --data or {DATA_ENV}"
        )
    return path


def select(
    dataset: Dataset,
    *,
    limit_queries: int | None = None,
    max_tenants: int | None = None,
    corpus_limit: int | None = None,
) -> Dataset:
    """A smaller copy: the first tenants, the first queries, and per tenant the documents relevant
    to the kept queries plus the first `corpus_limit` others. Each restriction is noted."""
    queries, notes = list(dataset.queries), list(dataset.notes)
    if max_tenants is not None:
        kept = set(dataset.tenants[:max_tenants])
        queries = [q for q in queries if q.tenant in kept]
        notes.append(f"restricted to the first {max_tenants} tenant(s): {', '.join(sorted(kept))}")
    if limit_queries is not None and limit_queries < len(queries):
        queries = queries[:limit_queries]
        notes.append(f"restricted to the first {limit_queries} queries")
    tenants = {q.tenant for q in queries}
    documents = [d for d in dataset.documents if d.tenant in tenants]
    if corpus_limit is not None:
        relevant = {(q.tenant, r) for q in queries for r in q.relevant}
        others: dict[str, int] = {}
        kept_docs = []
        for d in documents:
            if (d.tenant, d.doc_id) in relevant:
                kept_docs.append(d)
            elif others.get(d.tenant, 0) < corpus_limit:
                others[d.tenant] = others.get(d.tenant, 0) + 1
                kept_docs.append(d)
        if len(kept_docs) < len(documents):
            notes.append(
                f"corpus restricted to the {len(kept_docs) - sum(others.values())} documents relevant "
                f"to the kept queries plus the first {corpus_limit} others per tenant "
                f"({len(kept_docs)} of {len(documents)})"
            )
        documents = kept_docs
    return dataclasses.replace(dataset, documents=documents, queries=queries, notes=notes)
