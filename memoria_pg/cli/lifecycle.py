"""The lifecycle commands: get, update, delete, forget, erase-tenant, history, invalidate (and restore),
export."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import click

from ..core.types import Memory
from .base import cli, config_of, open_system


def _tenant_option(f: Any) -> Any:
    return click.option("--tenant", help="Tenant (default MEMORIA_DEFAULT_TENANT).")(f)


def _show(memory: Memory, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(memory), indent=2, default=str))
        return
    click.echo(f"memory {memory.id} ({memory.memory_type}, {memory.status}"
               f"{f', superseded by {memory.superseded_by}' if memory.superseded_by else ''})")  # fmt: skip
    click.echo(f"  {memory.content}")
    for name in ("context", "metadata", "external_id", "importance", "pinned", "created_at", "valid_from", "valid_to"):
        value = getattr(memory, name)
        if value not in (None, {}, ""):
            click.echo(f"  {name}: {value}")


def _metadata(text: str | None) -> Any:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc.msg}", param_hint="--metadata / --where") from None
    if not isinstance(value, dict):
        raise click.BadParameter(
            'must be a JSON object, e.g. \'{"speaker": "Maya"}\'', param_hint="--metadata / --where"
        )
    return value


@cli.command("get")
@click.argument("memory_id", type=int, required=False)
@click.option("--external-id", help="Find the memory by the external id it was stored with.")
@_tenant_option
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
def get_cmd(ctx: click.Context, memory_id: int | None, external_id: str | None, tenant: str | None,
            as_json: bool) -> None:  # fmt: skip
    """Show memory MEMORY_ID (or --external-id) with its validity and status."""
    with open_system(config_of(ctx)) as system:
        _show(system.get(memory_id, external_id=external_id, tenant=tenant), as_json)


@cli.command("update")
@click.argument("memory_id", type=int)
@_tenant_option
@click.option("--content", help="New text (re-embedded, re-indexed, re-extracted).")
@click.option("--context", help="New context.")
@click.option("--metadata", help="New metadata, a JSON object (replaces the old one).")
@click.option("--importance", type=float, help="New importance, 0..1.")
@click.option("--pinned/--not-pinned", default=None, help="Pin or unpin it.")
@click.option("--type", "memory_type", help="Move it to this memory type.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def update_cmd(ctx: click.Context, /, memory_id: int, tenant: str | None, as_json: bool, **given: Any) -> None:
    """Correct memory MEMORY_ID; only the given fields change."""
    fields = {k: v for k, v in given.items() if v is not None}
    if "metadata" in fields:
        fields["metadata"] = _metadata(fields["metadata"])
    if not fields:
        raise click.UsageError("nothing to update: give at least one of --content, --context, --metadata, "
                               "--importance, --pinned/--not-pinned, --type")  # fmt: skip
    with open_system(config_of(ctx)) as system:
        _show(system.update(memory_id, tenant=tenant, **fields), as_json)


@cli.command("delete")
@click.argument("memory_ids", type=int, nargs=-1, required=True)
@_tenant_option
@click.pass_context
def delete_cmd(ctx: click.Context, memory_ids: tuple[int, ...], tenant: str | None) -> None:
    """Delete memories and everything derived from them (all or none)."""
    with open_system(config_of(ctx)) as system:
        click.echo(f"deleted {system.delete(list(memory_ids), tenant=tenant)} memories")


@cli.command("forget")
@_tenant_option
@click.option("--type", "memory_type", help="Only memories of this type.")
@click.option("--before", help="Only memories created before this ISO 8601 time.")
@click.option("--where", help="Only memories whose metadata contains this JSON object.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def forget_cmd(ctx: click.Context, tenant: str | None, memory_type: str | None, before: str | None,
               where: str | None, yes: bool) -> None:  # fmt: skip
    """Delete the memories matching every given filter; shows how many first and asks."""
    filters = {"memory_type": memory_type, "before": before, "where": _metadata(where)}
    with open_system(config_of(ctx)) as system:
        preview = system.forget(tenant=tenant, dry_run=True, **filters)
        click.echo(f"{preview.matched} memories match" + (f": {preview.ids[:20]}" if preview.ids else ""))
        if preview.matched == 0:
            return
        if not yes:
            click.confirm(f"Delete these {preview.matched} memories?", abort=True)
        click.echo(f"deleted {system.forget(tenant=tenant, **filters).deleted} memories")


@cli.command("erase-tenant")
@click.argument("tenant")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def erase_tenant_cmd(ctx: click.Context, tenant: str, yes: bool) -> None:
    """Remove every row of TENANT in every table (the right to erasure); cannot be undone."""
    with open_system(config_of(ctx)) as system:
        count = len(system.list_memories(tenant=tenant, limit=1000))
        shown = f"{count}{'+' if count == 1000 else ''}"
        if not yes:
            click.confirm(f"Erase tenant {tenant!r} ({shown} memories, their history and statistics)?", abort=True)
        counts = system.erase_tenant(tenant)
    removed = ", ".join(f"{t} {n}" for t, n in counts.items() if n)
    click.echo(f"erased tenant {tenant!r}: {removed}" if removed else f"nothing stored for tenant {tenant!r} (0 rows)")


@cli.command("history")
@click.argument("memory_id", type=int)
@_tenant_option
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
def history_cmd(ctx: click.Context, memory_id: int, tenant: str | None, as_json: bool) -> None:
    """What happened to memory MEMORY_ID, oldest first."""
    with open_system(config_of(ctx)) as system:
        events = system.history(memory_id, tenant=tenant)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(e) for e in events], indent=2, default=str))
        return
    for e in events:
        click.echo(f"{e.at.isoformat()}  {e.event:<11} {json.dumps(e.detail) if e.detail else ''}")


@cli.command("invalidate")
@click.argument("memory_id", type=int)
@_tenant_option
@click.option("--at", help="From when it no longer holds (ISO 8601; default now: an ended memory keeps its end).")
@click.option("--restore", is_flag=True, help="Undo an invalidation instead.")
@click.pass_context
def invalidate_cmd(ctx: click.Context, memory_id: int, tenant: str | None, at: str | None, restore: bool) -> None:
    """Retire memory MEMORY_ID (queries leave it out from then on), or --restore it."""
    with open_system(config_of(ctx)) as system:
        memory = (
            system.restore(memory_id, tenant=tenant) if restore else system.invalidate(memory_id, tenant=tenant, at=at)
        )
    _show(memory, False)


@cli.command("export")
@_tenant_option
@click.option("--memory-type", help="Only memories of this type.")
@click.option("--where", help="Only memories whose metadata contains this JSON object.")
@click.option("--embeddings", is_flag=True, help="With each stored vector (an import then runs no model).")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE (default: standard output)."
)
@click.pass_context
def export_cmd(ctx: click.Context, tenant: str | None, memory_type: str | None, where: str | None, embeddings: bool,
               output: Path | None) -> None:  # fmt: skip
    """Write a tenant's memories as JSONL in the ingest format (`memoria-pg ingest FILE --tenant T` reads
    them back, here or in another database): one snapshot, in id order. Entities, attributes and BM25
    terms are derived again on import; ids and history are not exported. With --output, the file
    appears only when the export is complete."""
    with open_system(config_of(ctx)) as system:
        records = system.export(tenant=tenant, memory_type=memory_type, where=_metadata(where), embeddings=embeddings)
        if output is None:
            try:
                count = _write_jsonl(records, sys.stdout)
                sys.stdout.flush()
            except BrokenPipeError:  # the reader stopped early (`| head`): nothing more to say
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise click.exceptions.Exit(1) from None
        else:
            partial = output.with_name(output.name + ".partial")
            try:
                with partial.open("w", encoding="utf-8") as out:
                    count = _write_jsonl(records, out)
                partial.replace(output)
            finally:
                partial.unlink(missing_ok=True)
    click.echo(f"exported {count} memories{f' to {output}' if output else ''}", err=True)


def _write_jsonl(records: Iterable[dict[str, Any]], out: TextIO) -> int:
    count = 0
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        count += 1
    return count
