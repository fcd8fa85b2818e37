"""Administration: settings, the embedded server, the server check, migrations, memory types, the graph."""

from __future__ import annotations

import json

import click

from ..core import validation
from ..db import connect, redact_dsn
from ..db import embedded as server
from ..errors import SyncRunning
from .base import cli, config_of, data_dir_for, dsn_for, open_system
from .revisions import Revisions, downgrade_warning


@cli.command("config")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
def config_cmd(ctx: click.Context, as_json: bool) -> None:
    """Print the effective settings (defaults overridden by MEMORIA_* variables and options)."""
    values = config_of(ctx).as_dict()
    if isinstance(values.get("dsn"), str):
        values["dsn"] = redact_dsn(str(values["dsn"]))
    values["replica_dsns"] = tuple(redact_dsn(d) for d in config_of(ctx).replica_dsns)
    if as_json:
        click.echo(json.dumps(values, indent=2, default=list))
        return
    width = max(len(k) for k in values)
    for key, value in values.items():
        shown = (",".join(value) or "(none)") if isinstance(value, tuple) else value
        click.echo(f"{('MEMORIA_' + key.upper()).ljust(width + 8)}  {shown}")


@cli.group("server")
def server_group() -> None:
    """Manage the embedded PostgreSQL server (used when no DSN is given)."""


@server_group.command("start")
@click.pass_context
def server_start(ctx: click.Context) -> None:
    """Start the embedded server and leave it running; prints its DSN."""
    cfg = config_of(ctx)
    click.echo(server.start(data_dir_for(cfg), keep_running=True))


@server_group.command("stop")
@click.pass_context
def server_stop(ctx: click.Context) -> None:
    """Stop the embedded server."""
    stopped = server.stop(data_dir_for(config_of(ctx)))
    click.echo("stopped" if stopped else "not running")


@server_group.command("status")
@click.pass_context
def server_status(ctx: click.Context) -> None:
    """Say whether the embedded server is running, with its pid and DSN."""
    st = server.status(data_dir_for(config_of(ctx)))
    click.echo(f"data dir: {st.data_dir}")
    click.echo(f"running (pid {st.pid}): {st.dsn}" if st.running else "not running")


@cli.command()
@click.pass_context
def doctor(ctx: click.Context) -> None:
    """Check the server: version, extensions (vector required, AGE optional), schema revision."""
    from ..db import VECTOR_HELP, detect_capabilities, migrate
    from ..db.resources import head_revision

    cfg = config_of(ctx)
    dsn = dsn_for(cfg)
    with connect(dsn, autocommit=True) as conn:
        caps = detect_capabilities(conn)
    click.echo(f"server:        PostgreSQL {caps.server_version} ({'DSN' if cfg.dsn else 'embedded'})")
    click.echo(f"pgvector:      {caps.vector or ('available, not created' if caps.vector_available else 'MISSING')}")
    click.echo(f"pg_trgm:       {'yes' if caps.pg_trgm else 'MISSING'}")
    click.echo(
        f"Apache AGE:    {caps.age or ('available' if caps.age_available else 'not installed (graph worker uses SQL)')}"
    )
    click.echo(f"graph backend: {caps.graph_backend}")
    revision, head = migrate.current(dsn), head_revision()
    if revision is None:
        click.echo("schema:        not installed (run: memoria-pg db upgrade)")
    elif revision < head:
        click.echo(f"schema:        {revision}, behind this library's {head} (run: memoria-pg db upgrade)")
    elif revision > head:
        click.echo(f"schema:        {revision}, newer than this library's {head} (upgrade memoria-pg)")
    else:
        click.echo(f"schema:        {revision}")
    if not caps.vector_available:
        raise click.ClickException(VECTOR_HELP)


@cli.group("db")
def db_group() -> None:
    """Schema migrations (Alembic)."""


@db_group.command("upgrade")
@click.argument("revision", default="head")
@click.option(
    "--vector-indexes/--no-vector-indexes",
    default=True,
    show_default=True,
    help="Then give each tenant above vector_exact_max_rows memories of a type its own HNSW index "
    "(as `memoria-pg db vector-indexes` does): since 0016 no other index serves their vector search.",
)
@click.pass_context
def db_upgrade(ctx: click.Context, revision: str, vector_indexes: bool) -> None:
    """Upgrade the schema to REVISION (default: head)."""
    from ..db import migrate
    from ..db import vector_indexes as indexes

    cfg = config_of(ctx)
    revisions = Revisions.load()
    dsn = dsn_for(cfg)
    current = revisions.index(migrate.current(dsn))
    target = revisions.resolve(revision, current)
    if target < current:
        raise click.ClickException(
            f"revision {revisions.shown(revision, target)} is below the database's current revision "
            f"{revisions.name(current)}: `db upgrade` only moves forward; to go back, use "
            f"`memoria-pg db downgrade {revisions.name(target)}` (it asks first)"
        )
    migrate.upgrade(dsn, revisions.name(target), memory_types=cfg.memory_types, use_age=cfg.use_age)
    now = migrate.current(dsn)
    click.echo(f"schema at {now}")
    if vector_indexes and now is not None and int(now) >= indexes.REGISTRY_SINCE:
        try:
            indexes.sync(
                dsn, cfg.vector_exact_max_rows, progress=lambda a: click.echo(a.line(), err=True),
                max_per_type=cfg.vector_index_max_per_type,
            )  # fmt: skip
        except SyncRunning as exc:  # the migration stands; the other sync builds them
            click.echo(f"vector indexes not synced: {exc}", err=True)


