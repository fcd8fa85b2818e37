"""Errors as application/problem+json (RFC 9457): one handler per kind, installed on the app once.

The library's errors keep their messages (they say what was wrong and often how to fix it); the
status comes from the class. Nothing of the request's headers is ever part of a problem, and
validation errors list where and what, not the value that was sent.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from .. import errors

PROBLEM_JSON = "application/problem+json"
TYPE_BASE = "urn:memoria-pg:problem:"
log = logging.getLogger("memoria_pg.service")
RETRY_AFTER_SECONDS = "1"  # for 503 busy: a slot or a pooled connection is usually free again soon
ECHO_MAX = 80  # characters of a value echoed in a detail (problem_response cuts longer ones)
DETAIL_MAX = 2000  # characters of a detail
_QUOTED = re.compile(r"""(?<!\w)(['"])((?:\\.|(?!\1)[^\\])*)\1(?!\w)""")  # 'a value', "a value"


class FieldError(BaseModel):
    loc: list[str | int] = Field(description="Where: e.g. ['body', 'top_k'] or ['body', 3, 'content']")
    msg: str
    type: str


class Problem(BaseModel):
    """A problem detail (RFC 9457)."""

    type: str = Field(description="urn:memoria-pg:problem:<kind>", examples=["urn:memoria-pg:problem:invalid-input"])
    title: str
    status: int
    detail: str = Field(description="What was wrong, and when it helps, how to fix it")
    instance: str | None = Field(None, description="The request path")
    errors: list[FieldError] | None = Field(None, description="Each invalid field (status 422 from validation)")


class ServiceError(Exception):
    """A problem the service itself finds (authentication, limits)."""

    status = 400
    kind = "bad-request"
    title = "Bad request"
    headers: ClassVar[Mapping[str, str]] = {}

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BadRequest(ServiceError):
    pass


class Unauthorized(ServiceError):
    status, kind, title = 401, "unauthorized", "Not authenticated"
    headers: ClassVar[Mapping[str, str]] = {"WWW-Authenticate": 'Bearer realm="memoria-pg"'}


class Forbidden(ServiceError):
    status, kind, title = 403, "forbidden", "Not allowed for this key"


class ContentTooLarge(ServiceError):
    status, kind, title = 413, "too-large", "Request too large"


def _not_found() -> type[errors.MemoriaError] | None:
    found: type[errors.MemoriaError] | None = getattr(errors, "NotFound", None)
    return found


# The library's errors, most specific first: (class, status, kind, title).
LIBRARY_ERRORS: list[tuple[type[errors.MemoriaError], int, str, str]] = [
    (errors.InputError, 422, "invalid-input", "Invalid input"),
    (errors.PoolTimeout, 503, "busy", "No database connection became free"),
    (errors.SchemaError, 503, "schema", "The database schema is not at this version's revision"),
    (errors.ServerError, 503, "database-unavailable", "The database is unavailable"),
    (errors.ConfigError, 500, "configuration", "The server is misconfigured"),
    (errors.MemoriaError, 500, "internal", "Internal error"),
]
if (_found := _not_found()) is not None:
    LIBRARY_ERRORS.insert(1, (_found, 404, "not-found", "Not found"))


def problem_response(
    request: Request,
    status: int,
    kind: str,
    title: str,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
    field_errors: Sequence[FieldError] | None = None,
) -> JSONResponse:
    body = Problem(
        type=TYPE_BASE + kind,
        title=title,
        status=status,
        detail=shortened(detail),
        instance=request.url.path,
        errors=list(field_errors) if field_errors is not None else None,
    )
    return JSONResponse(
        body.model_dump(exclude_none=True), status_code=status, headers=dict(headers or {}), media_type=PROBLEM_JSON
    )


def shortened(detail: str) -> str:
    """The detail with every quoted value over ECHO_MAX characters cut to its first ECHO_MAX and '...'
    (a message may echo what was sent: an unknown memory_type of 10,000 characters), and at most
    DETAIL_MAX characters in all."""
    detail = _QUOTED.sub(lambda m: f"{m[1]}{m[2][:ECHO_MAX]}...{m[1]}" if len(m[2]) > ECHO_MAX else m[0], detail)
    return detail if len(detail) <= DETAIL_MAX else detail[:DETAIL_MAX] + "..."


def status_of(exc: errors.MemoriaError) -> tuple[int, str, str]:
    for cls, status, kind, title in LIBRARY_ERRORS:
        if isinstance(exc, cls):
            return status, kind, title
    return 500, "internal", "Internal error"  # pragma: no cover  (MemoriaError is the last entry)


async def _service_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return problem_response(request, exc.status, exc.kind, exc.title, exc.detail, headers=exc.headers)


async def _library_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.MemoriaError)
    status, kind, title = status_of(exc)
    if status >= 500:
        log.warning("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    headers = {"Retry-After": RETRY_AFTER_SECONDS} if isinstance(exc, errors.PoolTimeout) else None
    return problem_response(request, status, kind, title, str(exc), headers=headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    found = [_field_error(e) for e in exc.errors()]
    detail = "; ".join(f"{'.'.join(str(p) for p in e.loc)}: {e.msg}" for e in found[:5])
    return problem_response(request, 422, "invalid-request", "Invalid request", detail, field_errors=found)


def _field_error(error: Mapping[str, Any]) -> FieldError:
    loc = [p if isinstance(p, int) else str(p) for p in error.get("loc", ())]
    return FieldError(loc=loc, msg=str(error.get("msg", "")), type=str(error.get("type", "")))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else "request refused"
    kind = {404: "no-such-path", 405: "method-not-allowed"}.get(exc.status_code, "http")
    title = {404: "Not found", 405: "Method not allowed"}.get(exc.status_code, "HTTP error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # Starlette names the methods of the first route of the path only
        headers["Allow"] = ", ".join(sorted(methods_at(request.app, request.scope)))
    return problem_response(request, exc.status_code, kind, title, detail, headers=headers)


HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def serves(app: Any, scope: Mapping[str, Any], method: str) -> bool:
    """Whether a route of `app` serves `method` at the scope's path."""
    probe = {**scope, "method": method}
    return any(route.matches(probe)[0] is Match.FULL for route in app.router.routes)


def methods_at(app: Any, scope: Mapping[str, Any]) -> set[str]:
    """Every method some route of `app` serves at the scope's path (HEAD wherever GET is: app.HeadAsGet).

    Each method is tried against the routes as the router would (FastAPI's included routers have no
    `.methods` of their own, so asking the routes is the one way that sees them all)."""
    methods = {method for method in HTTP_METHODS if serves(app, scope, method)}
    if "GET" in methods:
        methods.add("HEAD")
    return methods


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
    return problem_response(request, 500, "internal", "Internal error", "the server failed; its log has the details")


def install(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(errors.MemoriaError, _library_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for the problems a route may answer with."""
    described = {
        400: "Bad request (e.g. an admin key without X-Memoria-Tenant)",
        401: "No API key, or not a valid one",
        403: "The key may not act for the tenant named",
        404: "Not found",
        413: "The body or the batch is over the server's limit",
        422: "Invalid request or invalid input (the detail says which field and why)",
        503: "The database is unavailable, busy (no pooled connection in time) or not migrated",
    }
    # FastAPI documents a model as application/json: app.py's OpenAPI hook renames it (problem_media_types).
    return {s: {"description": described[s], "model": Problem} for s in statuses}


def problem_media_types(document: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document with every problem response (4xx, 5xx) as application/problem+json."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                content = response.get("content", {})
                schema = content.get("application/json", {}).get("schema", {})
                if status[0] in "45" and schema.get("$ref", "").endswith("/Problem"):
                    content[PROBLEM_JSON] = content.pop("application/json")
    return document
