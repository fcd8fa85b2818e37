"""The CLI's root group, its one error boundary (library, driver and any other errors become a
one-line message and exit status 1, never a traceback), and what every command shares: the
configuration, the DSN (--dsn and --data-dir before or after the command), the MemorySystem."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import psycopg

from ..config import Config, default_data_dir
from ..db import embedded as server
from ..db.database import describe
from ..errors import MemoriaError, first_line

if TYPE_CHECKING:
    from ..system import MemorySystem


class _Cli(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Abort, click.exceptions.Exit):
            raise
        except Exception as exc:  # the one boundary: a message, exit status 1, no traceback
            raise click.ClickException(one_line(error_message(exc))) from exc

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            _server_options(command)
        return name, command, rest


def error_message(exc: BaseException) -> str:
    """What the CLI prints for an error. "cannot connect" comes only from a failure to connect
    (memoria_pg.db.connect, the pool); a driver error met on an open connection says so."""
    if isinstance(exc, MemoriaError):
        return str(exc)
    driver = _driver_error(exc)
    if isinstance(
        driver, (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName)
    ):
        return (
            f"the memoria schema is not installed in this database ({first_line(driver)}): run `memoria-pg db upgrade`"
        )
    if driver is not None:
        return describe(driver)
    if type(exc).__module__.startswith("alembic."):  # a revision Alembic cannot resolve: user input
        return f"migration: {exc} (`memoria-pg db history` lists the revisions, `memoria-pg db current` the database's)"
    return f"unexpected {type(exc).__name__}: {exc} (a bug in memoria-pg: please report it)"


def one_line(message: str) -> str:
    """A message of several lines (libpq's, with its hint on the next line) as one."""
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def _driver_error(exc: BaseException) -> psycopg.Error | None:
    """The psycopg error behind `exc`: itself, or what SQLAlchemy (Alembic's migrations) wrapped."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, psycopg.Error):
            return seen
        orig = getattr(seen, "orig", None)
        seen = orig if isinstance(orig, BaseException) else seen.__cause__
    return None


_WITH_SERVER_OPTIONS: set[click.Command] = set()
_DSN_HELP = "PostgreSQL DSN; without one, the embedded server is used."
_DATA_DIR_HELP = "Data directory of the embedded server."


def _set_root(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """--dsn / --data-dir given after a command: they override the root's (set before the command)."""
    if value is not None and param.name is not None:
        root = ctx.find_root()
        root.obj = config_of(ctx).replace(**{param.name: value})


def _server_options(command: click.Command) -> None:
    """Give a command (a group: each of its commands) the root's --dsn and --data-dir, so that
    `memoria-pg db upgrade --dsn DSN` works like `memoria-pg --dsn DSN db upgrade`. Commands that
    pass their arguments through (eval) or declare their own --dsn keep theirs."""
    if command in _WITH_SERVER_OPTIONS:
        return
    _WITH_SERVER_OPTIONS.add(command)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _server_options(sub)
        return
    if command.context_settings.get("ignore_unknown_options") or any("--dsn" in p.opts for p in command.params):
        return
    command.params.append(click.Option(["--dsn"], expose_value=False, callback=_set_root, help=_DSN_HELP))
    command.params.append(
        click.Option(
            ["--data-dir"],
            type=click.Path(file_okay=False),
            expose_value=False,
            callback=_set_root,
            help=_DATA_DIR_HELP,
        )
    )


@click.group(cls=_Cli)
@click.option("--dsn", envvar="MEMORIA_DSN", help=_DSN_HELP)
@click.option("--data-dir", envvar="MEMORIA_DATA_DIR", type=click.Path(file_okay=False), help=_DATA_DIR_HELP)
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
