"""memoria-pg: long-term memory retrieval for AI agents inside PostgreSQL (Memoria V4)."""

from .config import Config
from .errors import ConfigError, ExtensionMissing, InputError, MemoriaError, PoolTimeout, SchemaError, ServerError
from .ingest import MemoryRecord, StoreResult
from .system import MemorySystem, QueryResponse

__all__ = [
    "Config", "MemorySystem", "MemoryRecord", "QueryResponse", "StoreResult", "MemoriaError", "ConfigError",
    "InputError", "ServerError", "ExtensionMissing", "SchemaError", "PoolTimeout",
]
__version__ = "0.1.0"
