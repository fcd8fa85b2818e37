"""The service: `memoria-pg serve` (REST + MCP over HTTP), `memoria-pg mcp` (MCP over stdio), and
`memoria-pg keys create | list | revoke`. Needs the `server` extra for serve and mcp."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

import click

from ..config import Config
from ..core import validation
from .base import cli, config_of, dsn_for, error_message, one_line

SERVER_EXTRA = "the server needs its extra dependencies: pip install 'memoria-pg[server]'"


def _service_modules() -> None:
    try:
        import fastapi  # noqa: F401
        import mcp  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"{SERVER_EXTRA} ({exc})") from exc


@cli.command("serve")
@click.option("--host", help="Address to listen on (default 127.0.0.1; MEMORIA_SERVE_HOST).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port, 1..65535 (default 8080).")
@click.option("--workers", type=int, help="Worker processes, each with its own MemorySystem (>1 needs a DSN).")
@click.option(
    "--insecure", is_flag=True, default=None, help="Serve without API keys on an address that is not loopback."
)
@click.option("--max-body-bytes", type=int, help="Largest request body (default 8 MiB); larger is a 413.")
@click.option("--max-batch", type=int, help="Most memories in one POST /v1/memories (default 1000).")
@click.option("--key-cache-seconds", type=float, help="How long a checked key is trusted without a lookup (5).")
@click.option("--max-concurrency", type=int, help="Library calls at once (default: MEMORIA_POOL_MAX_SIZE).")
@click.option("--no-access-log", "access_log", flag_value=False, default=None, help="No per-request log lines.")
@click.option(
    "--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), help="uvicorn's (info)."
)
@click.pass_context
def serve(ctx: click.Context, /, **options: Any) -> None:
    """Serve the REST API (/v1, OpenAPI at /openapi.json) and MCP (/mcp) over HTTP.

    Requests authenticate with API keys (`memoria-pg keys create`). While no key exists, the server
    acts for the default tenant, and only on loopback unless --insecure."""
    _service_modules()
    import uvicorn

    from ..service.settings import ServiceSettings

    cfg = config_of(ctx)
    settings = ServiceSettings.from_env(**options)
    if settings.workers > 1 and not cfg.dsn:
        raise click.ClickException(
            "--workers > 1 needs a DSN (--dsn or MEMORIA_DSN): the embedded server is per process"
        )
    _check_listen(settings.host, settings.port)
    if cfg.dsn:
        from ..db import connect

        connect(cfg.dsn, connect_timeout=10).close()  # "cannot connect" here, not as uvicorn's traceback
    if cfg.dsn and not settings.allow_anonymous:
        _require_keys(cfg.dsn, settings.host)
    run: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "access_log": settings.access_log,
    }
    if settings.workers > 1:
        os.environ.update(settings.as_env())
        os.environ["MEMORIA_DSN"] = str(cfg.dsn)
        uvicorn.run("memoria_pg.service.app:app_from_env", factory=True, workers=settings.workers, **run)
        return
    from ..service.app import create_app

    app = create_app(settings, cfg)
    failed = _start_up_failure(app)
    try:
        uvicorn.run(app, **run)
    except SystemExit as exc:
        if failed:  # the app could not start (its lifespan raised): that error, in one line
            raise click.ClickException(one_line(error_message(failed[0]))) from failed[0]
        if exc.code not in (0, None):  # uvicorn said why (e.g. the address is in use) and exits 1
            raise click.exceptions.Exit(1) from None
        raise


def _check_listen(host: str, port: int) -> None:
    """The address can be listened on (as uvicorn binds it), or one clean error before anything starts."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None


def _start_up_failure(app: Any) -> list[BaseException]:
    """Wrap the app's lifespan: an error while it starts is kept (returned list) and uvicorn's own
    report of it (the traceback, "Application startup failed") is not logged; the command says it."""
    inner = app.router.lifespan_context
    failed: list[BaseException] = []

    @contextlib.asynccontextmanager
    async def lifespan(app_: Any) -> Any:
        started = False
        try:
            async with inner(app_) as state:
                started = True
                yield state
        except Exception as exc:
            if not started:
                failed.append(exc)
            raise

    app.router.lifespan_context = lifespan
    logging.getLogger("uvicorn.error").addFilter(lambda record: not failed)
    return failed


