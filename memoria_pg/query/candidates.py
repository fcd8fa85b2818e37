"""Candidate construction in one final CTE, type filtering, and retrieval-only ordering."""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ..config import Config
from ..core.types import VALID_NOW, CandidateRecord, SourceHit, Validity
from ..db import load_sql, schema_current, vector_of
from ..db.arrays import Float8Array, Int4Array, Int8Array, text_array
from ..db.database import nearest_readable, register_clamped_times
from ..db.native import NativeStatement, native
from .shards import ALL
from .workers import WorkerRegistry
from .workers.base import Statement, shard_sql

BM25_DEFAULTS = (Config.bm25_k1, Config.bm25_b)  # BM25's k1 and b by default

# How v3_statement makes V3's statement of sql/v3_search.sql and sql/final_candidates.sql: the vector
# worker's exact form replaces the template's marker line (a tenant above the exact bound is searched by
# the vector worker itself: QueryPipeline.retrieve_v3_in), the final CTE's own hits CTE (up to
# _HITS_END) is left out, and its rows come with their hit's distance and rank, the number of hits
# (which V4's caller knows already) and the query processor's entity lookup.
_V3_SEARCHES = (("-- @exact\n", "workers/vector_exact"),)
_HITS_END = "\n), declared AS ("
_V3_EDITS = (
    (
        "SELECT m.id AS memory_id, o.fused AS retrieval_score,",
        "SELECT m.id AS memory_id, o.fused AS retrieval_score,\n"
        "       vh.score AS vector_distance, vh.rank AS vector_rank, (SELECT count(*) FROM hits) AS hit_count,\n"
        "       (SELECT coalesce(array_agg(e.name), '{}') FROM memoria.entities e\n"
        "        WHERE e.tenant = current_setting('memoria.tenant') AND e.norm_name = ANY(%(norms)s::text[]))\n"
        "           AS known_entities,",
    ),
    (
        "\n) m\n",
        "\n) m\nJOIN hits vh ON vh.memory_id = m.id  -- V3's hits: one per memory\n",
    ),
)
# The final CTE without the lexical feedback's CTEs (`head` to `feedback_norm`, which becomes an empty
# list): the statement of V3, and of every V4 query the feedback does not run for (LexicalFeedback.params
# gives it weight 0: RRF, a weight of 0, no BM25 terms). The whole file's plan would still carry them
# although no row reaches them: the probe's Append over every shard, the IDF scan and the CTEs between,
# each set up and shut down at every execution: 0.27 ms of a 2.4 ms V3 query at LoCoMo size (12%).
_FEEDBACK_CTES = ("), head AS (", "), rescored AS (")
_NO_FEEDBACK = (
    "), feedback_norm AS (  -- no lexical feedback for this statement: no rows\n"
    "    SELECT NULL::bigint AS memory_id, NULL::float8 AS norm WHERE false\n"
)
_HIT_ARRAYS = ("ids", "types", "sources", "ranks", "scores")  # the hits' parameters: V3 has none
# How the final CTE reads only its first %(fetch)s rows (build_candidates' `fetch`): the preferred type's
# first, each row with the number of candidates and of those of that type (_order_holds reads them),
# both counting only the candidates valid at the query time. Which candidates do not hold now (they
# stopped, or start later) is read from the partial index memories_bounded (migration 0020: the
# memories whose valid_to is set or whose validity starts after they were stored), not from their
# rows; they are left out of the ordered list, and only the rows of its first %(fetch)s are read:
# about 10 index probes and heap rows instead of one per candidate (up to 200), which at 1M memories,
# with the heap past the buffer cache, were most of the statement's time. Only for queries as of now
# (build_candidates reads every row for an as_of query, whose validity then depends on when every
# memory began to hold). A candidate whose row is gone (deleted
# since the workers read it) takes its place in the list but comes back as no row: build_candidates
# then reads every row.
_FIRST_SELECT = "SELECT m.id AS memory_id, o.fused AS retrieval_score,\n"
_FIRST_FROM = (
    "CROSS JOIN LATERAL unnest(ch.ids, ch.types, ch.fused, ch.feedback) WITH ORDINALITY "
    "AS o(memory_id, memory_type, fused, feedback, pos)\n"
)
_TOP_EDITS = (
    (
        _FIRST_SELECT,
        _FIRST_SELECT + "       cardinality(ch.ids) - gone.n AS candidate_total, gone.preferred AS preferred_total,\n",
    ),
    (
        _FIRST_FROM,
        "CROSS JOIN LATERAL (  -- the candidates not valid now: counted out, never read (memories_bounded)\n"
        "    SELECT coalesce(array_agg(x.id), '{}') AS ids, count(*) AS n,\n"
        "           (SELECT count(*) FROM unnest(ch.types) AS t(kind) WHERE t.kind = %(prefer_type)s::text)\n"
        "               - count(*) FILTER (WHERE x.memory_type = %(prefer_type)s::text) AS preferred  -- valid ones\n"
        "    FROM memoria.memories x\n"
        "    WHERE x.tenant = current_setting('memoria.tenant') AND x.id = ANY(ch.ids)\n"
        "      AND (x.valid_to IS NOT NULL OR x.valid_from > x.created_at)  -- the index's predicate\n"
        "      AND (x.valid_to <= now() OR x.valid_from > now()) AND NOT %(include_invalid)s::boolean\n"
        ") gone\n"
        "CROSS JOIN LATERAL (  -- the first %(fetch)s of the others, the preferred type's first\n"
        "    SELECT u.*\n"
        "    FROM unnest(ch.ids, ch.types, ch.fused, ch.feedback) WITH ORDINALITY\n"
        "         AS u(memory_id, memory_type, fused, feedback, pos)\n"
        "    WHERE u.memory_id <> ALL(gone.ids)\n"
        "    ORDER BY u.memory_type IS DISTINCT FROM %(prefer_type)s::text, u.pos\n"
        "    LIMIT %(fetch)s::bigint\n"
        ") o\n",
    ),
    (
        "\nORDER BY o.pos\n",
        "\nORDER BY o.memory_type IS DISTINCT FROM %(prefer_type)s::text, o.pos\n",
    ),
    # The access statistics as one subquery per column instead of the join: the planner evaluates
    # them above the sort and limit, for the rows returned only, not for every candidate (a probe of
    # memory_access each; the full form keeps the join, whose Memoize serves the whole list).
    (
        "       greatest(least(a.last_accessed_at, '9999-12-31 07:59:59.999999+00'), '0001-01-01 16:00:00+00') "
        "AS last_accessed_at,\n"
        "       coalesce(a.access_count, 0) AS access_count,\n",
        "       (SELECT greatest(least(a.last_accessed_at, '9999-12-31 07:59:59.999999+00'), "
        "'0001-01-01 16:00:00+00')\n"
        "        FROM memoria.memory_access a WHERE a.tenant = m.tenant AND a.memory_id = m.id) AS last_accessed_at,\n"
        "       coalesce((SELECT a.access_count FROM memoria.memory_access a\n"
        "                 WHERE a.tenant = m.tenant AND a.memory_id = m.id), 0) AS access_count,\n",
    ),
    (
        "LEFT JOIN memoria.memory_access a ON a.tenant = m.tenant AND a.memory_id = m.id"
        "  -- none: never returned ranked\n",
        "",
    ),
)


