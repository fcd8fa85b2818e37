"""memoria-pg: the admin CLI. Each command parses, calls the library, formats; errors become messages once."""

from __future__ import annotations

import collections
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import psycopg

from .config import Config, default_data_dir
from .db import embedded as server
from .db import migrate
from .errors import MemoriaError

if TYPE_CHECKING:
    from .query import QueryResponse
    from .system import MemorySystem


class _Cli(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemoriaError as exc:
            raise click.ClickException(str(exc)) from exc
        # Commands that talk to the server directly (db, types, doctor) meet psycopg's errors here.
        except (
            psycopg.errors.UndefinedTable,
            psycopg.errors.UndefinedFunction,
            psycopg.errors.InvalidSchemaName,
        ) as exc:
            raise click.ClickException(
                f"the memoria schema is not installed in this database ({exc}): run `memoria-pg db upgrade`"
            ) from exc
        except psycopg.OperationalError as exc:
            raise click.ClickException(f"cannot connect to PostgreSQL: {exc}") from exc


@click.group(cls=_Cli)
@click.option("--dsn", envvar="MEMORIA_DSN", help="PostgreSQL DSN; without one, the embedded server is used.")
@click.option(
    "--data-dir",
    envvar="MEMORIA_DATA_DIR",
    type=click.Path(file_okay=False),
    help="Data directory of the embedded server.",
)
@click.pass_context
def cli(ctx: click.Context, dsn: str | None, data_dir: str | None) -> None:
    """Long-term memory for AI agents inside PostgreSQL (the Memoria V4 retrieval path)."""
    ctx.obj = Config.from_env(dsn=dsn, data_dir=data_dir)


def _config(ctx: click.Context) -> Config:
    cfg: Config = ctx.find_root().obj
    return cfg


def _dsn(cfg: Config) -> str:
    """The configured DSN, or the embedded server's (started for this command, stopped after it)."""
    if cfg.dsn:
        return cfg.dsn
    return server.start(_data_dir(cfg), keep_running=False)


def _data_dir(cfg: Config) -> Path:
    return Path(cfg.data_dir) if cfg.data_dir else default_data_dir()


def _system(cfg: Config, auto_migrate: bool | None = None) -> MemorySystem:
    from .system import MemorySystem

    return MemorySystem(cfg, auto_migrate=auto_migrate)


@cli.command("config")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
def config_cmd(ctx: click.Context, as_json: bool) -> None:
    """Print the effective settings (defaults overridden by MEMORIA_* variables and options)."""
    values = _config(ctx).as_dict()
    if isinstance(values.get("dsn"), str):
        values["dsn"] = _redact(str(values["dsn"]))
    if as_json:
        click.echo(json.dumps(values, indent=2, default=list))
        return
    width = max(len(k) for k in values)
    for key, value in values.items():
        shown = ",".join(value) if isinstance(value, tuple) else value
        click.echo(f"{('MEMORIA_' + key.upper()).ljust(width + 8)}  {shown}")


def _redact(dsn: str) -> str:
    import re

    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)


@cli.group("server")
def server_group() -> None:
    """Manage the embedded PostgreSQL server (used when no DSN is given)."""


@server_group.command("start")
@click.pass_context
def server_start(ctx: click.Context) -> None:
    """Start the embedded server and leave it running; prints its DSN."""
    cfg = _config(ctx)
    click.echo(server.start(_data_dir(cfg), keep_running=True))


@server_group.command("stop")
@click.pass_context
def server_stop(ctx: click.Context) -> None:
    """Stop the embedded server."""
    stopped = server.stop(_data_dir(_config(ctx)))
    click.echo("stopped" if stopped else "not running")


@server_group.command("status")
@click.pass_context
def server_status(ctx: click.Context) -> None:
    """Say whether the embedded server is running, with its pid and DSN."""
    st = server.status(_data_dir(_config(ctx)))
    click.echo(f"data dir: {st.data_dir}")
    click.echo(f"running (pid {st.pid}): {st.dsn}" if st.running else "not running")


@cli.command()
@click.pass_context
def doctor(ctx: click.Context) -> None:
    """Check the server: version, extensions (vector required, AGE optional), schema revision."""
    import psycopg

    from .db import VECTOR_HELP, detect_capabilities

    cfg = _config(ctx)
    dsn = _dsn(cfg)
    with psycopg.connect(dsn, autocommit=True) as conn:
        caps = detect_capabilities(conn)
    click.echo(f"server:        PostgreSQL {caps.server_version} ({'DSN' if cfg.dsn else 'embedded'})")
    click.echo(f"pgvector:      {caps.vector or ('available, not created' if caps.vector_available else 'MISSING')}")
    click.echo(f"pg_trgm:       {'yes' if caps.pg_trgm else 'MISSING'}")
    click.echo(
        f"Apache AGE:    {caps.age or ('available' if caps.age_available else 'not installed (graph worker uses SQL)')}"
    )
    click.echo(f"graph backend: {caps.graph_backend}")
    click.echo(f"schema:        {migrate.current(dsn) or 'not installed (run: memoria-pg db upgrade)'}")
    if not caps.vector_available:
        raise click.ClickException(VECTOR_HELP)


