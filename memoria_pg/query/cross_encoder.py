"""Optional cross-encoder reranking between retrieval and ranking (a local sentence-transformers model)."""

from __future__ import annotations

import functools
import math
import os
import threading
from typing import Any

from ..core.types import CandidateRecord, ProcessedQuery
from ..errors import ConfigError

_lock = threading.Lock()


@functools.lru_cache(maxsize=4)
def load_cross_encoder(path: str) -> Any:
    """Load a CrossEncoder from a local folder (nothing is downloaded)."""
    if not os.path.isdir(path):
        raise ConfigError(
            f"cross-encoder path {path!r} is not a directory: give a local model folder "
            "(e.g. a saved cross-encoder/ms-marco-MiniLM-L-6-v2)"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from sentence_transformers import CrossEncoder
    except ImportError:
        raise ConfigError(
            "the cross-encoder needs sentence-transformers: pip install 'memoria-pg[embeddings]'"
        ) from None
    return CrossEncoder(path, device="cpu", local_files_only=True)


def rerank(model: Any, query: ProcessedQuery, candidates: list[CandidateRecord], top_n: int) -> list[CandidateRecord]:
    """Score the top_n candidates with the cross-encoder; they replace their scores and come first."""
    head, tail = candidates[:top_n], candidates[top_n:]
    if not head:
        return candidates
    with _lock:  # torch modules are not thread-safe
        scores = model.predict([(query.normalized, c.content) for c in head], show_progress_bar=False)
    floor = max((c.retrieval_score for c in tail), default=0.0) + 1.0
    for c, score in zip(head, scores):
        score = float(score)
        c.scores["cross_encoder"] = score
        c.base_score = c.final_score = score
        # Above every non-reranked candidate, in the cross-encoder's order.
        c.retrieval_score = floor + 1.0 / (1.0 + math.exp(-score))
    head.sort(key=lambda c: (-c.final_score, c.memory_id))
    return head + tail
