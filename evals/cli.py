"""`python -m evals` (and `memoria-pg eval`, which delegates here): parse, call run_eval, print the table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from memoria_pg import Config, MemoriaError

from .configurations import ALL_NAMES
from .data import DATA_ENV, DATA_LAYOUT
from .runner import DATASETS, run_eval


def _csv(value: str | None) -> tuple[str, ...] | None:
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else None


def parse_settings(pairs: tuple[str, ...]) -> dict[str, object]:
    """KEY=VALUE pairs -> typed Config overrides (parsed like MEMORIA_* variables)."""
    fields = {f.name for f in dataclasses.fields(Config)}
    raw: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().lower().removeprefix("memoria_")
        if not sep or key not in fields:
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE with KEY a Config field", param_hint="--set")
        raw[key] = value
    try:
        parsed = Config.from_env({f"MEMORIA_{k.upper()}": v for k, v in raw.items()})
    except MemoriaError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from exc
    return {k: getattr(parsed, k) for k in raw}


@click.command("eval")
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    envvar=DATA_ENV,
    help=f"Evaluation data folder, holding {DATA_LAYOUT} (required: this option or {DATA_ENV}).",
)
@click.option(
    "--datasets", default=",".join(DATASETS), show_default=True, help="Comma-separated data sets to evaluate."
)
@click.option("--limit-queries", type=click.IntRange(min=1), help="Only the first N queries of each data set.")
@click.option(
    "--tenants",
    "max_tenants",
    type=click.IntRange(min=1),
    help="Only the first N tenants (LoCoMo conversations, LongMemEval questions).",
)
@click.option(
    "--corpus-limit",
    type=click.IntRange(min=0),
    help="Per tenant, only the documents relevant to the kept queries plus N others.",
)
@click.option("--configs", help=f"Comma-separated configurations (default: all of {', '.join(ALL_NAMES)}).")
@click.option(
    "--cross-encoder",
    type=click.Path(exists=True, file_okay=False),
    help="Local cross-encoder model folder; adds the V4 + cross-encoder configuration.",
)
@click.option(
    "--dsn",
    envvar="MEMORIA_EVAL_DSN",
    help="Admin DSN allowed to CREATE DATABASE (a fresh database per data set). "
    "Default: an embedded server in a temporary directory.",
)
@click.option(
    "--age/--no-age", default=False, show_default=True, help="Use AGE for the graph worker when the server has it."
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Config override for every data set, e.g. --set fusion_semantic_weight=0.6 (repeatable).",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="MEMORIA_EVAL_CACHE",
    help="Embedding cache folder (default: ~/.cache/memoria-pg/eval).",
)
@click.option(
    "--context-turns",
    type=click.IntRange(min=0),
    default=None,
    help="Store each conversation turn (LoCoMo, LongMemEval) with this many turns before and after "
    "it in its session as context (0: none). Default: 2 for LoCoMo's short turns, 1 for "
    "LongMemEval's long ones.",
)
@click.option("--keep-db", is_flag=True, help="Keep the evaluation databases instead of dropping them.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Results folder: writes OUT/<timestamp>/ and OUT/latest.md.",
)
@click.pass_context
def eval_command(
    ctx: click.Context,
    data: Path | None,
    datasets: str,
    limit_queries: int | None,
    max_tenants: int | None,
    corpus_limit: int | None,
    configs: str | None,
    cross_encoder: str | None,
    dsn: str | None,
    age: bool,
    settings: tuple[str, ...],
    cache_dir: Path | None,
    context_turns: int | None,
    keep_db: bool,
    out: Path,
) -> None:
    """Measure retrieval quality on LoCoMo, SciFact, HotpotQA, LongMemEval and MS MARCO, print the table."""
    root = ctx.find_root().obj
    dsn = dsn or (root.dsn if isinstance(root, Config) else None)
    try:
        report = run_eval(
            data,
            _csv(datasets) or DATASETS,
            limit_queries=limit_queries,
            max_tenants=max_tenants,
            corpus_limit=corpus_limit,
            configurations=_csv(configs),
            cross_encoder=cross_encoder,
            dsn=dsn,
            settings=parse_settings(settings),
            use_age=age,
            cache_dir=cache_dir,
            out=out,
            keep_databases=keep_db,
            context_turns=context_turns,
            log=lambda m: click.echo(m, err=True),
        )
    except MemoriaError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(report.markdown)
    for name, path in report.paths.items():
        click.echo(f"{name}: {path}", err=True)