@cli.group("db")
def db_group() -> None:
    """Schema migrations (Alembic)."""


@db_group.command("upgrade")
@click.argument("revision", default="head")
@click.pass_context
def db_upgrade(ctx: click.Context, revision: str) -> None:
    """Upgrade the schema to REVISION (default: head)."""
    cfg = _config(ctx)
    dsn = _dsn(cfg)
    migrate.upgrade(dsn, revision, memory_types=cfg.memory_types, use_age=cfg.use_age)
    click.echo(f"schema at {migrate.current(dsn)}")


@db_group.command("downgrade")
@click.argument("revision", default="base")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def db_downgrade(ctx: click.Context, revision: str, yes: bool) -> None:
    """Downgrade the schema to REVISION (default: base, which drops all memories)."""
    if revision == "base" and not yes:
        click.confirm("Downgrading to base deletes every memory. Continue?", abort=True)
    dsn = _dsn(_config(ctx))
    migrate.downgrade(dsn, revision)
    click.echo(f"schema at {migrate.current(dsn) or 'base'}")


@db_group.command("current")
@click.pass_context
def db_current(ctx: click.Context) -> None:
    """Print the schema revision of the database."""
    click.echo(migrate.current(_dsn(_config(ctx))) or "base (no schema)")


@db_group.command("history")
@click.pass_context
def db_history(ctx: click.Context) -> None:
    """List the migrations, oldest first."""
    for rev, down, doc in migrate.history(_config(ctx).dsn or "postgresql://"):
        click.echo(f"{down or 'base'} -> {rev}  {doc}")


@cli.group("types")
def types_group() -> None:
    """Memory types (the shards)."""


@types_group.command("add")
@click.argument("name")
@click.pass_context
def types_add(ctx: click.Context, name: str) -> None:
    """Create the shard (partitions and indexes) of a new memory type NAME."""
    created = migrate.add_memory_type(_dsn(_config(ctx)), name)
    click.echo(f"memory type {name!r} {'created' if created else 'already exists'}")


@types_group.command("list")
@click.pass_context
def types_list(ctx: click.Context) -> None:
    """List the memory types."""
    import psycopg

    with psycopg.connect(_dsn(_config(ctx))) as conn:
        for (name,) in conn.execute("SELECT name FROM memoria.memory_types ORDER BY name"):
            click.echo(name)


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), help="Default: from the file name.")
@click.option("--tenant", help="Tenant for records that name none.")
@click.option("--memory-type", help="Memory type for records that name none.")
@click.option("--batch-size", type=int, help="Records per transaction (default MEMORIA_INGEST_BATCH_SIZE).")
@click.option(
    "--migrate/--no-migrate", default=None, help="Upgrade the schema first (default: only on the embedded server)."
)
@click.pass_context
def ingest(
    ctx: click.Context,
    file: Path,
    fmt: str | None,
    tenant: str | None,
    memory_type: str | None,
    batch_size: int | None,
    migrate: bool | None,
) -> None:
    """Store the memories of a JSONL or CSV FILE.

    Fields: content (required), memory_type, tenant, metadata (object), importance (0..1),
    created_at (ISO 8601), entities (list), attributes ([[subject, attribute, value], ...]),
    external_id, embedding (list of 384 floats), pinned. Each batch is all-or-nothing; records
    already stored (same content or external_id) are skipped, so a failed ingest can be re-run.
    """
    from tqdm import tqdm

    from .ingest.files import read_records

    cfg = _config(ctx)
    overrides: dict[str, object] = {
        k: v for k, v in (("default_tenant", tenant), ("default_memory_type", memory_type)) if v
    }
    if memory_type and memory_type not in cfg.memory_types:
        overrides["memory_types"] = (*cfg.memory_types, memory_type)
    cfg = cfg.replace(**overrides)
    t0 = time.perf_counter()
    records = read_records(file, fmt)
    with _system(cfg, auto_migrate=migrate) as system:
        pairs = iter(records)
        wheres: collections.deque[str] = collections.deque()

        def body() -> Iterator[dict[str, Any]]:
            for where, record in pairs:
                wheres.append(where)
                yield record

        with tqdm(desc="ingest", unit="mem", file=sys.stderr, disable=None) as bar:
            result = system.store_many(
                body(), batch_size=batch_size, progress=bar.update, wheres=_lazy(wheres), return_ids=False
            )
    elapsed = time.perf_counter() - t0
    total = result.inserted + result.duplicates
    click.echo(
        f"stored {result.inserted} memories ({result.duplicates} duplicates skipped) from {total} "
        f"records in {elapsed:.1f}s: {total / elapsed if elapsed else 0:,.0f} records/s"
    )