def _require_keys(dsn: str, host: str) -> None:
    from ..service import keys

    if not keys.any_key(dsn):
        raise click.ClickException(
            f"refusing to serve on {host}: no API key exists, so anyone who can reach it would act for the default "
            "tenant. Create one (memoria-pg keys create --tenant T), serve on 127.0.0.1, or pass --insecure"
        )


@cli.command("mcp")
@click.option("--tenant", help="The tenant every tool call acts for (default MEMORIA_DEFAULT_TENANT).")
@click.pass_context
def mcp_cmd(ctx: click.Context, tenant: str | None) -> None:
    """Serve MCP over stdio (for an MCP client that starts this command)."""
    _service_modules()
    from ..service.mcp_server import run_stdio

    cfg = config_of(ctx)
    asyncio.run(run_stdio(cfg, validation.tenant(tenant or cfg.default_tenant), quiet_stdout=_stdout_to_stderr))


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 is the protocol: whatever else writes there (a server started for the command,
    a library) goes to stderr meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@cli.group("keys")
def keys_group() -> None:
    """API keys of the server: bound to a tenant, or admin (may name any tenant). Stored hashed."""


def _keys_dsn(cfg: Config) -> str:
    """The DSN to manage keys on; the embedded server is migrated first, as MemorySystem would."""
    from ..db import migrate

    dsn = dsn_for(cfg)
    if not cfg.dsn:
        migrate.upgrade(dsn, memory_types=cfg.memory_types, use_age=cfg.use_age)
    return dsn


@keys_group.command("create")
@click.option("--tenant", help="The tenant the key acts for.")
@click.option("--admin", is_flag=True, help="An admin key: acts for the tenant each request names.")
@click.option("--description", default="", help="A note shown by `keys list` (who or what uses it).")
@click.pass_context
def keys_create(ctx: click.Context, tenant: str | None, admin: bool, description: str) -> None:
    """Create a key and print its token: it is shown this once (only its hash is stored)."""
    from ..service import keys

    info, token = keys.create_key(_keys_dsn(config_of(ctx)), tenant=tenant, admin=admin, description=description)
    click.echo(token)
    who = "admin (any tenant)" if info.admin else f"tenant {info.tenant!r}"
    click.echo(f"key {info.key_id} for {who}: keep the token above, it cannot be shown again", err=True)


@keys_group.command("list")
@click.option("--all", "include_revoked", is_flag=True, help="Also the revoked keys.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
def keys_list(ctx: click.Context, include_revoked: bool, as_json: bool) -> None:
    """List the keys: id, tenant (or admin), created, revoked, description. Never the tokens."""
    from ..service import keys

    found = keys.list_keys(_keys_dsn(config_of(ctx)), include_revoked=include_revoked)
    rows = [
        {
            "id": k.key_id,
            "tenant": "*admin*" if k.admin else k.tenant,
            "created": k.created_at.isoformat(timespec="seconds"),
            "revoked": k.revoked_at.isoformat(timespec="seconds") if k.revoked_at else "",
            "description": k.description,
        }
        for k in found
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from tabulate import tabulate

    click.echo(tabulate(rows, headers="keys") if rows else "no keys (memoria-pg keys create --tenant T)")


@keys_group.command("revoke")
@click.argument("key_id")
@click.pass_context
def keys_revoke(ctx: click.Context, key_id: str) -> None:
    """Revoke the key KEY_ID (see `keys list`). Running servers refuse it within --key-cache-seconds."""
    from ..service import keys

    if not keys.revoke_key(_keys_dsn(config_of(ctx)), key_id):
        raise click.ClickException(f"no live key {key_id!r} (see `memoria-pg keys list --all`)")
    click.echo(f"revoked {key_id}")
