"""GET /v1/health (the process answers) and GET /v1/ready (it can serve: database, schema, model).
Neither needs a key: probes carry none."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from .. import __version__
from .schemas import Health, Readiness
from .state import State

router = APIRouter(prefix="/v1", tags=["health"])


@router.get("/health", summary="The process is up")
async def health() -> Health:
    return Health(status="ok", version=__version__)


@router.get(
    "/ready",
    summary="Ready to serve: database reachable, schema at this version's head, model loaded",
    responses={503: {"model": Readiness, "description": "Not ready; the body says what is missing"}},
)
async def ready(state: State) -> JSONResponse:
    facts = await state.require_memory().readiness()
    body = Readiness(
        ready=False,
        database="ok" if facts["database"] else str(facts["error"]),
        schema_revision=facts["schema"],
        schema_head=facts["schema_head"],
        model="loaded" if facts["model_loaded"] else state.model,
    )
    body.ready = body.database == "ok" and body.schema_revision == body.schema_head and body.model == "loaded"
    return JSONResponse(body.model_dump(), status_code=200 if body.ready else 503)
