"""Request and response bodies of the REST API (and of the MCP tools' results).

Requests carry types only: the library validates every value (lengths, ranges, known memory types,
dimensions) as it does for a direct call, so the rules and their messages stay in one place. Unknown
fields are refused, `tenant` among them: the tenant comes from the API key.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from .. import CandidateRecord, Diagnostics


class MemoryIn(BaseModel):
    """One memory, in the ingest record format (README, "Ingest file format") without `tenant`."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, description="The memory's text (at most max_content_chars, 100,000 by default)")
    memory_type: str | None = Field(None, description="One of the configured memory types; default `general`")
    metadata: dict[str, Any] = Field(default_factory=dict, description="A JSON object; `speaker` feeds extraction")
    importance: float = Field(0.5, ge=0, le=1)
    created_at: dt.datetime | None = Field(None, description="ISO 8601; naive = UTC; default now")
    entities: list[str] | None = Field(None, description="Entity names (replaces extraction)")
    attributes: list[tuple[str, str, str]] | None = Field(
        None, description="[subject, attribute, value] triples (replace extraction)"
    )
    external_id: str | None = Field(None, description="Your id: storing the same external_id again is a no-op")
    embedding: list[float] | None = Field(None, description="The vector (embedding_dim floats) instead of the model's")
    pinned: StrictBool = Field(False, description="Always in its type's relevance pool")
    context: str | None = Field(None, description="Text that situates the memory (e.g. the turn it answers)")
    valid_from: dt.datetime | None = Field(None, description="From when it holds; default created_at")
    valid_to: dt.datetime | None = Field(None, description="Until when it held (stored invalidated); default: it holds")

    def record(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class StoreResponse(BaseModel):
    inserted: int = Field(description="Memories written")
    duplicates: int = Field(description="Memories already stored (same content or external_id, tenant and type)")
    ids: list[int | None] = Field(description="Per memory, in input order: its new id, or null for a duplicate")
    existing_ids: list[int | None] = Field(
        description="Per memory, in input order: for a duplicate, the id of the memory it repeats; null for a new one"
    )


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The query (at most max_query_chars, 4,000 by default)")
    memory_type: str | None = Field(None, description="Only memories of this type")
    top_k: int | None = Field(None, ge=1, le=1000, description="Memories returned; default the server's top_k (10)")
    workers: list[str] | None = Field(
        None,
        description="Retrieval workers instead of the route's: vector, bm25, phrase, attribute, graph, fusion, "
        "temporal",
    )
    ranking: StrictBool | None = Field(None, description="false: retrieval order, no ranking stage")
    v3: StrictBool = Field(False, description="true: the V3 path (vector search only)")
    as_of: dt.datetime | None = Field(None, description="Answer as of this time: memories valid then (ISO 8601)")
    include_invalid: StrictBool = Field(False, description="Also invalidated memories")
    reference_time: dt.datetime | None = Field(
        None,
        description="The time the query is asked at, which 'last week' or 'four weeks ago' count back from "
        "(default: as_of, else now; ISO 8601)",
    )
    diagnostics: StrictBool = Field(False, description="Include every diagnostic of the query")
    explain: StrictBool = Field(False, description="Include the explain output (each worker's SQL, plan and time)")


class MemoryOut(BaseModel):
    id: int
    memory_type: str
    content: str
    metadata: dict[str, Any]
    importance: float
    created_at: dt.datetime
    sources: list[str] = Field(description="The retrieval workers that found it")
    scores: dict[str, float] = Field(description="Per source: its score and rank (e.g. vector_distance, bm25_rank)")
    retrieval_score: float = Field(description="The fused score of all sources")
    final_score: float = Field(description="The score after ranking (the order of the list)")
    explanation: dict[str, float] = Field(description="The ranking's contribution of each signal")

    @classmethod
    def of(cls, c: CandidateRecord) -> MemoryOut:
        return cls(
            id=c.memory_id,
            memory_type=c.memory_type,
            content=c.content,
            metadata=c.metadata,
            importance=c.importance,
            created_at=c.created_at,
            sources=list(c.sources),
            scores=dict(c.scores),
            retrieval_score=c.retrieval_score,
            final_score=c.final_score,
            explanation=dict(c.explanation),
        )


class SearchResponse(BaseModel):
    memories: list[MemoryOut]
    route: str | None = Field(description="The route the router chose (null on the V3 path)")
    diagnostics: Diagnostics | None = Field(None, description="When asked for: the query's diagnostics")
    explain: str | None = Field(None, description="When asked for: the explain output")


class Health(BaseModel):
    status: str = Field(examples=["ok"])
    version: str


class Readiness(BaseModel):
    ready: bool
    database: str = Field(description="ok, or why the database cannot be reached")
    schema_revision: str | None = Field(description="The database's schema revision")
    schema_head: str = Field(description="This version's newest revision: ready needs the two equal")
    model: str = Field(description="loaded, loading (the model loads at start, in the background) or failed: why")
