"""What every route shares: the service's state (one per process) and the dependencies that give a
route its AsyncMemorySystem and the tenant the request acts for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .. import AsyncMemorySystem, Config
from .auth import TENANT_HEADER, Authenticator, requested_tenant
from .settings import ServiceSettings


@dataclass
class ServiceState:
    settings: ServiceSettings
    config: Config
    memory: AsyncMemorySystem | None = None
    authenticator: Authenticator | None = None
    model: str = "loading"  # loaded | loading | failed: <why>

    def require_memory(self) -> AsyncMemorySystem:
        assert self.memory is not None, "the service is not started (its lifespan opens the memory)"
        return self.memory

    def require_authenticator(self) -> Authenticator:
        assert self.authenticator is not None, "the service is not started (its lifespan opens the memory)"
        return self.authenticator


# The dependencies are coroutines: FastAPI runs a plain `def` dependency in its threadpool, a thread hop
# per dependency per request (measured: most of the service's overhead under load).
async def service_state(request: Request) -> ServiceState:
    return _state(request)


async def memory(request: Request) -> AsyncMemorySystem:
    return _state(request).require_memory()


def _state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


# Documents the scheme in OpenAPI; the header itself is read raw below, so that a malformed one is a
# 401 and not taken for "no key".
_bearer = HTTPBearer(
    auto_error=False, scheme_name="apiKey", description="An API key from `memoria-pg keys create` (mpg_<id>_<secret>)"
)


async def tenant(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    _x_memoria_tenant: Annotated[
        str | None,
        Header(
            alias=TENANT_HEADER,
            description="The tenant to act for: required with an admin key; a tenant key may only name its own",
        ),
    ] = None,
) -> str:
    """The tenant this request acts for (auth.py has the rules). The parameter documents the header;
    its value is read as UTF-8 (auth.requested_tenant), not as the Latin-1 FastAPI hands over."""
    authenticator = _state(request).require_authenticator()
    principal = await authenticator.principal(request.headers.get("authorization"))
    return authenticator.tenant(principal, requested_tenant(request.headers))


Memory = Annotated[AsyncMemorySystem, Depends(memory)]
Tenant = Annotated[str, Depends(tenant)]
State = Annotated[ServiceState, Depends(service_state)]


async def known_query_parameters(request: Request) -> None:
    """422 for a query parameter the route does not take (a typo would otherwise be ignored silently)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    unknown = sorted(set(request.query_params) - _query_names(route))
    if unknown:
        errors: list[dict[str, Any]] = [
            {"loc": ("query", name), "msg": "this route takes no such query parameter", "type": "extra_forbidden"}
            for name in unknown
        ]
        raise RequestValidationError(errors)


def _query_names(route: APIRoute) -> set[str]:
    """The query parameters of the route and of all its dependencies (a walk of a few nodes)."""
    names: set[str] = set()
    pending = [route.dependant]
    while pending:
        dependant = pending.pop()
        names.update(param.alias for param in dependant.query_params)
        pending.extend(dependant.dependencies)
    return names
