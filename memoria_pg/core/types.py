"""Plain data passed between the stages of the retrieval path (the spec's nouns)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Validity:
    """Which memories a query sees: those valid at `as_of` (None: now), or all with include_invalid."""

    as_of: dt.datetime | None = None
    include_invalid: bool = False


VALID_NOW = Validity()  # the default: what holds now


@dataclass
class ProcessedQuery:
    """QueryProcessor's output: what every downstream stage reads."""

    text: str
    normalized: str
    tokens: list[str]
    tenant: str
    memory_type_hint: str | None = None
    entities: list[str] = field(default_factory=list)
    phrases: list[str] = field(default_factory=list)
    subject: str | None = None
    attribute: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    validity: Validity = field(default_factory=Validity)  # the query time (as_of), whether invalid ones count
    # the creation times the query speaks of ("last week": query/time_window.py), [start, end), or None
    time_window: tuple[dt.datetime, dt.datetime] | None = None


class KnownTypes(Collection[str]):
    """The memory types as this process knows them, shared by ingestion, queries and the lifecycle.

    A name it does not know is looked up again (`load`: one SELECT of a few rows) before it counts
    as unknown, so a type another process added (`memoria-pg types add` beside a running server) is
    accepted without a restart; a miss costs what a request costs anyway. Code that only probes for
    a name (routing's pools, the query's type cues) reads `names`, the snapshot, so that a built-in
    type a deployment left out never causes a look-up.
    """

    def __init__(self, load: Callable[[], Sequence[str]]) -> None:
        self._load = load
        self.names: tuple[str, ...] = tuple(load())

    def refresh(self) -> tuple[str, ...]:
        """Read the types again; returns them."""
        self.names = tuple(self._load())
        return self.names

    def __contains__(self, name: object) -> bool:
        return name in self.names or (isinstance(name, str) and name in self.refresh())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class Route:
    """The retrieval configuration the Router picks for a query."""

    name: str
    workers: tuple[str, ...]
    graph_depth: int = 2
    signals: tuple[str, ...] = ()
    pool: str | None = None
    fallback_pools: tuple[str, ...] = ()


@dataclass(frozen=True)
class Shard:
    """One partition of `memories` (one memory type) or the single default shard (memory_type None)."""

    memory_type: str | None


@dataclass
class SourceHit:
    """One row a retrieval worker returned: `score` is source-specific (vector: cosine distance)."""

    memory_id: int
    source: str
    rank: int
    score: float
    memory_type: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class CandidateRecord:
    """A unique memory in the candidate set, with every source that found it and their scores."""

    memory_id: int
    tenant: str
    memory_type: str
    content: str
    metadata: dict[str, Any]
    importance: float
    created_at: dt.datetime
    last_accessed_at: dt.datetime | None
    access_count: int
    embedding: np.ndarray | None  # None unless the ranking stage reads it (RankingStage: MMR, signal plugins)
    external_id: str | None = None
    sources: list[str] = field(default_factory=list)
    # per-source scores: vector_distance, bm25, fusion, graph_hops, attribute_distance, phrase,
    # relevance, and <source>_rank for every source
    scores: dict[str, float] = field(default_factory=dict)
    base_score: float = 0.0  # 1 / (1 + vector distance) when the vector worker found it
    retrieval_score: float = 0.0  # fused score of all sources, used by retrieval-only mode
    final_score: float = 0.0
    explanation: dict[str, float] = field(default_factory=dict)


@dataclass
class MemoryRecord:
    """One memory to store. Only `content` is required."""

    content: str
    memory_type: str | None = None
    tenant: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    importance: float = 0.5
    created_at: dt.datetime | None = None
    entities: list[str] | None = None  # None: extracted; a list: used as given
    attributes: list[tuple[str, str, str]] | None = None  # (subject, attribute, value)
    external_id: str | None = None
    embedding: Sequence[float] | np.ndarray | None = None
    pinned: bool = False
    # Text that situates the memory (the turns before it in a conversation, a document's title):
    # indexed with it - BM25 terms at a lower weight, and in the embedding - but not its content.
    context: str | None = None
    # When what it says starts to hold (its facts supersede older ones from then); None: created_at.
    valid_from: dt.datetime | None = None
    # When it stopped holding (stored invalidated, as `invalidate(at=...)` would leave it); None: it holds.
    valid_to: dt.datetime | None = None


@dataclass
class StoreResult:
    inserted: int = 0
    duplicates: int = 0
    ids: list[int | None] = field(default_factory=list)  # per record: its new id, None for a duplicate
    # per record: for a duplicate, the id of the memory it repeats (stored before, or earlier in the
    # same call); None for a record stored now. Filled when ids is.
    existing: list[int | None] = field(default_factory=list)
    # rows staged: memories + their BM25 terms + entities + attributes (a memory's terms and entities
    # travel as arrays in its COPY row)
    copy_rows: int = 0


@dataclass
class Memory:
    """A stored memory as `MemorySystem.get` returns it.

    `status`: "active"; "invalidated" (valid_to is set: queries leave it out unless asked); or
    "superseded" (a newer memory states a different value for one of its single-valued facts:
    `superseded_by`; it stays retrievable and ranks below the newer fact for current questions).
    """

    id: int
    tenant: str
    memory_type: str
    content: str
    context: str | None
    metadata: dict[str, Any]
    external_id: str | None
    importance: float
    pinned: bool
    created_at: dt.datetime
    valid_from: dt.datetime
    valid_to: dt.datetime | None
    status: str
    superseded_by: int | None = None


@dataclass
class HistoryEvent:
    """One entry of a memory's history: stored, updated (`detail["previous"]`: the fields it had),
    invalidated, restored or deleted."""

    id: int
    memory_id: int
    event: str
    at: dt.datetime
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class ForgetResult:
    """What `forget` matched and removed (`deleted` is 0 on a dry run)."""

    matched: int
    deleted: int
    ids: list[int] = field(default_factory=list)
