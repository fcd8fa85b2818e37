"""Maximal marginal relevance: trade relevance against similarity to what is already selected."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..core.types import CandidateRecord


def mmr(
    candidates: Sequence[CandidateRecord],
    k: int,
    lambda_: float = 0.7,
    relevance: Callable[[CandidateRecord], float] | None = None,
) -> list[CandidateRecord]:
    """Up to k candidates, each maximizing lambda * relevance - (1 - lambda) * max cosine to those before.

    Relevance (default: final_score) is divided by its maximum to share the cosine's [0, 1] scale;
    unlike min-max this keeps ratios, so the weakest of three close candidates does not drop to 0.
    A candidate without an embedding is dissimilar to everything; negative cosines count as 0.
    lambda_ = 1 keeps the relevance order. Ties keep the input order.
    """
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError("lambda_ must be between 0 and 1")
    k = min(k, len(candidates))
    if k <= 0:
        return []
    rel = np.array([(relevance or _final_score)(c) for c in candidates], dtype=np.float64)
    rel -= min(rel.min(), 0.0)
    rel = rel / rel.max() if rel.max() > 0 else np.ones_like(rel)
    unit = _unit_embeddings(candidates)
    max_sim = np.zeros(len(candidates))
    available = np.ones(len(candidates), dtype=bool)
    chosen: list[int] = []
    for _ in range(k):
        gain = np.where(available, lambda_ * rel - (1.0 - lambda_) * max_sim, -np.inf)
        best = int(np.argmax(gain))
        chosen.append(best)
        available[best] = False
        max_sim = np.maximum(max_sim, np.clip(unit @ unit[best], 0.0, 1.0))
    return [candidates[i] for i in chosen]


def _final_score(candidate: CandidateRecord) -> float:
    return candidate.final_score


def _unit_embeddings(candidates: Sequence[CandidateRecord]) -> np.ndarray:
    """Row-normalized embeddings; zero rows for missing or zero vectors."""
    dims = {np.asarray(c.embedding).shape for c in candidates if c.embedding is not None}
    if len(dims) > 1:
        raise ValueError(f"candidate embeddings have different shapes: {sorted(dims)}")
    if not dims:
        return np.zeros((len(candidates), 1))
    (dim,) = dims.pop()
    matrix = np.zeros((len(candidates), dim))
    for i, c in enumerate(candidates):
        if c.embedding is not None:
            matrix[i] = np.asarray(c.embedding, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit
