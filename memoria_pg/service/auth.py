"""Which tenant a request acts for: from its API key, never from its body.

`Authorization: Bearer <key>`. A tenant key acts for its tenant; `X-Memoria-Tenant` may repeat that
tenant and may name no other (403). An admin key acts for the tenant `X-Memoria-Tenant` names (400
without one). Without a key, a request acts for the configured default tenant only when no key
exists at all and the server was started on loopback (or with --insecure); otherwise 401. The
header's value never appears in a log line or an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import AsyncMemorySystem
from . import keys
from .problems import BadRequest, Forbidden, ServiceError, Unauthorized, problem_response

TENANT_HEADER = "X-Memoria-Tenant"
SCOPE_TENANT = "memoria.tenant"  # where the guard of /mcp leaves the tenant for the MCP tools


class Authenticator:
    """Checks keys on the library's pool (through AsyncMemorySystem, off the event loop), with a cache."""

    def __init__(
        self, memory: AsyncMemorySystem, *, cache: keys.KeyCache, allow_anonymous: bool, default_tenant: str
    ) -> None:
        self.memory = memory
        self.cache = cache
        self.allow_anonymous = allow_anonymous
        self.default_tenant = default_tenant
        self._exist_hash = b"keys-exist"  # the cache's slot for "does any key exist" (never a sha256)

    async def principal(self, authorization: str | None) -> keys.Principal:
        if authorization is None:
            if self.allow_anonymous and not await self.keys_exist():
                return keys.Principal(key_id=None, tenant=None)
            raise Unauthorized(
                "this server needs an API key: send 'Authorization: Bearer <key>' (memoria-pg keys create)"
            )
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("the Authorization header must be 'Bearer <key>'")
        if not keys.well_formed(token):
            raise Unauthorized("that is not a memoria-pg API key (they look like mpg_<id>_<secret>)")
        key_hash = keys.digest(token)
        found, principal = self.cache.get(key_hash)
        if not found:
            principal = await self.memory.run(lambda s: keys.lookup(s, key_hash))
            self.cache.put(key_hash, principal)
        if principal is None:
            raise Unauthorized("the API key is not valid (unknown or revoked)")
        return principal

    async def keys_exist(self) -> bool:
        found, marker = self.cache.get(self._exist_hash)
        if found:
            return marker is not None
        exist = await self.memory.run(keys.keys_exist)
        self.cache.put(self._exist_hash, keys.Principal(None, None) if exist else None)
        return exist

    def tenant(self, principal: keys.Principal, requested: str | None) -> str:
        """The tenant the request acts for (`requested`: the X-Memoria-Tenant header, if sent)."""
        if principal.admin:
            if requested is None:
                raise BadRequest(f"an admin key acts for the tenant named in the {TENANT_HEADER} header: none was sent")
            return requested
        own = principal.tenant if principal.key_id is not None else self.default_tenant
        assert own is not None
        if requested is not None and requested != own:
            if principal.key_id is None:
                raise Forbidden(
                    f"without an API key this server acts for the default tenant only; {TENANT_HEADER} names another "
                    "(create keys with `memoria-pg keys create`)"
                )
            raise Forbidden(f"this API key acts for its own tenant only; {TENANT_HEADER} names another")
        return own

    async def tenant_of(self, headers: Mapping[str, str]) -> str:
        principal = await self.principal(headers.get("authorization"))
        return self.tenant(principal, requested_tenant(headers))


def requested_tenant(headers: Mapping[str, str]) -> str | None:
    """The X-Memoria-Tenant header as UTF-8 (400 when it is not), None when it was not sent.

    Starlette decodes header values as Latin-1 (one character per byte), so the bytes come back
    intact with an encode to Latin-1; a tenant name is UTF-8 everywhere else (CLI, keys, database)."""
    value = headers.get(TENANT_HEADER.lower())
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:  # a character beyond Latin-1 cannot come from Starlette, but fail the same way
        raise BadRequest(f"the {TENANT_HEADER} header must be UTF-8 (a tenant name's UTF-8 bytes)") from None


class RequireTenant:
    """ASGI guard in front of an app that is not FastAPI's (the MCP endpoint): authenticates every
    HTTP request, answers a problem on failure, else leaves the tenant in scope[SCOPE_TENANT]."""

    def __init__(self, app: ASGIApp, authenticator: Callable[[], Authenticator]) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            tenant = await self.authenticator().tenant_of(request.headers)
        except ServiceError as exc:
            response = problem_response(request, exc.status, exc.kind, exc.title, exc.detail, headers=exc.headers)
            await response(scope, receive, send)
            return
        scope[SCOPE_TENANT] = tenant
        await self.app(scope, receive, send)


def scope_tenant(request: Any) -> str | None:
    """The tenant the guard left on an MCP request (the SDK hands tools the Starlette request)."""
    scope = getattr(request, "scope", None)
    value = scope.get(SCOPE_TENANT) if isinstance(scope, dict) else None
    return value if isinstance(value, str) else None
