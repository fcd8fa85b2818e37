"""POST /v1/search: MemorySystem.query for the key's tenant, with the memories' sources and per-source
scores, and on request the diagnostics and the explain output."""

from __future__ import annotations

from fastapi import APIRouter

from .. import MemorySystem, QueryResponse
from .problems import responses
from .schemas import MemoryOut, SearchRequest, SearchResponse
from .state import Memory, Tenant

router = APIRouter(prefix="/v1", tags=["search"])


@router.post("/search", summary="Retrieve memories for a query", responses=responses(400, 401, 403, 413, 422, 503))
async def search(body: SearchRequest, memory: Memory, tenant: Tenant) -> SearchResponse:
    def run(system: MemorySystem) -> tuple[QueryResponse, str | None]:
        response = system.query(
            body.text,
            tenant=tenant,
            memory_type=body.memory_type,
            top_k=body.top_k,
            workers=body.workers,
            ranking=body.ranking,
            v4=False if body.v3 else None,
            as_of=body.as_of,
            include_invalid=body.include_invalid,
            reference_time=body.reference_time,
            candidates=body.explain,  # only explain shows more than the memories returned
        )
        return response, system.explain(response) if body.explain else None

    response, explain = await memory.run(run)
    return SearchResponse(
        memories=[MemoryOut.of(m) for m in response.memories],
        route=response.route.name if response.route else None,
        diagnostics=response.diagnostics if body.diagnostics else None,
        explain=explain,
    )
