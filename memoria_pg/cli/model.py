"""The embedding model: export it to ONNX ahead of time (embedding_backend = onnx / onnx-int8)."""

from __future__ import annotations

from pathlib import Path

import click

from .base import cli, config_of


@cli.group("model")
def model_group() -> None:
    """The embedding model (embedding_model, embedding_backend)."""


@model_group.command("export-onnx")
@click.option("--int8/--no-int8", default=True, show_default=True, help="Also make the int8 (quantized) graph.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    help="Where the graphs are kept (default: MEMORIA_MODEL_CACHE or the user cache folder).",
)
@click.pass_context
def export_onnx_cmd(ctx: click.Context, int8: bool, cache_dir: str | None) -> None:
    """Export the embedding model's local weights to ONNX (once; nothing is downloaded).

    Needs torch and transformers for this step only; later processes with embedding_backend=onnx
    or onnx-int8 load the graph with ONNX Runtime and import neither. With --int8 it then says whether
    the int8 graph passes the check each process makes before using it on this host."""
    from ..core.embedding import _packaged_model
    from ..core.embedding_onnx import ensure_onnx

    cfg = config_of(ctx)
    folder = Path(cfg.embedding_model or _packaged_model())
    if not folder.is_dir():
        raise click.ClickException(f"embedding model path {str(folder)!r} is not a directory")
    target = Path(cache_dir) if cache_dir else None
    click.echo(ensure_onnx(folder, cache_dir=target))
    if int8:
        click.echo(ensure_onnx(folder, quantized=True, cache_dir=target))
        # The check each process makes before embedding with it (and the float graph's probe vectors,
        # kept beside it, made now rather than by the first query process).
        from ..core.embedding_onnx import OnnxEmbedder

        checked = OnnxEmbedder(str(folder), quantized=True, cache_dir=target)
        if checked.int8_refused is None:
            click.echo("int8 graph: checked on this host, in use (embedding_backend onnx-int8)")
        else:
            click.echo(f"int8 graph: not used on this host ({checked.int8_refused}); the float graph embeds instead")
