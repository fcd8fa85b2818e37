"""The CLI's root group, its one error boundary (library and driver errors become messages once),
and what every command shares: the configuration, the DSN, the MemorySystem."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import psycopg

from ..config import Config, default_data_dir
from ..db import embedded as server
from ..errors import MemoriaError

if TYPE_CHECKING:
    from ..system import MemorySystem


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


def config_of(ctx: click.Context) -> Config:
    cfg: Config = ctx.find_root().obj
    return cfg


def dsn_for(cfg: Config) -> str:
    """The configured DSN, or the embedded server's (started for this command, stopped after it)."""
    if cfg.dsn:
        return cfg.dsn
    return server.start(data_dir_for(cfg), keep_running=False)


def data_dir_for(cfg: Config) -> Path:
    return Path(cfg.data_dir) if cfg.data_dir else default_data_dir()


def open_system(cfg: Config, auto_migrate: bool | None = None) -> MemorySystem:
    from ..system import MemorySystem

    return MemorySystem(cfg, auto_migrate=auto_migrate)