def final_cte_params(
    hits: Mapping[str, Sequence[SourceHit]],
    registry: WorkerRegistry,
    *,
    cap: int,
    rrf_k: int,
    depth: int,
    method: str = "score",
    weights: Mapping[str, float] | None = None,
    validity: Validity = VALID_NOW,
    embeddings: bool = True,
    scored: Sequence[tuple[SourceHit, float]] | None = None,
    fetch: int | None = None,
    prefer_type: str | None = None,
    terms: Sequence[str] = (),
    bm25: tuple[float, float] = BM25_DEFAULTS,
) -> dict[str, Any]:
    """The final CTE's parameters: every hit as parallel arrays, and each source's weight and
    score direction as the registry declares them (`weights` overrides the declared ones), and the
    registry's per-query weight shift (ConfidenceShift). `scored`: fused_scores(hits), if the caller
    has it. `fetch`: read only the first that many rows, those of `prefer_type` first (None: all).
    `terms`: the BM25 worker's terms, for the registry's lexical feedback (LexicalFeedback), given only
    where the BM25 and vector workers completed (pipeline.feedback_terms); `bm25`: BM25's k1 and b."""
    weights = dict(registry.weights(method) if weights is None else weights)
    if scored is None:
        scored = fused_scores(hits, registry)
    feedback = registry.feedback.params(method, terms)
    # The arrays as binary numbers and text literals (db/arrays.py): psycopg would dump a list in Python,
    # element by element (about 0.1 ms of client CPU for a LoCoMo query's hundred hits).
    return {
        **_hit_arrays(scored),
        "weight_sources": text_array(weights),
        "weight_values": Float8Array.of([float(v) for v in weights.values()]),
        "depth": depth,
        "rrf_k": rrf_k,
        "cap": cap,
        "method": method,
        "lower_better": text_array(registry.lower_is_better()),
        **registry.shift.params(),
        **feedback,
        "feedback_query": text_array(feedback["feedback_query"]),
        "k1": float(bm25[0]),
        "b": float(bm25[1]),
        "as_of": validity.as_of,
        "include_invalid": validity.include_invalid,
        "embeddings": embeddings,
        "fetch": fetch,
        "prefer_type": prefer_type,
    }


def _hit_arrays(scored: Sequence[tuple[SourceHit, float]]) -> dict[str, Any]:
    """The hits as the final CTE's parallel arrays (_HIT_ARRAYS), each with the score it fuses."""
    rows = [h for h, _ in scored]
    return {
        "ids": Int8Array.of([h.memory_id for h in rows]),
        "types": text_array([h.memory_type for h in rows]),
        "sources": text_array([h.source for h in rows]),
        "ranks": Int4Array.of([h.rank for h in rows]),
        "scores": Float8Array.of([score for _, score in scored]),
    }


def fused_scores(hits: Mapping[str, Sequence[SourceHit]], registry: WorkerRegistry) -> list[tuple[SourceHit, float]]:
    """Every hit with the score the final CTE fuses (Source.fused_score). A hit without a finite
    score (a NaN distance from a stored vector of zero norm) would make every fused score NaN: it is
    left out."""
    out = []
    sources: dict[str, Any] = {}
    for source_hits in hits.values():
        for h in source_hits:
            source = sources.get(h.source)
            if source is None:
                source = sources[h.source] = registry.source(h.source)
            score = source.fused_score(h)
            if math.isfinite(score):
                out.append((h, score))
    return out


def candidate_statement(
    hits: Mapping[str, Sequence[SourceHit]],
    registry: WorkerRegistry,
    *,
    cap: int,
    rrf_k: int,
    depth: int,
    method: str = "score",
    validity: Validity = VALID_NOW,
    embeddings: bool = True,
    fetch: int | None = None,
    prefer_type: str | None = None,
    terms: Sequence[str] = (),
    bm25: tuple[float, float] = BM25_DEFAULTS,
) -> tuple[str, dict[str, Any]]:
    """The final CTE (sql/final_candidates.sql) and its parameters for these hits."""
    params = final_cte_params(
        hits, registry, cap=cap, rrf_k=rrf_k, depth=depth, method=method, validity=validity, embeddings=embeddings,
        fetch=fetch, prefer_type=prefer_type, terms=terms, bm25=bm25,
    )  # fmt: skip
    return _final_text(feedback=params["feedback_weight"] > 0), params


class Candidates(list[CandidateRecord]):
    """The final CTE's candidates in the order it returned them, and `total`: how many there are,
    including those a `fetch` limit left unread."""

    total: int = 0


