"""The error hierarchy: every error the library raises on purpose is a MemoriaError."""


class MemoriaError(Exception):
    """Base class of memoria-pg's errors."""


class ConfigError(MemoriaError):
    """A setting has an invalid value."""


class InputError(MemoriaError, ValueError):
    """A caller-supplied value (query, memory, record, file line) is invalid."""


class ServerError(MemoriaError):
    """The PostgreSQL server is unreachable or lacks something memoria-pg needs."""


class ExtensionMissing(ServerError):
    """A required PostgreSQL extension is not installed on the server."""


class SchemaError(ServerError):
    """The database schema is missing or older than this version of memoria-pg expects."""


class PoolTimeout(ServerError):
    """No pooled connection became free in time."""


class QueryTimeout(ServerError):
    """A query ran out of its budget (`query_timeout_ms`) outside its retrieval workers: one of its
    own statements was cancelled by the server, or waited for a connection, past what remained."""


class SyncRunning(ServerError):
    """Another `memoria-pg db vector-indexes` holds the database's lock: this sync changed nothing."""


class NotFound(MemoriaError, LookupError):
    """No memory of the tenant has that id (another tenant's memory is missing, not forbidden)."""


def first_line(exc: BaseException) -> str:
    """An error's message in one line (its first), or its type's name when it has none: what a one-line
    account of a driver error quotes."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
