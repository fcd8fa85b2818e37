"""The FastAPI app of `memoria-pg serve`: the /v1 routers, problem+json errors, the body limit, and the
MCP server's streamable HTTP endpoint at /mcp, all on one AsyncMemorySystem opened by the lifespan.

Routes are `async def` and run the library on AsyncMemorySystem's bounded pool (sized to the
connection pool) rather than in Starlette's threadpool (40 threads, whatever the pool): excess
requests wait in the event loop instead of for a pooled connection (for at most the pool timeout, then
503: AsyncMemorySystem.run), and REST and MCP share one bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import AsyncMemorySystem, Config, Embedder, __version__
from ..errors import ServerError, SyncRunning
from . import health, lifecycle, memories, problems, search
from .auth import Authenticator, RequireTenant
from .keys import KeyCache
from .mcp_server import build_mcp, http_tenant
from .settings import ServiceSettings
from .state import ServiceState, known_query_parameters

log = logging.getLogger("memoria_pg.service")

# One module per subject; a new subject (e.g. the memory lifecycle) is one more router here.
ROUTERS = (health.router, memories.router, lifecycle.router, search.router)

DESCRIPTION = """Long-term memory for AI agents inside PostgreSQL: the memoria-pg library as a service.

Authenticate with `Authorization: Bearer <key>` (`memoria-pg keys create`). A tenant key acts for its
tenant; an admin key for the tenant named in `X-Memoria-Tenant`. Errors are `application/problem+json`
(RFC 9457). MCP (streamable HTTP) is served at `/mcp` with the same keys."""


def create_app(
    settings: ServiceSettings | None = None,
    config: Config | None = None,
    *,
    memory: AsyncMemorySystem | None = None,
    embedder: Embedder | None = None,
) -> FastAPI:
    """The app. `memory`: serve this AsyncMemorySystem (else the lifespan opens one from `config`)."""
    settings = settings or ServiceSettings()
    config = config or (memory.config if memory else Config.from_env())
    state = ServiceState(settings=settings, config=config, memory=memory)
    mcp = build_mcp(state.require_memory, http_tenant)
    mcp_app = mcp.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        max_request_body_size=settings.max_body_bytes,
        transport_security=_transport_security(settings),
        host=settings.host,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with _opened(state, embedder), mcp.session_manager.run():
            yield

    app = FastAPI(
        dependencies=[Depends(known_query_parameters)],
        title="memoria-pg",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.service = state
    problems.install(app)
    for router in ROUTERS:
        app.include_router(router)
    for route in mcp_app.routes:  # the SDK's /mcp route, guarded; not part of the OpenAPI document
        assert isinstance(route, Route)
        app.router.routes.append(
            Route(route.path, endpoint=RequireTenant(route.app, state.require_authenticator), methods=None)
        )
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(HeadAsGet)
    return app


def app_from_env() -> FastAPI:
    """The app of a uvicorn worker process (`serve --workers N`): settings from MEMORIA_SERVE_*, MEMORIA_*."""
    return create_app(ServiceSettings.from_env(), Config.from_env())


@contextlib.asynccontextmanager
async def _opened(state: ServiceState, embedder: Embedder | None) -> AsyncIterator[None]:
    """Open the memory (unless handed one), check the bind rule, load the model in the background."""
    settings, opened_here = state.settings, state.memory is None
    if state.memory is None:
        state.memory = await AsyncMemorySystem.open(
            state.config, embedder=embedder, max_concurrency=settings.max_concurrency or None
        )
    memory = state.memory
    state.authenticator = Authenticator(
        memory,
        cache=KeyCache(settings.key_cache_seconds),
        allow_anonymous=settings.allow_anonymous,
        default_tenant=state.config.default_tenant,
    )
    try:
        await _check_bind(state.authenticator, settings)
        loading = asyncio.create_task(_load_model(state, memory))
        syncing = asyncio.create_task(_sync_vector_indexes(memory, settings.vector_index_sync_seconds))
        yield
        loading.cancel()
        syncing.cancel()
    finally:
        if opened_here:
            await memory.close()


async def _check_bind(authenticator: Authenticator, settings: ServiceSettings) -> None:
    if settings.loopback or settings.insecure:
        if not await authenticator.keys_exist():
            log.warning(
                "no API key exists: requests without a key act for the default tenant %r%s",
                authenticator.default_tenant,
                "" if settings.loopback else f" on {settings.host} (--insecure)",
            )
        return
    if not await authenticator.keys_exist():
        raise RuntimeError(
            f"refusing to serve on {settings.host}: no API key exists, so anyone who can reach it would act for the "
            "default tenant. Create one (memoria-pg keys create --tenant T), serve on 127.0.0.1, or pass --insecure"
        )


async def _load_model(state: ServiceState, memory: AsyncMemorySystem) -> None:
    try:
        await memory.load_model()
    except Exception as exc:  # reported by /v1/ready; queries will raise it again
        state.model = f"failed: {exc}"
        log.error("the embedding model failed to load: %s", exc)
    else:
        state.model = "loaded"


async def _sync_vector_indexes(memory: AsyncMemorySystem, every_seconds: float) -> None:
    """`memoria-pg db vector-indexes` at start-up and every `every_seconds` (0: never), so that a tenant
    grown past vector_exact_max_rows gets its own HNSW index without an administrator. Another sync
    running (a second worker process, an administrator's) skips a round; a DSN that may not build
    indexes (not the tables' owner) stops it, with one warning."""
    if every_seconds <= 0:
        return
    while True:
        try:
            for a in await memory.sync_vector_indexes():
                if a.action in ("build", "drop"):  # a skip stays one at each round: not said each time
                    log.info(
                        "%s the vector index of tenant %r, %s (%d memories)", a.action, a.tenant, a.memory_type, a.rows
                    )
        except SyncRunning:
            pass  # another process's round: this one skips it
        except ServerError as exc:
            log.warning("per-tenant vector indexes are not kept by this server: %s", exc)
            return
        except Exception:  # a bug: said once, and the server goes on without the sync
            log.exception("per-tenant vector indexes are not kept by this server")
            return
        await asyncio.sleep(every_seconds)


def _transport_security(settings: ServiceSettings) -> TransportSecuritySettings | None:
    # The SDK's DNS-rebinding guard (Host and Origin must be loopback) protects a keyless server on
    # loopback from web pages; elsewhere the API key is the guard and Host is whatever the proxy sends.
    return None if settings.loopback else TransportSecuritySettings(enable_dns_rebinding_protection=False)


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            app.openapi_schema = problems.problem_media_types(document)
        return app.openapi_schema

    return openapi


class HeadAsGet:
    """HEAD wherever GET is (probes use HEAD): FastAPI's routes serve only the methods they name, so a
    HEAD that no route serves runs as the GET of its path. The server (uvicorn) sends the GET's status
    and headers and drops the body, as it does for every response to a HEAD."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":
            app = scope["app"]  # the FastAPI app (Starlette sets it before the middleware)
            if not problems.serves(app, scope, "HEAD") and problems.serves(app, scope, "GET"):
                scope = {**scope, "method": "GET"}
        await self.app(scope, receive, send)


class BodyLimit:
    """413 for a request body over `max_bytes`: at once when Content-Length says so; a chunked body is
    read up to the limit before the app sees it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        if declared is None and b"transfer-encoding" in headers:
            # A chunked body: read it here, up to the limit, and hand it on (the app reads it whole anyway).
            body = await self._read_within_limit(receive)
            if body is None:
                await self._refuse(scope, receive, send)
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    async def _read_within_limit(self, receive: Receive) -> list[Message] | None:
        messages: list[Message] = []
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                return None
            if not message.get("more_body", False):
                return messages

    def _detail(self) -> str:
        return (
            f"the request body is over the server's limit of {self.max_bytes} bytes (memoria-pg serve --max-body-bytes)"
        )

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        error = problems.ContentTooLarge(self._detail())
        response = problems.problem_response(request, error.status, error.kind, error.title, error.detail)
        await response(scope, receive, send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed
