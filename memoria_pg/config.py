"""One typed configuration object, with defaults, overridable from MEMORIA_* variables."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import typing
from dataclasses import dataclass, fields
from pathlib import Path

from .core import validation
from .errors import ConfigError, InputError

FUSION_METHODS = ("score", "rrf")
EMBEDDING_BACKENDS = ("torch", "onnx", "onnx-int8")  # core.embedding_onnx.BACKENDS
INT4_MAX = 2_147_483_647  # a setting bound as an SQL integer must fit one
# The accepted range of each numeric setting, inclusive (README, "Configuration"); every other field is
# checked against its annotated type. max_content_chars: a memory's tsvector (the phrase worker's, at
# worst about 6 bytes per character) must fit PostgreSQL's 1 MB limit.
RANGES: dict[str, tuple[float, float]] = {
    "pool_min_size": (0, INT4_MAX),
    "pool_max_size": (1, INT4_MAX),
    "pool_timeout": (0.001, 86_400),
    "embedding_dim": (1, 16_000),
    "embedding_batch_size": (1, INT4_MAX),
    "query_cache_size": (0, INT4_MAX),
    "top_k": (1, 10_000),
    "ranking_candidate_limit": (1, INT4_MAX),
    "retrieval_deadline_ms": (1, INT4_MAX),
    "statement_timeout_ms": (0, INT4_MAX),
    "query_timeout_ms": (1, INT4_MAX),
    "ingest_statement_timeout_ms": (0, INT4_MAX),
    "worker_limit": (1, INT4_MAX),
    "graph_candidate_limit": (1, INT4_MAX),
    "graph_fanout": (1, INT4_MAX),
    "graph_entity_memories": (1, INT4_MAX),
    "phrase_candidates": (1, INT4_MAX),
    "fusion_semantic_weight": (0, 1),
    "rrf_k": (0, 1_000_000),
    "rrf_depth": (1, INT4_MAX),
    "bm25_k1": (0, 1_000),
    "bm25_b": (0, 1),
    "bm25_postings_per_term": (1, INT4_MAX),
    "hnsw_ef_search": (1, 1_000),
    "vector_exact_max_rows": (0, 2**63 - 1),
    "vector_index_max_per_type": (0, 1_000_000),
    "vector_parallel_parts": (1, 64),
    "vector_parallel_min_rows": (0, 2**63 - 1),
    "vector_parallel_alone_min_rows": (0, 2**63 - 1),
    "cross_encoder_top_n": (0, INT4_MAX),
    "max_content_chars": (1, 150_000),
    "max_query_chars": (1, 150_000),
    "ingest_batch_size": (1, INT4_MAX),
    "ingest_first_batch_size": (0, INT4_MAX),
    "ingest_writers": (1, INT4_MAX),
    "replica_max_lag_ms": (0, INT4_MAX),
    "replica_wait_ms": (0, 60_000),
    "replica_retry_s": (0, 86_400),
}
DEFAULT_MEMORY_TYPES = ("general", "episodic", "semantic", "procedural", "preference", "fact")
_IDENT = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


def valid_identifier(value: str, what: str) -> str:
    if not _IDENT.match(value):
        raise ConfigError(
            f"invalid {what} {value!r}: use 1-41 lower-case letters, digits or underscores, starting with a letter"
        )
    return value


@dataclass(frozen=True)
class Config:
    """Effective settings. Every field reads MEMORIA_<FIELD NAME IN UPPER CASE> from the environment."""

    dsn: str | None = None
    data_dir: str | None = None  # embedded server's data directory (default: user data dir)
    pool_min_size: int = 2
    pool_max_size: int = 10
    pool_timeout: float = 10.0  # seconds to wait for a free pooled connection

    memory_types: tuple[str, ...] = DEFAULT_MEMORY_TYPES
    default_memory_type: str = "general"
    default_tenant: str = "default"

    embedding_model: str | None = None  # local path; None = packaged all-MiniLM-L6-v2
    embedding_dim: int = 384
    embedding_batch_size: int = 64
    # What runs the model: its ONNX export on ONNX Runtime with 8-bit weights and arithmetic (the default:
    # every main metric of the evaluation within 0.004 of the float graph's, 1.5x less CPU per query than
    # it; the float graph embeds instead on a host where the int8 one does not run or strays from it), the
    # float export (the same vectors as torch to 1e-6), or sentence-transformers on torch. No torch is
    # imported by a query process on ONNX; the graphs are made once from the local weights (core/embedding_onnx.py).
    embedding_backend: str = "onnx-int8"
    query_cache_size: int = 1024

    top_k: int = 10
    ranking_candidate_limit: int = 200
    retrieval_deadline_ms: int = 2000
    statement_timeout_ms: int = 30000
    # The budget of a query's statements, end to end (its embedding not counted): each runs with what
    # remains as its statement_timeout; QueryTimeout when it runs out outside the workers.
    query_timeout_ms: int = 10000
    workers_to_use: tuple[str, ...] = ()  # empty = the route decides; checked against the worker registry
    worker_limit: int = 50  # per-worker candidate limit, divided across the selected shards the tenant uses
    graph_candidate_limit: int = 50  # the graph's hop limit comes from the route (query/routing.py)
    # Bounds of the graph walk (its work grows with these, not with how many memories mention a hub):
    # each entity of the frontier follows at most graph_fanout edges (strongest co-occurrence first),
    # and each reached entity offers at most graph_entity_memories memories (the most recent first).
    graph_fanout: int = 10
    graph_entity_memories: int = 100
    # Memories checked positionally per query phrase: its rarest term's postings, in impact order.
    phrase_candidates: int = 500
    fusion_semantic_weight: float = 0.5
    # How the final CTE fuses the sources into the retrieval score: "score" = weighted sum of each
    # source's min-max normalized scores; "rrf" = weighted reciprocal-rank fusion (rrf_k, rrf_depth).
    fusion_method: str = "score"
    rrf_k: int = 60
    rrf_depth: int = 20  # ranks past this depth of a source add nothing to the fused retrieval score
    # Score fusion's lexical feedback (query/workers/registry.LexicalFeedback): the first candidates'
    # shared terms re-score the first 20 by BM25. About +1.2-1.7 ms of server time per query (README,
    # "Fusion"); false keeps the fusion without it.
    lexical_feedback: bool = True
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    bm25_postings_per_term: int = 2000  # impact-ordered postings read per query term
    hnsw_ef_search: int = 100
    # Exact vector search (every vector of the tenant compared, read from a covering index) while the
    # tenant has at most this many memories per memory type searched; above it, HNSW on the tenant's own
    # index, which `memoria-pg db vector-indexes` builds for each (tenant, type) above it (0 = always
    # HNSW: every (tenant, type) gets one). Without its index the HNSW statement searches exactly.
    # The crossover is in the README (configuration).
    vector_exact_max_rows: int = 5_000
    # The library builds a tenant's own HNSW index in the background once a write takes one of its
    # memory types past vector_exact_max_rows (db/vector_indexes.IndexKeeper; never with a bound of 0,
    # where every (tenant, type) is indexed by `memoria-pg db vector-indexes`). Needs a DSN that owns
    # the tables; off, a library deployment runs that command itself.
    vector_index_auto: bool = True
    # At most this many of those indexes per memory type (0: no limit), the largest tenants': every
    # partial index on a partition costs each insert into it and each HNSW plan there, whatever the
    # tenant (200 indexes: about 0.3 ms each; 1,000: 1.7 and 2.6 ms). A tenant left without one is
    # searched exactly. db/vector_indexes.plan; README, "Configuration".
    vector_index_max_per_type: int = 200
    # An untyped query's vector search of a tenant whose memory types cost at least
    # vector_parallel_min_rows to search (the memories of each type searched exactly, plus
    # vector_exact_max_rows for each type searched with HNSW) runs as up to vector_parallel_parts
    # statements at once, each on its own pooled connection, the memory types dealt among them
    # (VectorWorker.parts). 1 = one statement. Measured in the README (configuration).
    vector_parallel_parts: int = 2
    vector_parallel_min_rows: int = 20_000
    # The same bound for a search with cores to spare (WorkerContext.spare_cores): a query the library
    # embeds starts its vector search once the vector is in hand, when its other workers have had a
    # head start; with no other query of this process in flight, two statements then cost its latency
    # less than they cost the machine (README: configuration). 0: no such split.
    vector_parallel_alone_min_rows: int = 5_000
    # A ranked query's access-statistics write (the ranking's access signal) ends after the query
    # returns, a failure logged; true: the query waits for it and diagnostics.access_error holds any
    # failure. With standbys the query always waits (read-your-writes). README: configuration.
    access_statistics_wait: bool = False

    enable_v4: bool = True
    enable_sharding: bool = True
    # Off by default: the final CTE already fuses the vector and BM25 ranks (README: configuration).
    enable_fusion: bool = False
    enable_phrase_index: bool = True
    enable_graph: bool = True
    enable_query_expansion: bool = False
    enable_ranking: bool = True
    enable_relevance_pool: bool = True
    enable_cross_encoder: bool = False
    cross_encoder_model: str | None = None
    cross_encoder_top_n: int = 20
    enable_tracing: bool = False
    # A query whose vector the library computes starts the workers that do not need it (BM25, graph,
    # phrase, attribute) before embedding it, and the vector worker once it has it: the embedding runs
    # beside their statements instead of before them (not for a typed query the relevance pool may
    # answer alone: it needs the vector first). docs/measurements.md: "The query path".
    overlap_embedding: bool = True
    # A query that returns only its top_k memories (retrieval-only, no candidate list, no trace)
    # leaves out the route's auxiliary workers (graph, phrase: no weight in the retrieval score), whose
    # candidates would rank after every one returned; they run after all when that does not hold
    # (QueryPipeline.leave_out_auxiliary). The same memories, order and scores. README: configuration.
    skip_auxiliary_workers: bool = True
    use_age: bool = True  # use AGE for the graph worker when the server has it
    plugins: str | None = None  # "module:function[,module:function]"; each receives the PluginRegistry
    load_plugin_entry_points: bool = False  # also load the memoria_pg.plugins entry points

    # Attributes of which a subject has one value at a time: a newer statement of the same subject's
    # attribute supersedes the older one from its time on (a trailing " *" names a prefix).
    single_valued_attributes: tuple[str, ...] = (
        "location", "employer", "occupation", "age", "spouse", "partner", "boss", "manager", "address",
        "phone number", "email", "favourite *",
    )  # fmt: skip

    max_content_chars: int = 100_000
    max_query_chars: int = 4_000
    # Records per ingest transaction: each tenant of a batch costs a dozen statements, so larger
    # batches spend less per memory (README: configuration).
    ingest_batch_size: int = 2000
    # A store_many call (without its own batch_size) of more than ingest_batch_size records writes a
    # first batch of this many, each next one twice the last, up to ingest_batch_size: the writers
    # start on a small batch while the next is validated and embedded, instead of waiting for a whole
    # one (README: configuration); a call that fits in one batch stays one. 0, or at least
    # ingest_batch_size: every batch full.
    ingest_first_batch_size: int = 256
    ingest_writers: int = 2  # connections writing batches concurrently in store_many (1: one at a time)
    # The statement_timeout of an ingest batch's statements (0: none). Not statement_timeout_ms, the
    # ceiling of interactive statements: a bulk load must not fail because a batch is big or the
    # machine busy (writers wait for each other's locks in one order, so they never deadlock).
    ingest_statement_timeout_ms: int = 0

    # Hot standbys of `dsn` the query path reads from (README, "Read replicas"; db/replicas.py): per query
    # the one with the fewest queries of this process in flight, among those whose replay lags at most
    # replica_max_lag_ms and that have replayed the tenant's last write through this process (waited for
    # at most replica_wait_ms, else the primary). A standby that failed is left out for replica_retry_s.
    replica_dsns: tuple[str, ...] = ()
    replica_max_lag_ms: int = 1000
    replica_wait_ms: int = 50
    replica_retry_s: float = 5.0

    def __post_init__(self) -> None:
        _check_types(self)
        for name in self.memory_types:
            valid_identifier(name, "memory type")
        if self.default_memory_type not in self.memory_types:
            raise ConfigError(
                f"default_memory_type {self.default_memory_type!r} is not one of memory_types {list(self.memory_types)}"
            )
        if self.fusion_method not in FUSION_METHODS:
            raise ConfigError(f"fusion_method must be one of {list(FUSION_METHODS)}, got {self.fusion_method!r}")
        if self.embedding_backend not in EMBEDDING_BACKENDS:
            raise ConfigError(
                f"embedding_backend must be one of {list(EMBEDDING_BACKENDS)}, got {self.embedding_backend!r}"
            )
        for name, (low, high) in RANGES.items():
            value = getattr(self, name)
            if not low <= value <= high:  # NaN fails too
                raise ConfigError(f"{name} must be between {low:,} and {high:,}, got {value!r}")
        if self.dsn is not None and not self.dsn.strip():
            raise ConfigError(
                "the DSN (dsn, --dsn or MEMORIA_DSN) is empty: give a DSN, or unset it to use the embedded server"
            )
        _check_dsns(self)
        if self.replica_dsns and self.dsn is None:
            raise ConfigError("replica_dsns needs dsn (the primary): the embedded server has no standbys")
        if self.pool_min_size > self.pool_max_size:
            raise ConfigError(f"pool_min_size ({self.pool_min_size}) is over pool_max_size ({self.pool_max_size})")
        try:
            validation.tenant(self.default_tenant)
        except InputError as exc:
            raise ConfigError(f"default_tenant: {exc}") from None

    @classmethod
    def from_env(cls, environ: typing.Mapping[str, str] | None = None, **overrides: object) -> Config:
        """Defaults, then MEMORIA_* variables, then keyword overrides (None overrides are ignored)."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            raw = env.get(f"MEMORIA_{f.name.upper()}")
            if raw is not None:
                values[f.name] = _parse(f.name, raw, hints[f.name])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]  # each value parsed by its field's type

    def replace(self, **changes: object) -> Config:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]  # checked in __post_init__

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