def build_candidates(
    conn: psycopg.Connection,
    hits: Mapping[str, Sequence[SourceHit]],
    registry: WorkerRegistry,
    *,
    cap: int,
    rrf_k: int,
    depth: int,
    method: str = "score",
    validity: Validity = VALID_NOW,
    embeddings: bool = True,
    fetch: int | None = None,
    prefer_type: str | None = None,
    terms: Sequence[str] = (),
    bm25: tuple[float, float] = BM25_DEFAULTS,
) -> Candidates:
    """Merge, deduplicate, fuse (`method`: "score" or "rrf"; `terms`, `bm25`: final_cte_params), cap and
    fetch in one statement; every candidate keeps its per-source scores. Memories not valid at the query
    time are left out. `embeddings` false: the candidates come without their vectors (None).

    `fetch` (a retrieval-only query that returns `fetch` memories and no candidate list): only the
    rows that can be among them are read, those of the type filter's `prefer_type` first. What it
    returns then holds, in retrieval order after the type filter, the same first `fetch` candidates as
    the whole list would: where that cannot be told from the rows read (a candidate left out could overtake
    one read, see _order_holds), or a superseded fact may be moved (prefer_current_facts), all are read."""
    if not any(hits.values()):
        return Candidates()
    scored = fused_scores(hits, registry)
    if fetch is not None and any(h.detail.get("current") == 0 for h in hits.get("attribute", ())):
        fetch = None  # prefer_current_facts may move a stale fact below a current one read anywhere
    fetch = _first_rows_limit(fetch, validity)
    params = final_cte_params(
        hits, registry, cap=cap, rrf_k=rrf_k, depth=depth, method=method, validity=validity,
        embeddings=embeddings, scored=scored, fetch=fetch, prefer_type=prefer_type, terms=terms, bm25=bm25,
    )  # fmt: skip
    # Binary results: 200 embeddings arrive as raw float32 instead of 76,800 numbers printed and
    # parsed back (the text parse was most of this statement's time). Same values: the SQL sends
    # `importance` as text, because a binary real is its float32 value, not the decimal it prints.
    statement = native(_final_text(feedback := params["feedback_weight"] > 0), "sql/final_candidates.sql")
    if fetch is None:
        rows = _fetch(conn, statement, params)
    else:
        rows = _fetch(conn, native(_top_text(feedback), "sql/final_candidates.sql (first rows)"), params)
        if not (_first_rows_complete(rows, fetch) and _order_holds(rows, prefer_type)):
            rows = _fetch(conn, statement, params)
    names = registry.score_names()
    found = _found(scored, {row["memory_id"] for row in rows})
    out = Candidates(_candidate(row, found[row["memory_id"]], names) for row in rows)
    out.total = int(rows[0].get("candidate_total", len(rows))) if rows else 0
    return out


@functools.cache
def _final_text(feedback: bool = True) -> str:
    """sql/final_candidates.sql, or without its lexical feedback (`feedback` false: _NO_FEEDBACK)."""
    text = load_sql("final_candidates")
    if feedback:
        return text
    start, end = (text.find(marker) for marker in _FEEDBACK_CTES)
    if any(text.count(marker) != 1 for marker in _FEEDBACK_CTES) or end < start:
        raise RuntimeError(f"sql/final_candidates.sql lost a line the form without feedback cuts at: {_FEEDBACK_CTES}")
    return text[:start] + _NO_FEEDBACK + text[end:]


@functools.cache
def _top_text(feedback: bool = True) -> str:
    """sql/final_candidates.sql (or its form without the feedback) with _TOP_EDITS: its first %(fetch)s
    rows, with the counts."""
    text = _final_text(feedback)
    for old, new in _TOP_EDITS:
        if text.count(old) != 1:
            raise RuntimeError(f"sql/final_candidates.sql lost the line build_candidates edits: {old!r}")
        text = text.replace(old, new)
    return text


def _first_rows_limit(fetch: int | None, validity: Validity) -> int | None:
    """`fetch`, or None (every row is read) for a query as of a time: the first-rows form tells which
    candidates hold as of now only (_TOP_EDITS)."""
    return None if validity.as_of is not None else fetch


def _first_rows_complete(rows: Sequence[Mapping[str, Any]], fetch: int) -> bool:
    """Whether the first-rows form gave every row it should: the first `fetch` of the valid candidates
    (or all of them). A candidate whose row is gone since its worker read it comes back as no row; no
    row at all (every candidate invalid, or gone) tells no count: both are read again in full."""
    return bool(rows) and len(rows) >= min(fetch, int(rows[0]["candidate_total"]))


def _order_holds(rows: Sequence[Mapping[str, Any]], prefer_type: str | None) -> bool:
    """Whether the first rows of the final CTE (`fetch` of them, the preferred type first) are the
    first of the retrieval order the caller makes of the whole list (retrieval_order, then the type
    filter). The final CTE orders by fused score; retrieval_order agrees, except that a candidate with
    no positive score ranks by ZERO_SCORE_SCALE x its inverse distance, at most ZERO_SCORE_SCALE: such
    a candidate left unread could overtake a read one whose score is not above that. So the order holds
    when every row of the filter's set was read, or the last one read scores above ZERO_SCORE_SCALE."""
    if not rows:
        return True
    preferred = int(rows[0]["preferred_total"])
    kept = [r for r in rows if r["memory_type"] == prefer_type] if preferred else list(rows)
    total = preferred or int(rows[0]["candidate_total"])
    return len(kept) >= total or (bool(kept) and float(kept[-1]["retrieval_score"]) > ZERO_SCORE_SCALE)


def _fetch(conn: psycopg.Connection, statement: NativeStatement, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of the final CTE or V3's statement (db/native.py: converted once, sent as it is), in
    binary, its clamped times read by psycopg's C loader (register_clamped_times)."""
    with psycopg.RawCursor(conn, row_factory=dict_row) as cur, schema_current():
        register_clamped_times(cur)
        return cur.execute(statement.text, statement.args(params), binary=True, prepare=True).fetchall()


def v3_statement(
    embedding: Any,
    registry: WorkerRegistry,
    *,
    limit: int,
    exact_max_rows: int,
    norms: Sequence[str] = (),
    cap: int,
    rrf_k: int,
    depth: int,
    method: str = "score",
    validity: Validity = VALID_NOW,
    embeddings: bool = True,
    fetch: int | None = None,
    bm25: tuple[float, float] = BM25_DEFAULTS,
) -> Statement:
    """V3's vector search and the final CTE as one statement (sql/v3_search.sql): the exact search of
    the whole table, while the tenant is within `exact_max_rows` as VectorWorker decides (no row
    above: the caller searches with the vector worker), gives the final CTE its hits in the server;
    `norms`: the query processor's entity lookup; `fetch`: only the first that many rows
    (build_candidates; not as_of a time, which the first-rows form cannot tell validity at: _TOP_EDITS)."""
    fetch = _first_rows_limit(fetch, validity)
    params = final_cte_params(
        {}, registry, cap=cap, rrf_k=rrf_k, depth=depth, method=method, validity=validity,
        embeddings=embeddings, scored=[], fetch=fetch, bm25=bm25,
    )  # fmt: skip
    for name in _HIT_ARRAYS:
        del params[name]
    search = {"embedding": embedding, "memory_type": None, "limit": limit, "exact_max_rows": exact_max_rows}
    clash = set(params) & {*search, "norms"}
    if clash:
        raise ValueError(f"the vector search's parameters {sorted(clash)} are the final CTE's too")
    return _v3_text(top=fetch is not None), {**params, **search, "norms": text_array(norms)}


@functools.cache
def _v3_text(top: bool = False) -> str:
    """sql/v3_search.sql with the vector worker's exact statement in place, then final_candidates.sql
    (without the feedback, which V3 never runs) after its hits CTE, with _V3_EDITS (and with `top`,
    _TOP_EDITS: the first `fetch` rows)."""
    text, final = load_sql("v3_search"), _top_text(feedback=False) if top else _final_text(feedback=False)
    _, sep, rest = final.partition(_HITS_END)
    if not sep or _HITS_END in rest:
        raise RuntimeError("sql/final_candidates.sql lost the line v3_statement splits it at")
    for old, new in _V3_EDITS:
        if rest.count(old) != 1:
            raise RuntimeError(f"sql/final_candidates.sql lost the line v3_statement extends: {old!r}")
        rest = rest.replace(old, new)
    for marker, name in _V3_SEARCHES:
        if text.count(marker) != 1:
            raise RuntimeError(f"sql/v3_search.sql lost its marker line {marker.strip()!r}")
        text = text.replace(marker, shard_sql(name, ALL).rstrip() + "\n")  # the whole table: no shard filter
    return text + sep + rest


@dataclass
class V3Result:
    """What V3's one statement gives: the candidates (as build_candidates makes them from the vector
    worker's hits), the number of hits, and the stored names of the looked-up entities; None when no
    candidate came back to carry them (no hit, or every hit invalid at the query time)."""

    candidates: list[CandidateRecord]
    hits: int
    known_entities: list[str] | None
    total: int = 0  # the candidates, including those a `fetch` limit left unread


def build_v3_candidates(conn: psycopg.Connection, statement: Statement, registry: WorkerRegistry) -> V3Result:
    """V3's candidates from its one statement (v3_statement's text and parameters), in `conn`'s
    tenant transaction; with its `fetch`, the first rows (every row where their order cannot be told
    from them: _order_holds)."""
    text, params = statement
    rows = _fetch(conn, native(text, "sql/v3_search.sql"), params)
    # Its hits are read in the same statement, so none can be gone; no row means no candidate valid now.
    if params.get("fetch") is not None and not _order_holds(rows, None):
        rows = _fetch(conn, native(_v3_text(), "sql/v3_search.sql"), params)
    names = registry.score_names()
    out = []
    for row in rows:
        hit = SourceHit(
            memory_id=row["memory_id"],
            source="vector",
            rank=int(row["vector_rank"]),
            score=float(row["vector_distance"]),
            memory_type=row["memory_type"],
        )
        out.append(_candidate(row, [(hit, hit.score)], names))
    if not rows:
        return V3Result(out, 0, None)
    total = int(rows[0].get("candidate_total", len(rows)))
    return V3Result(out, int(rows[0]["hit_count"]), list(rows[0]["known_entities"]), total)


def _found(scored: Iterable[tuple[SourceHit, float]], ids: Collection[int]) -> dict[int, list[tuple[SourceHit, float]]]:
    """The hits of the memories `ids` (the rows the final CTE returned) as it fused them, by source name:
    the hit and the score it was fused with (fused_scores; a hit without a finite one was left out of
    the statement)."""
    found: dict[int, list[tuple[SourceHit, float]]] = {}
    for h, score in scored:
        if h.memory_id in ids:
            found.setdefault(h.memory_id, []).append((h, score))
    for memory_hits in found.values():
        memory_hits.sort(key=lambda pair: pair[0].source)
    return found


def _candidate(
    row: dict[str, Any], found: Sequence[tuple[SourceHit, float]], score_names: Mapping[str, str]
) -> CandidateRecord:
    scores: dict[str, float] = {}
    for h, score in found:
        scores[score_names[h.source]] = score
        scores[f"{h.source}_rank"] = float(h.rank)
    for h, _ in found:
        for key, value in h.detail.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                scores[f"{h.source}_{key}"] = float(value)
    if row.get("feedback") is not None:  # the lexical feedback's normalized score (LexicalFeedback)
        scores["feedback"] = float(row["feedback"])
    distance = scores.get("vector_distance")
    base = 1.0 / (1.0 + distance) if distance is not None else 0.0
    embedding, accessed = row["embedding"], row["last_accessed_at"]
    return CandidateRecord(
        memory_id=row["memory_id"],
        tenant=row["tenant"],
        memory_type=row["memory_type"],
        content=row["content"],
        metadata=row["metadata"],
        importance=float(row["importance"]),
        created_at=nearest_readable(row["created_at"]),  # a legacy time out of range fails no query
        last_accessed_at=None if accessed is None else nearest_readable(accessed),
        access_count=int(row["access_count"]),
        external_id=row["external_id"],
        embedding=vector_of(embedding),
        sources=[h.source for h, _ in found],
        scores=scores,
        base_score=base,
        retrieval_score=float(row["retrieval_score"]),
    )


def filter_by_type(candidates: list[CandidateRecord], hint: str | None) -> tuple[list[CandidateRecord], bool]:
    """Keep the hinted type when any candidate has it; otherwise keep everything (the spec's fallback)."""
    if not hint:
        return candidates, False
    matching = [c for c in candidates if c.memory_type == hint]
    return (matching, True) if matching else (candidates, False)


# The weight of a candidate's inverse distance in retrieval order when its fused score is not positive
# (its sources have no weight, e.g. only the graph worker found it): it then ranks after nearly every
# scored candidate (a fused score is at least a source's weight / its list's length).
ZERO_SCORE_SCALE = 1e-3


def retrieval_order(candidates: list[CandidateRecord]) -> list[CandidateRecord]:
    """Retrieval-only mode: the retrieval score, falling back to inverse distance."""
    for c in candidates:
        c.final_score = c.retrieval_score if c.retrieval_score > 0 else c.base_score * ZERO_SCORE_SCALE
    return sorted(candidates, key=lambda c: (-c.final_score, -c.base_score, c.memory_id))


def prefer_current_facts(candidates: list[CandidateRecord]) -> list[CandidateRecord]:
    """For a question about a subject's attribute: a memory whose fact was superseded at the query
    time (the attribute worker's `current` 0) ranks just below the best memory whose fact held then,
    if it ranked above it. Supersession decides what is current; retrieval still decides the rest."""
    current = [c for c in candidates if c.scores.get("attribute_current") == 1.0]
    stale = [c for c in candidates if c.scores.get("attribute_current") == 0.0]
    if not current or not stale:
        return candidates
    best = max(current, key=lambda c: (c.final_score, c.base_score))
    for c in stale:
        if (c.final_score, c.base_score) >= (best.final_score, best.base_score):
            c.final_score = c.retrieval_score = best.final_score - 1e-9
            c.base_score = min(c.base_score, best.base_score)
    return sorted(candidates, key=lambda c: (-c.final_score, -c.base_score, c.memory_id))
