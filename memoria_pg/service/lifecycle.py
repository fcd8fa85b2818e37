"""The memory lifecycle over REST, for the key's tenant: get, list (cursor pagination), update, delete,
forget by filter, history, invalidate and restore. Another tenant's memory is a 404, exactly like a
memory that does not exist (row-level security hides it; nothing says it exists)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from .. import InputError, Memory
from .problems import responses
from .state import Memory as MemoryDep
from .state import Tenant

router = APIRouter(prefix="/v1/memories", tags=["memories"])

MemoryId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The memory's id")]
ERRORS = responses(400, 401, 403, 404, 422, 503)


class StoredMemory(BaseModel):
    id: int
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
    status: str = Field(description="active, invalidated (valid_to passed) or superseded (see superseded_by)")
    superseded_by: int | None

    @classmethod
    def of(cls, m: Memory) -> StoredMemory:
        fields = {name: getattr(m, name) for name in cls.model_fields}
        return cls(**fields)


class MemoryPage(BaseModel):
    memories: list[StoredMemory]
    next_after: int | None = Field(description="Pass as ?after= for the next page; null on the last page")


class MemoryPatch(BaseModel):
    """The fields to change; those left out stay as they are."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = Field(None, min_length=1, description="A new text (re-embedded and re-indexed)")
    context: str | None = None
    metadata: dict[str, Any] | None = None
    importance: float | None = Field(None, ge=0, le=1)
    pinned: StrictBool | None = None
    memory_type: str | None = Field(None, description="Moves the memory to that type's shard")
    embedding: list[float] | None = Field(None, description="The new text's vector instead of the model's")


class ForgetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memory_type: str | None = None
    before: dt.datetime | None = Field(None, description="Only memories created before this time")
    where: dict[str, Any] | None = Field(None, description="Only memories whose metadata contains this object")
    dry_run: StrictBool = Field(False, description="Only count what would be deleted")


class ForgetResponse(BaseModel):
    matched: int
    deleted: int
    ids: list[int]


class Deleted(BaseModel):
    deleted: int


class HistoryEntry(BaseModel):
    id: int
    memory_id: int
    event: str = Field(description="stored, updated, invalidated, restored or deleted")
    at: dt.datetime
    detail: dict[str, Any] = Field(description="For an update, `previous`: the fields it had")


class Invalidation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    at: dt.datetime | None = Field(
        None, description="From when it no longer holds; default now (a memory that has ended keeps its end)"
    )


@router.get("/{memory_id:int}", summary="One memory", responses=ERRORS)
async def get_memory(memory_id: MemoryId, memory: MemoryDep, tenant: Tenant) -> StoredMemory:
    return StoredMemory.of(await memory.get(memory_id, tenant=tenant))


@router.get("", summary="A page of memories, in id order", responses=ERRORS)
async def list_memories(
    memory: MemoryDep,
    tenant: Tenant,
    memory_type: Annotated[str | None, Query(description="Only this type")] = None,
    where: Annotated[
        str | None, Query(description='A JSON object the metadata contains, e.g. {"speaker":"Maya"}')
    ] = None,
    after: Annotated[int, Query(ge=0, le=2**63 - 1, description="The cursor: ids after this one")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> MemoryPage:
    page = await memory.list_memories(
        tenant=tenant, memory_type=memory_type, where=_json_object(where, "where"), after=after, limit=limit
    )
    return MemoryPage(
        memories=[StoredMemory.of(m) for m in page], next_after=page[-1].id if len(page) == limit else None
    )


@router.patch("/{memory_id:int}", summary="Change a memory", responses=ERRORS)
async def update_memory(memory_id: MemoryId, body: MemoryPatch, memory: MemoryDep, tenant: Tenant) -> StoredMemory:
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    return StoredMemory.of(await memory.update(memory_id, tenant=tenant, **changes))


@router.delete("/{memory_id:int}", summary="Delete a memory and everything derived from it", responses=ERRORS)
async def delete_memory(memory_id: MemoryId, memory: MemoryDep, tenant: Tenant) -> Deleted:
    return Deleted(deleted=await memory.delete(memory_id, tenant=tenant))


@router.post("/forget", summary="Delete the memories matching every filter given", responses=ERRORS)
async def forget(body: ForgetRequest, memory: MemoryDep, tenant: Tenant) -> ForgetResponse:
    result = await memory.forget(
        tenant=tenant, memory_type=body.memory_type, before=body.before, where=body.where, dry_run=body.dry_run
    )
    return ForgetResponse(matched=result.matched, deleted=result.deleted, ids=list(result.ids))


@router.get("/{memory_id:int}/history", summary="What happened to a memory, oldest first", responses=ERRORS)
async def history(memory_id: MemoryId, memory: MemoryDep, tenant: Tenant) -> list[HistoryEntry]:
    events = await memory.history(memory_id, tenant=tenant)
    return [HistoryEntry(id=e.id, memory_id=e.memory_id, event=e.event, at=e.at, detail=e.detail) for e in events]


@router.post("/{memory_id:int}/invalidate", summary="Retire a memory from a time on (reversible)", responses=ERRORS)
async def invalidate(memory_id: MemoryId, body: Invalidation, memory: MemoryDep, tenant: Tenant) -> StoredMemory:
    return StoredMemory.of(await memory.invalidate(memory_id, tenant=tenant, at=body.at))


class Restoration(BaseModel):
    """No fields yet: the body may be left out, or be {}."""

    model_config = ConfigDict(extra="forbid")


@router.post("/{memory_id:int}/restore", summary="Undo an invalidation", responses=ERRORS)
async def restore(
    memory_id: MemoryId,
    memory: MemoryDep,
    tenant: Tenant,
    body: Annotated[Restoration | None, Body(description="May be left out")] = None,
) -> StoredMemory:
    return StoredMemory.of(await memory.restore(memory_id, tenant=tenant))


def _json_object(text: str | None, what: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except RecursionError:  # the decoder recurses once per level of nesting
        raise InputError(f"{what} is nested too deeply to be read: send a flatter JSON object") from None
    except ValueError:
        raise InputError(f'{what} must be a JSON object, e.g. {{"speaker": "Maya"}}') from None
    if not isinstance(value, dict):
        raise InputError(f'{what} must be a JSON object, e.g. {{"speaker": "Maya"}}')
    return value
