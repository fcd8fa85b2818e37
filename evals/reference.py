"""Exact answers outside PostgreSQL, to check the SQL workers against.

Over the same embeddings and the same tokens (memoria_pg.tokenize) as the database:
exact cosine similarity, rank_bm25's BM25Okapi (k1, b as configured), and reciprocal-rank fusion
(k=60) of the two. Rankings are per tenant, like the database's.

RRF comes twice because its depth matters a lot: `ref_rrf` fuses the top FUSION_DEPTH (20) of
each ranking and then follows the cosine order, exactly what V4 does with its vector and BM25
workers; `ref_rrf_full` fuses the full rankings, where documents that both rank middling outvote
either one's top hits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from memoria_pg import Config, indexed_tokens, normalize, tokenize

from .data import Dataset
from .fusion import rrf

# How deep V4's reciprocal-rank fusion reads each source's ranking (Config.rrf_depth, 20).
FUSION_DEPTH = Config().rrf_depth
REFERENCES = ("ref_dense", "ref_bm25", "ref_rrf", "ref_rrf_full")
DESCRIPTIONS = {
    "ref_dense": "exact cosine over the same embeddings (in process)",
    "ref_bm25": "rank_bm25 BM25Okapi over the same tokens (in process)",
    "ref_rrf": f"RRF k=60 over the top {FUSION_DEPTH} of ref_dense and ref_bm25, then cosine order (in process)",
    "ref_rrf_full": "RRF k=60 over the full rankings of ref_dense and ref_bm25 (in process)",
}
RRF_K = 60


def reference_runs(
    dataset: Dataset,
    doc_vectors: Mapping[tuple[str, str], np.ndarray],
    query_vectors: Mapping[str, np.ndarray],
    *,
    names: Iterable[str] = REFERENCES,
    depth: int = 100,
    k1: float = 1.2,
    b: float = 0.75,
) -> dict[str, dict[str, list[str]]]:
    """{reference name: {query id: ranked doc ids, at most `depth`}}."""
    from rank_bm25 import BM25Okapi

    names = [n for n in REFERENCES if n in set(names)]
    runs: dict[str, dict[str, list[str]]] = {n: {} for n in names}
    by_tenant: dict[str, list] = {}
    for doc in dataset.documents:
        by_tenant.setdefault(doc.tenant, []).append(doc)
    for tenant, docs in by_tenant.items():
        queries = [q for q in dataset.queries if q.tenant == tenant]
        if not queries:
            continue
        ids = [d.doc_id for d in docs]
        need_dense = bool({"ref_dense", "ref_rrf", "ref_rrf_full"} & set(names))
        need_bm25 = bool({"ref_bm25", "ref_rrf", "ref_rrf_full"} & set(names))
        matrix = np.stack([doc_vectors[(tenant, i)] for i in ids]) if need_dense else None
        bm25 = BM25Okapi([indexed_tokens(d.content, d.context) for d in docs], k1=k1, b=b) if need_bm25 else None
        for q in queries:
            dense = bm25_order = None
            if matrix is not None:
                dense = exact_cosine_order(matrix, query_vectors[q.query_id])
            if bm25 is not None:
                bm25_order = positive_order(bm25.get_scores(tokenize(normalize(q.text))))
            if "ref_dense" in runs:
                runs["ref_dense"][q.query_id] = [ids[i] for i in dense[:depth]]
            if "ref_bm25" in runs:
                runs["ref_bm25"][q.query_id] = [ids[i] for i in bm25_order[:depth]]
            if "ref_rrf" in runs:
                runs["ref_rrf"][q.query_id] = [ids[i] for i in rrf_then_dense(dense, bm25_order)[:depth]]
            if "ref_rrf_full" in runs:
                fused = rrf({"dense": dense.tolist(), "bm25": bm25_order.tolist()}, k=RRF_K)
                runs["ref_rrf_full"][q.query_id] = [ids[i] for i, _ in fused[:depth]]
    return runs


def rrf_then_dense(dense: np.ndarray, bm25: np.ndarray, depth: int = FUSION_DEPTH) -> list[int]:
    """RRF over the top `depth` of each ranking, then the remaining documents in cosine order."""
    head = [i for i, _ in rrf({"dense": dense.tolist(), "bm25": bm25.tolist()}, k=RRF_K, depth=depth)]
    seen = set(head)
    return head + [int(i) for i in dense if int(i) not in seen]


def exact_cosine_order(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Row indices by descending cosine similarity (rows and query are unit length); ties by index."""
    similarity = matrix @ np.asarray(query, dtype=np.float32)
    return np.lexsort((np.arange(len(similarity)), -similarity))


def positive_order(scores: np.ndarray) -> np.ndarray:
    """Indices of the positive scores, best first; ties by index (insertion order, like memory ids)."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    return order[scores[order] > 0]