def _lazy(items: collections.deque[str]) -> Iterator[str]:
    """Each record's place in the input, in order, taken off the queue as the batches use it (kept,
    they would grow with the input); a placeholder if a record's place is not known yet."""
    i = 0
    while True:
        i += 1
        yield items.popleft() if items else f"record {i}"


@cli.command()
@click.argument("text")
@click.option("--tenant", help="Tenant to search (default MEMORIA_DEFAULT_TENANT).")
@click.option("--type", "memory_type", help="Memory-type hint.")
@click.option("--top-k", type=int, help="How many memories to return.")
@click.option("--preset", help="A named retrieval mix (see `memoria-pg presets`).")
@click.option("--workers", help="Comma-separated workers, overriding the route.")
@click.option("--no-ranking", is_flag=True, help="Retrieval-only: order by retrieval score.")
@click.option("--v3", is_flag=True, help="Use the V3 path (vector search only).")
@click.option("--explain", is_flag=True, help="Show the route, each worker's SQL, plan and time, and the candidates.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole response as JSON.")
@click.pass_context
def query(
    ctx: click.Context,
    text: str,
    tenant: str | None,
    memory_type: str | None,
    top_k: int | None,
    preset: str | None,
    workers: str | None,
    no_ranking: bool,
    v3: bool,
    explain: bool,
    as_json: bool,
) -> None:
    """Retrieve the memories that answer TEXT."""
    from .query.routing import apply_preset

    cfg = _config(ctx)
    ranking = None if not no_ranking else False
    if preset:
        cfg, ranking_default = apply_preset(cfg, preset)
        ranking = ranking if ranking is not None else ranking_default
    worker_list = [w.strip() for w in workers.split(",")] if workers else None
    with _system(cfg) as system:
        response = system.query(
            text,
            tenant=tenant,
            memory_type=memory_type,
            top_k=top_k,
            workers=worker_list,
            ranking=ranking,
            v4=False if v3 else None,
        )
        if as_json:
            click.echo(json.dumps(response.as_dict(), indent=2, default=str))
            return
        if explain:
            click.echo(system.explain(response))
            return
    _print_memories(response)


def _print_memories(response: QueryResponse) -> None:
    d = response.diagnostics
    for i, m in enumerate(response.memories, 1):
        click.echo(f"{i:>2}. [{m.final_score:.4f}] ({m.memory_type}, {'+'.join(m.sources)}) {m.content}")
    click.echo(
        f"-- {d.returned_count} of {d.candidate_count} candidates, {d.total_ms:.1f} ms "
        f"(route {d.route}, sources {','.join(d.completed_sources) or '-'}, {d.retrieval_finish_reason})"
    )


@cli.group("graph")
def graph_group() -> None:
    """The Apache AGE graph that mirrors entities and mentions (when the server has AGE)."""


@graph_group.command("rebuild")
@click.option("--tenant", required=True, help="Tenant whose graph to rebuild from the plain tables.")
@click.pass_context
def graph_rebuild(ctx: click.Context, tenant: str) -> None:
    """Rebuild one tenant's AGE graph from the entity tables."""
    from .db.graph_age import rebuild

    with _system(_config(ctx)) as system:
        if not system.db.capabilities.age:
            raise click.ClickException("this server has no AGE graph (see `memoria-pg doctor`)")
        with system.db.connection() as conn:
            rebuild(conn, tenant)
    click.echo(f"graph of tenant {tenant!r} rebuilt")


@cli.command()
def presets() -> None:
    """List the named retrieval presets."""
    from .query.routing import PRESETS

    for name, p in PRESETS.items():
        click.echo(f"{name:<14} workers={','.join(p.workers)} ranking={p.ranking} cross_encoder={p.cross_encoder}")


@cli.command()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """Store a small bundled sample of memories and run a few queries against them."""
    from .demo import run_demo

    run_demo(_config(ctx), click.echo)


@cli.command("eval", add_help_option=False, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def eval_(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Measure retrieval quality on LoCoMo, SciFact, HotpotQA and LongMemEval (`memoria-pg eval --help`)."""
    # The harness (evals/ in a checkout) is not part of this package: imported only when asked for, and
    # run as this command, under the same root context (--dsn, MEMORIA_DSN).
    try:
        from evals.cli import eval_command
    except ModuleNotFoundError as exc:
        if exc.name not in ("evals", "evals.cli"):
            raise
        raise click.ClickException(
            "the evaluation harness is not installed: from a checkout run "
            "`pip install -e ./evals` (or `python -m evals`)"
        ) from exc
    with eval_command.make_context(ctx.info_name, list(args), parent=ctx.parent) as sub:
        eval_command.invoke(sub)


def main() -> None:
    cli(prog_name="memoria-pg")


if __name__ == "__main__":
    main()
