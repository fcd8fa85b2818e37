"""POST /v1/memories: one memory or a batch, in the ingest record format, for the key's tenant.

A batch is one transaction (all or nothing: a bad record is a 422 naming it, and nothing is written);
storing the same content (or external_id) again is a no-op reported as a duplicate.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body
from pydantic import Discriminator, Tag

from .problems import ContentTooLarge, responses
from .schemas import MemoryIn, StoreResponse
from .state import Memory, State, Tenant

router = APIRouter(prefix="/v1", tags=["memories"])

# An object is one memory, an array a batch: validated as the one or the other (so an error names the
# field of the record that is wrong, not both readings of the body).
MemoryOrBatch = Annotated[
    Annotated[MemoryIn, Tag("memory")] | Annotated[list[MemoryIn], Tag("batch")],
    Discriminator(lambda value: "batch" if isinstance(value, list) else "memory"),
]


@router.post(
    "/memories",
    status_code=201,
    summary="Store one memory or a batch",
    responses=responses(400, 401, 403, 413, 422, 503),
)
async def store(
    body: Annotated[MemoryOrBatch, Body(description="A memory, or a list of them (at most max_batch)")],
    memory: Memory,
    tenant: Tenant,
    state: State,
) -> StoreResponse:
    batch = body if isinstance(body, list) else [body]
    limit = state.settings.max_batch
    if len(batch) > limit:
        raise ContentTooLarge(
            f"the batch has {len(batch)} memories; the limit is {limit} (memoria-pg serve --max-batch): split it"
        )
    records = [{**m.record(), "tenant": tenant} for m in batch]
    result = await memory.store_many(records, writers=1)
    return StoreResponse(
        inserted=result.inserted, duplicates=result.duplicates, ids=list(result.ids), existing_ids=list(result.existing)
    )
