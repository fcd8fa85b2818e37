-- Candidate construction: every completed worker's hits (and relevance-pool ids) arrive as arrays,
-- are merged and deduplicated by memory id, given one fused retrieval score, capped at
-- RANKING_CANDIDATE_LIMIT, and only then the rows and embeddings are read (the expensive part).
-- The arrays arrive in binary (numbers) and as literals (text): db/arrays.py says why.
-- Fusion (%(method)s):
--   'score': sum over sources of weight * the hit's score min-max normalized within its source's
--            list of n hits, with the floor one step (range / (n - 1)) below the list's last hit:
--            best = 1, last = 1/n, a hit the source did not return = 0, a list of equal scores = 1
--            (so the last of two hits is worth half, not nothing). %(lower_better)s lists the
--            sources whose score is a distance or a hop count. Raw scores of different sources are
--            not comparable; normalized within each list they are.
--            The weights adapt to the query (issue #14), from what the lists themselves show: when
--            the best hit of %(shift_to)s (the vector source) is a near match, its cosine distance d1
--            below %(shift_near)s, the vector list is strong evidence and
--                shift = least(weight of %(shift_from)s, %(shift_slope)s * (%(shift_near)s - d1))
--            moves from %(shift_from)s's (BM25's) weight to its weight; otherwise the declared
--            weights hold. Min-max normalization stretches every list to the same range, so without
--            this a BM25 list that barely separates (many passages matching the same terms) counts
--            as much as a vector list that found near-duplicates of the question. Why the distance
--            of the best hit: it is the one signal of the lists that is on an absolute scale (a
--            cosine of one model), and within four of the five dev sets (not HotpotQA) queries with a
--            closer best vector hit are those where the vector source does better. The two numbers
--            (0.25, 6.0: a BM25 weight of 0.5 falls to 0.2 at d1 = 0.2, to 0 at d1 <= 0.17) were
--            chosen by leave-one-set-out over the five dev sets (README, "Fusion"; benchmarks/fusion_lab.py),
--            on the Snowball-stemmed BM25 of migration 0021 (0.3, 2.0 before it). No labels, no state:
--            one aggregate over the hits, so the statement costs what it did.
--   'rrf':   sum over sources of weight / (rrf_k + rank) for ranks <= %(depth)s (weights as declared).
-- Lexical feedback (score fusion only; issue #14; query/workers/registry.LexicalFeedback): of the
-- terms of the first %(feedback_seeds)s candidates of the fused order that another of the first
-- %(feedback_depth)s holds too (the query's own terms left out), the %(feedback_expansion)s that weigh
-- most (their share of each seed's text, summed, times their IDF) join the BM25 worker's terms
-- (feedback_query, each counted %(feedback_repeat)s times); the first %(feedback_depth)s candidates
-- with a fused score get the BM25 of those terms (k1 %(k1)s, b %(b)s, the tenant's statistics over
-- every memory type), normalized as a source's list and added with %(feedback_weight)s. A memory
-- longer than %(feedback_max_length)s tokens takes no part (no term lent, no score; a seed's place
-- stays empty), and no more of its postings than that are read: a head of long documents costs what
-- a head of memories of that length does.
-- Why: the words of a question often miss those of the memory that answers it (a multi-hop
-- question, a paraphrase, a turn that says "it" for what the question names), while the memories
-- ranked first share them: pseudo-relevance feedback (RM3) is the classic remedy. A second retrieval
-- round with the expanded terms would cost a worker round trip and a second fusion; re-scoring the
-- head reads the terms of %(feedback_depth)s memories (one memory_terms probe each) and the document
-- frequencies of the seeds' shared terms, whatever the tenant's size. Only a term another candidate
-- holds can lift anything but its own seed, hence "shared". The caller passes no terms (no
-- feedback) where the BM25 or the vector worker did not complete: a query that chose one source gets
-- that source alone. Its numbers were chosen by leave-one-set-out over the five dev sets
-- (benchmarks/feedback_lab.py; README, "Fusion").
-- Rows: every capped candidate valid at the query time, in retrieval order. A retrieval-only query as of
-- now that returns top_k memories and no candidate list (query(..., candidates=False)) runs this
-- statement with candidates._TOP_EDITS: the candidates not valid now are found in the partial index
-- memories_bounded (migration 0020) and left out, and only the rows of the first `fetch` others are
-- read, the preferred type's first (the type filter keeps only those when there is one), each row with
-- the number of valid candidates and of those of that type, so that the caller knows what it left
-- unread (candidates._order_holds): about 10 rows read instead of up to 200.
-- The rows are read one candidate at a time, each from its own shard: a lateral probe by (tenant, id,
-- memory_type), which prunes the other shards at run time. A join on id = ANY(ids) probed every
-- shard's index with every id (7 shards, 200 candidates: 1,400 index descents for 200 rows), and
-- array_position found each row's place by a scan of the array.
-- Validity (migration 0010): memories invalidated by the query time (%(as_of)s, or now) are left out,
-- and those that did not hold yet then (a validity start after it); %(include_invalid)s keeps every one.
WITH hits AS (
    SELECT h.*
    FROM unnest(%(ids)s::bigint[], %(types)s::text[], %(sources)s::text[], %(ranks)s::int[],
                %(scores)s::float8[]) AS h(memory_id, memory_type, source, rank, score)
), declared AS (
    SELECT * FROM unnest(%(weight_sources)s::text[], %(weight_values)s::float8[]) AS w(source, weight)
), shift AS (  -- one row: how much weight the vector source's near match takes from BM25 (0 for 'rrf')
    SELECT CASE WHEN %(method)s::text = 'score'
                THEN least((SELECT coalesce(max(d.weight), 0) FROM declared d WHERE d.source = %(shift_from)s::text),
                           %(shift_slope)s * greatest(0.0, %(shift_near)s - coalesce(
                               min(h.score) FILTER (WHERE h.source = %(shift_to)s::text), %(shift_near)s)))
                ELSE 0.0 END AS amount
    FROM hits h
), weights AS (
    SELECT d.source,
           d.weight + CASE d.source WHEN %(shift_to)s::text THEN s.amount WHEN %(shift_from)s::text THEN -s.amount
                                    ELSE 0.0 END AS weight
    FROM declared d CROSS JOIN shift s
), lists AS (  -- each hit with its weight and its source list's lowest, highest score and length
    SELECT h.*, coalesce(w.weight, 0) AS weight,
           min(h.score) OVER s AS lo, max(h.score) OVER s AS hi, count(*) OVER s AS list_len
    FROM hits h LEFT JOIN weights w USING (source)
    WINDOW s AS (PARTITION BY h.source)
), normalized AS (  -- how far above the floor (lo - step, step = (hi - lo) / (list_len - 1))
    SELECT l.*,
           CASE WHEN l.hi = l.lo THEN 1.0
                ELSE (CASE WHEN l.source = ANY(%(lower_better)s::text[]) THEN l.hi - l.score ELSE l.score - l.lo END
                      + (l.hi - l.lo) / (l.list_len - 1))
                     / ((l.hi - l.lo) * l.list_len / (l.list_len - 1))
           END AS norm
    FROM lists l
), merged AS (
    SELECT n.memory_id, n.memory_type,
           sum(CASE WHEN %(method)s::text = 'rrf'
                    THEN CASE WHEN n.rank <= %(depth)s THEN n.weight / (%(rrf_k)s + n.rank) ELSE 0 END
                    ELSE n.weight * n.norm END) AS retrieval_score,
           min(n.score) FILTER (WHERE n.source = 'vector') AS distance
    FROM normalized n
    GROUP BY n.memory_id, n.memory_type
), head AS (  -- the lexical feedback's candidates: the first %(feedback_depth)s with a fused score, in
                -- fused order to 1e-9 (a plan that sums in another order moves a score by less, and
                -- must not change which candidates lend their words), then distance and id
    SELECT m.memory_id, m.memory_type,
           row_number() OVER (ORDER BY round(m.retrieval_score::numeric, 9) DESC, m.distance ASC NULLS LAST,
                                       m.memory_id) AS pos
    FROM merged m
    WHERE m.retrieval_score > 0 AND %(feedback_weight)s::float8 > 0 AND cardinality(%(feedback_query)s::text[]) > 0
    ORDER BY round(m.retrieval_score::numeric, 9) DESC, m.distance ASC NULLS LAST, m.memory_id
    LIMIT %(feedback_depth)s::bigint
), head_terms AS MATERIALIZED (  -- every term of each, from its own shard (memory_terms_memory)
    SELECT h.memory_id, h.pos, t.term, t.tf, t.doc_len
    FROM head h
    CROSS JOIN LATERAL (  -- a probe per memory; the LIMIT also keeps the planner from making it a join
        SELECT mt.term, mt.tf, mt.doc_len FROM memoria.memory_terms mt  -- that reads the tenant's every
        WHERE mt.tenant = current_setting('memoria.tenant') AND mt.memory_id = h.memory_id  -- posting
          AND mt.memory_type = h.memory_type                          -- (its plan before any ANALYZE)
        LIMIT %(feedback_max_length)s::bigint  -- a memory of at most that many tokens has no more terms
    ) t
    WHERE t.doc_len <= %(feedback_max_length)s  -- a longer one takes no part, read no further than that
), query_terms AS (  -- the BM25 worker's terms, each counted %(feedback_repeat)s times
    SELECT q.term, count(*) * %(feedback_repeat)s::float8 AS qtf
    FROM unnest(%(feedback_query)s::text[]) AS q(term)
    WHERE EXISTS (SELECT 1 FROM head)
    GROUP BY q.term
), seed_vocab AS (  -- the first %(feedback_seeds)s candidates' terms but the query's, each weighted by its
                    -- share of each seed's text, summed, with how many of the seeds hold it
    SELECT ht.term, sum(ht.tf::float8 / greatest(ht.doc_len, 1)) AS share, count(*) AS seeds
    FROM head_terms ht
    WHERE ht.pos <= %(feedback_seeds)s AND NOT EXISTS (SELECT 1 FROM query_terms q WHERE q.term = ht.term)
    GROUP BY ht.term
), seed_terms AS (  -- those another candidate of the head holds too: another seed, or one of the others
                    -- (grouping the seeds' terms only, not the whole head's, is most of this CTE's saving)
    SELECT v.term, v.share
    FROM seed_vocab v
    WHERE v.seeds >= 2 OR EXISTS (SELECT 1 FROM head_terms o WHERE o.pos > %(feedback_seeds)s AND o.term = v.term)
), corpus AS (  -- the tenant's documents and their mean length, over every memory type
    SELECT sum(d.n_docs)::float8 AS n, sum(d.sum_len)::float8 / nullif(sum(d.n_docs), 0) AS avgdl
    FROM memoria.bm25_docs d
    WHERE d.tenant = current_setting('memoria.tenant') AND EXISTS (SELECT 1 FROM head)
), idf AS (  -- the IDF of every seed and query term (Lucene's, as the BM25 worker's)
    SELECT x.term, ln(1 + (c.n - df.df + 0.5) / (df.df + 0.5)) AS idf
    FROM (SELECT term FROM seed_terms UNION SELECT term FROM query_terms) x
    CROSS JOIN corpus c
    CROSS JOIN LATERAL (
        SELECT sum(t.df)::float8 AS df FROM memoria.bm25_terms t
        WHERE t.tenant = current_setting('memoria.tenant') AND t.term = x.term
    ) df
    WHERE df.df > 0
), feedback_terms AS (  -- the query's terms and the %(feedback_expansion)s seed terms of most weight
    SELECT q.term, q.qtf, i.idf FROM query_terms q JOIN idf i USING (term)
    UNION ALL
    (SELECT s.term, 1.0, i.idf FROM seed_terms s JOIN idf i USING (term)
     ORDER BY s.share * i.idf DESC, s.term COLLATE "C"
     LIMIT %(feedback_expansion)s::bigint)
), feedback AS (  -- BM25 of those terms over the feedback's candidates
    SELECT ht.memory_id,
           sum(f.qtf * f.idf * ht.tf * (%(k1)s::float8 + 1)
               / (ht.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * ht.doc_len / c.avgdl))) AS score
    FROM head_terms ht JOIN feedback_terms f USING (term) CROSS JOIN corpus c
    GROUP BY ht.memory_id
), feedback_norm AS (  -- normalized as a source's list: the positive scores, best 1, last 1/n
    SELECT f.memory_id,
           CASE WHEN f.hi = f.lo THEN 1.0
                ELSE (f.score - f.lo + (f.hi - f.lo) / (f.n - 1)) / ((f.hi - f.lo) * f.n / (f.n - 1)) END AS norm
    FROM (SELECT g.*, min(g.score) OVER () AS lo, max(g.score) OVER () AS hi, count(*) OVER () AS n
          FROM feedback g WHERE g.score > 0) f
), rescored AS (
    SELECT m.memory_id, m.memory_type, m.distance, fn.norm AS feedback,
           m.retrieval_score + coalesce(%(feedback_weight)s::float8 * fn.norm, 0) AS retrieval_score
    FROM merged m LEFT JOIN feedback_norm fn USING (memory_id)
), chosen AS (  -- one row: the capped candidates in retrieval order, as arrays
    SELECT array_agg(c.memory_id ORDER BY c.retrieval_score DESC, c.distance ASC NULLS LAST, c.memory_id) AS ids,
           array_agg(c.memory_type ORDER BY c.retrieval_score DESC, c.distance ASC NULLS LAST, c.memory_id) AS types,
           array_agg(c.retrieval_score ORDER BY c.retrieval_score DESC, c.distance ASC NULLS LAST, c.memory_id) AS fused,
           array_agg(c.feedback ORDER BY c.retrieval_score DESC, c.distance ASC NULLS LAST, c.memory_id) AS feedback
    FROM (SELECT * FROM rescored ORDER BY retrieval_score DESC, distance ASC NULLS LAST, memory_id LIMIT %(cap)s) c
)
-- The rows, fetched by one probe of each shard's id index with the whole array, and put back in
-- retrieval order by their position in it. Not a join to the capped rows: on the cached generic plan
-- the planner takes the hits for ~10 rows and joins them in a nested loop, which probed every shard
-- once per candidate (or compared every candidate with every row): two thirds of this statement's
-- server time at 100k. Each candidate's sources, scores and ranks are the hits the caller sent
-- (candidates.py), so only the fused score comes back. V3 runs everything after the hits CTE on its
-- own hits (sql/v3_search.sql) and extends the SELECT list and the LATERAL line (candidates.py, _V3_EDITS).
SELECT m.id AS memory_id, o.fused AS retrieval_score,
       o.feedback,  -- the lexical feedback's normalized score, NULL where it gave none
       m.tenant, m.memory_type, m.content, m.metadata,
       m.importance::text AS importance,  -- as printed: the result is fetched in binary (candidates.py)
       -- the times clamped to what a datetime holds in any session time zone, so that the client reads
       -- them with psycopg's C loader (db/database.py, CLAMPED_EARLIEST): only a legacy time changes
       greatest(least(m.created_at, '9999-12-31 07:59:59.999999+00'), '0001-01-01 16:00:00+00') AS created_at,
       m.external_id,
       greatest(least(a.last_accessed_at, '9999-12-31 07:59:59.999999+00'), '0001-01-01 16:00:00+00') AS last_accessed_at,
       coalesce(a.access_count, 0) AS access_count,
       CASE WHEN %(embeddings)s::boolean THEN m.embedding END AS embedding  -- only ranking reads them
FROM chosen ch
CROSS JOIN LATERAL unnest(ch.ids, ch.types, ch.fused, ch.feedback) WITH ORDINALITY AS o(memory_id, memory_type, fused, feedback, pos)
CROSS JOIN LATERAL (  -- one probe of one shard per candidate (see the header)
    SELECT x.* FROM memoria.memories x
    WHERE x.tenant = current_setting('memoria.tenant') AND x.id = o.memory_id AND x.memory_type = o.memory_type
    LIMIT 1
) m
LEFT JOIN memoria.memory_access a ON a.tenant = m.tenant AND a.memory_id = m.id  -- none: never returned ranked
WHERE (%(include_invalid)s::boolean
       OR ((m.valid_to IS NULL OR m.valid_to > coalesce(%(as_of)s::timestamptz, now()))
           AND CASE WHEN %(as_of)s::timestamptz IS NULL THEN m.valid_from IS NULL OR m.valid_from <= now()
                    ELSE coalesce(m.valid_from, m.created_at) <= %(as_of)s::timestamptz END))
ORDER BY o.pos