EXPECTED_DSN = (
    "expected postgresql://user:password@host:port/dbname (percent-encode special characters in the password) "
    "or key=value pairs"
)


def _check_dsns(cfg: Config) -> None:
    """A DSN libpq cannot parse is "invalid DSN" here, before anything connects, and without libpq's
    message, which can quote the password."""
    named = [("dsn, --dsn or MEMORIA_DSN", cfg.dsn)] if cfg.dsn is not None else []
    named += [("replica_dsns, MEMORIA_REPLICA_DSNS", dsn) for dsn in cfg.replica_dsns]
    if not named:
        return
    import psycopg  # only with a DSN: the embedded default starts without it

    for name, dsn in named:
        try:
            psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.Error:
            raise ConfigError(f"invalid DSN ({name}): libpq cannot parse it; {EXPECTED_DSN}") from None


def _check_types(cfg: Config) -> None:
    """Each field holds its annotated type: an int (not a bool) for int, a number for float, a bool
    for bool, a string or None for str | None, a tuple of strings for tuple[str, ...]."""
    for f in fields(cfg):
        value, hint = getattr(cfg, f.name), _hints()[f.name]
        if hint is bool:
            ok = isinstance(value, bool)
        elif hint is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif hint is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif typing.get_origin(hint) is tuple:
            ok = isinstance(value, tuple) and all(isinstance(v, str) for v in value)
        elif hint is str or hint == str | None:
            ok = isinstance(value, str) or (value is None and hint is not str)
        else:
            continue  # a type this check does not know: its field checks itself
        if not ok:
            raise ConfigError(f"{f.name} must be {_type_name(hint)}, got {value!r}")


@functools.cache
def _hints() -> dict[str, object]:
    return typing.get_type_hints(Config)


def _type_name(hint: object) -> str:
    if typing.get_origin(hint) is tuple:
        return "a tuple of strings"
    names: dict[object, str] = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, "a string or None")


def _parse(name: str, raw: str, hint: object) -> object:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or str(origin) == "types.UnionType":
        if raw.strip() == "" or raw.lower() == "none":
            return None
        hint = next(a for a in args if a is not type(None))
        origin = typing.get_origin(hint)
    try:
        if hint is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        if origin is tuple:
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        return raw
    except ValueError:
        raise ConfigError(f"MEMORIA_{name.upper()}={raw!r} is not a valid {getattr(hint, '__name__', hint)}") from None


def default_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("memoria-pg")) / "pgdata"
