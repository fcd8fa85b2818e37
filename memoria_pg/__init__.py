"""memoria-pg: long-term memory retrieval for AI agents inside PostgreSQL (Memoria V4).

Everything importable from this module is the public API (see the README's "Public API" section);
submodules are internal and may move between releases.
"""

from .async_system import AsyncMemorySystem
from .config import DEFAULT_MEMORY_TYPES, Config
from .core.embedding import Embedder, HashEmbedder, SentenceTransformerEmbedder, embed_memories
from .core.text import indexed_tokens, normalize, tokenize
from .core.types import (
    CandidateRecord,
    ForgetResult,
    HistoryEvent,
    Memory,
    MemoryRecord,
    ProcessedQuery,
    Route,
    SourceHit,
    StoreResult,
    Validity,
)
from .db import load_sql, sql_dir
from .db.embedded import start as start_embedded_server
from .db.embedded import stop as stop_embedded_server
from .errors import (
    ConfigError,
    ExtensionMissing,
    InputError,
    MemoriaError,
    NotFound,
    PoolTimeout,
    QueryTimeout,
    SchemaError,
    ServerError,
    SyncRunning,
)
from .plugins import PluginRegistry
from .query import QueryPipeline, QueryRequest, QueryResponse, Retrieval
from .query.diagnostics import Diagnostics
from .query.routing import PRESETS, ROUTES, Preset, Router, apply_preset
from .query.scheduler import CompletionPolicy, SchedulerResult
from .query.workers import DEFAULT_WORKERS, FusionWeights, Worker, WorkerContext, WorkerRegistry
from .ranking import RankingPipeline, RankingStage, RankingWeights
from .system import MemorySystem

__all__ = [
    "DEFAULT_MEMORY_TYPES",
    "DEFAULT_WORKERS",
    "PRESETS",
    "ROUTES",
    "AsyncMemorySystem",
    "CandidateRecord",
    "CompletionPolicy",
    "Config",
    "ConfigError",
    "Diagnostics",
    "Embedder",
    "ExtensionMissing",
    "ForgetResult",
    "FusionWeights",
    "HashEmbedder",
    "HistoryEvent",
    "InputError",
    "MemoriaError",
    "Memory",
    "MemoryRecord",
    "MemorySystem",
    "NotFound",
    "PluginRegistry",
    "PoolTimeout",
    "Preset",
    "ProcessedQuery",
    "QueryPipeline",
    "QueryRequest",
    "QueryResponse",
    "QueryTimeout",
    "RankingPipeline",
    "RankingStage",
    "RankingWeights",
    "Retrieval",
    "Route",
    "Router",
    "SchedulerResult",
    "SchemaError",
    "SentenceTransformerEmbedder",
    "ServerError",
    "SourceHit",
    "StoreResult",
    "SyncRunning",
    "Validity",
    "Worker",
    "WorkerContext",
    "WorkerRegistry",
    "apply_preset",
    "embed_memories",
    "indexed_tokens",
    "load_sql",
    "normalize",
    "sql_dir",
    "start_embedded_server",
    "stop_embedded_server",
    "tokenize",
]
__version__ = "0.1.0"