@db_group.command("downgrade")
@click.argument("revision", default="base")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def db_downgrade(ctx: click.Context, revision: str, yes: bool) -> None:
    """Downgrade the schema to REVISION (default: base, which drops all memories).

    Every downgrade drops what the migrations it reverts added, with the data stored there (to 0009
    or below: the memory history; to 0010 or below: the API keys): it lists them and asks first,
    unless --yes."""
    from ..db import migrate

    revisions = Revisions.load()
    dsn = dsn_for(config_of(ctx))
    current = revisions.index(migrate.current(dsn))
    target = revisions.resolve(revision, current)
    if target > current:
        raise click.ClickException(
            f"revision {revisions.shown(revision, target)} is above the database's current revision "
            f"{revisions.name(current)}: `db downgrade` only moves back; to go forward, use "
            f"`memoria-pg db upgrade {revisions.name(target)}`"
        )
    if target < current:
        if not yes:
            click.confirm(downgrade_warning(revisions, current, target), abort=True)
        migrate.downgrade(dsn, revisions.name(target))
    click.echo(f"schema at {migrate.current(dsn) or 'base'}")


@db_group.command("vector-indexes")
@click.option("--tenant", "tenants", multiple=True, help="Only this tenant (repeatable; default: every tenant).")
@click.option("--dry-run", is_flag=True, help="Print what would be built and dropped; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
def db_vector_indexes(ctx: click.Context, tenants: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Give each tenant above vector_exact_max_rows memories of a type its own HNSW index there.

    The vector worker searches such a tenant with HNSW on that index; until it has one, exactly
    (every vector of the tenant compared: no recall lost, but the cost grows with the tenant). Built
    CONCURRENTLY (writes go on); an index whose tenant fell below half the bound is dropped. At most
    vector_index_max_per_type per memory type, the largest tenants' (a tenant left out: "skip").
    `memoria-pg db upgrade`, `memoria-pg ingest` and `memoria-pg serve` run it; run it yourself after
    a bulk load through the library or from cron, with the DSN of the user that owns the tables.
    """
    from ..db import vector_indexes

    cfg = config_of(ctx)
    checked = [validation.tenant(t) for t in tenants] or None

    def report(a: vector_indexes.Action) -> None:  # on stderr: stdout is the table (or JSON)
        if a.action == "skip":
            click.echo(a.line(), err=True)
            return
        click.echo(f"{a.action} {a.index_name} for tenant {a.tenant!r}, {a.memory_type} ({a.rows} memories): "
                   f"{a.seconds or 0:.1f}s", err=True)  # fmt: skip

    actions = vector_indexes.sync(
        dsn_for(cfg), cfg.vector_exact_max_rows, tenants=checked, dry_run=dry_run, progress=report,
        max_per_type=cfg.vector_index_max_per_type,
    )  # fmt: skip
    rows = [
        {"tenant": a.tenant, "memory_type": a.memory_type, "memories": a.rows,
         "action": a.action if a.seconds is not None or a.action in ("keep", "skip") else f"{a.action} (dry run)",
         "index": a.index_name}
        for a in actions
    ]  # fmt: skip
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from tabulate import tabulate

    bound = cfg.vector_exact_max_rows
    click.echo(tabulate(rows, headers="keys") if rows else f"no tenant holds more than {bound} memories of a type")


@db_group.command("current")
@click.pass_context
def db_current(ctx: click.Context) -> None:
    """Print the schema revision of the database."""
    from ..db import migrate

    click.echo(migrate.current(dsn_for(config_of(ctx))) or "base (no schema)")


@db_group.command("history")
@click.pass_context
def db_history(ctx: click.Context) -> None:
    """List the migrations, oldest first."""
    from ..db import migrate

    for rev, down, doc in migrate.history(config_of(ctx).dsn or "postgresql://"):
        click.echo(f"{down or 'base'} -> {rev}  {doc}")


@cli.group("types")
def types_group() -> None:
    """Memory types (the shards)."""


@types_group.command("add")
@click.argument("name")
@click.pass_context
def types_add(ctx: click.Context, name: str) -> None:
    """Create the shard (partitions and indexes) of a new memory type NAME."""
    from ..db import migrate

    created = migrate.add_memory_type(dsn_for(config_of(ctx)), name)
    click.echo(f"memory type {name!r} {'created' if created else 'already exists'}")


@types_group.command("list")
@click.pass_context
def types_list(ctx: click.Context) -> None:
    """List the memory types."""
    with connect(dsn_for(config_of(ctx))) as conn:
        for (name,) in conn.execute("SELECT name FROM memoria.memory_types ORDER BY name"):
            click.echo(name)


@cli.group("graph")
def graph_group() -> None:
    """The Apache AGE graph that mirrors entities and mentions (when the server has AGE)."""


@graph_group.command("rebuild")
@click.option("--tenant", required=True, help="Tenant whose graph to rebuild from the plain tables.")
@click.pass_context
def graph_rebuild(ctx: click.Context, tenant: str) -> None:
    """Rebuild one tenant's AGE graph from the entity tables."""
    from ..db.graph_age import rebuild

    validation.tenant(tenant)  # before anything connects: "" is no tenant
    with open_system(config_of(ctx)) as system:
        if not system.db.capabilities.age:
            raise click.ClickException("this server has no AGE graph (see `memoria-pg doctor`)")
        with system.db.connection() as conn:
            rebuild(conn, tenant)
    click.echo(f"graph of tenant {tenant!r} rebuilt")
