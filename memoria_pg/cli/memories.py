"""Memories: ingest files, query, presets, the demo, the evaluation harness."""

from __future__ import annotations

import collections
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import config
from ..core import validation
from .base import cli, config_of, open_system

if TYPE_CHECKING:
    from ..query import QueryResponse


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv", "tsv"]), help="Default: from the file name.")
@click.option("--tenant", help="Tenant for records that name none.")
@click.option("--memory-type", help="Memory type for records that name none.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    help="Records per transaction (default MEMORIA_INGEST_BATCH_SIZE, the first batches smaller).",
)
@click.option(
    "--migrate/--no-migrate", default=None, help="Upgrade the schema first (default: only on the embedded server)."
)
@click.option(
    "--vector-indexes/--no-vector-indexes",
    default=True,
    help="Then give each tenant grown past vector_exact_max_rows memories of a type its own HNSW index "
    "(`memoria-pg db vector-indexes`; default: on).",
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
    vector_indexes: bool,
) -> None:
    """Store the memories of a JSONL, CSV or TSV FILE.

    Fields: content (required), memory_type, tenant, metadata (object), importance (0..1),
    created_at, valid_from, valid_to (ISO 8601), entities (list), attributes ([[subject, attribute,
    value], ...]), external_id, embedding (list of 384 floats), pinned, context; `memoria-pg export`
    writes them. Each batch is all-or-nothing; records already stored (same content or external_id)
    are skipped, so a failed ingest can be re-run.
    """
    from tqdm import tqdm

    from ..ingest.files import read_records

    cfg = _ingest_config(config_of(ctx), tenant, memory_type)
    t0 = time.perf_counter()
    records = read_records(file, fmt)
    with open_system(cfg, auto_migrate=migrate) as system:
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
        if vector_indexes and result.inserted:
            system.sync_vector_indexes(progress=lambda a: click.echo(a.line(), err=True))
    total = result.inserted + result.duplicates
    click.echo(
        f"stored {result.inserted} memories ({result.duplicates} duplicates skipped) from {total} "
        f"records in {elapsed:.1f}s: {total / elapsed if elapsed else 0:,.0f} records/s"
    )


def _ingest_config(cfg: config.Config, tenant: str | None, memory_type: str | None) -> config.Config:
    """The configuration with --tenant and --memory-type as the defaults of records that name none;
    given, each is checked ("" is an error, not the default)."""
    if tenant is not None:
        validation.tenant(tenant)
    if memory_type is not None:
        config.valid_identifier(memory_type, "memory type")
    overrides: dict[str, object] = {
        k: v for k, v in (("default_tenant", tenant), ("default_memory_type", memory_type)) if v is not None
    }
    overrides["vector_index_auto"] = False  # the command syncs once at the end (unless --no-vector-indexes)
    if memory_type and memory_type not in cfg.memory_types:
        overrides["memory_types"] = (*cfg.memory_types, memory_type)
    return cfg.replace(**overrides)


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
@click.option("--as-of", help="Answer as of this ISO 8601 time: the memories valid then.")
@click.option(
    "--reference-time",
    help="The ISO 8601 time the question is asked at, which 'last week' counts back from (default: --as-of, else now).",
)
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
    as_of: str | None,
    reference_time: str | None,
    explain: bool,
    as_json: bool,
) -> None:
    """Retrieve the memories that answer TEXT."""
    from ..query.routing import apply_preset

    cfg = config_of(ctx)
    ranking = None if not no_ranking else False
    if preset:
        cfg, ranking_default = apply_preset(cfg, preset)
        ranking = ranking if ranking is not None else ranking_default
    worker_list = [w.strip() for w in workers.split(",")] if workers else None
    with open_system(cfg) as system:
        response = system.query(
            text,
            tenant=cfg.default_tenant if tenant is None else tenant,
            memory_type=memory_type,
            top_k=top_k,
            workers=worker_list,
            ranking=ranking,
            v4=False if v3 else None,
            as_of=as_of,
            reference_time=reference_time,
            candidates=explain,  # only --explain shows more than the memories returned
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


@cli.command()
def presets() -> None:
    """List the named retrieval presets."""
    from ..query.routing import PRESETS

    for name, p in PRESETS.items():
        click.echo(f"{name:<14} workers={','.join(p.workers)} ranking={p.ranking} cross_encoder={p.cross_encoder}")


@cli.command()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """Store a small bundled sample of memories and run a few queries against them."""
    from ..demo import run_demo

    run_demo(config_of(ctx), click.echo)


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
