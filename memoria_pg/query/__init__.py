"""The query wing, one module per stage of the spec's query path (pipeline.py runs them in order):
processor -> expansion -> (embedding) -> routing -> relevance -> shards -> workers/ + scheduler ->
candidates (final CTE, type filter) -> ranking (memoria_pg.ranking) -> response, diagnostics, tracing."""

from .pipeline import QueryPipeline, QueryRequest, Retrieval
from .response import QueryResponse

__all__ = ["QueryPipeline", "QueryRequest", "QueryResponse", "Retrieval"]
