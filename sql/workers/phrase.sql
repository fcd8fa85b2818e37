-- Phrase worker: positional full-text match (words adjacent and in order) of each query phrase;
-- a memory matching more phrases ranks first, then by cover density.
-- Candidates come from the BM25 postings of each phrase's rarest term (equality lookups, which
-- row-level security lets use the index; the tsvector @@ operator is not leakproof, so under RLS
-- PostgreSQL would not use the GIN index for it), and only those rows are checked positionally.
-- At most %(per_phrase)s postings per phrase (Config.phrase_candidates), read in impact order (the
-- BM25 term-frequency factor: the term most frequent in the shortest memories first, then the most
-- recent), so a phrase whose rarest term is in tens of thousands of memories costs a bounded number
-- of positional checks; a memory past that many postings of the anchor term is not looked at.
-- Before a candidate's row is read, it must also hold a posting of the phrase's second-rarest term
-- (its companion) when that term's postings number at most %(companion_df)s (PhraseWorker: ten times
-- the candidates per phrase), read whole from the same index. A memory whose text holds the phrase
-- has a posting of each of its terms (the postings tokenize that text as the query's phrase is
-- tokenized, and add the context's words): the assumption the anchor already makes. So no match is
-- lost, and the rows of memories that hold the anchor term alone are not read (each costs an index
-- probe and a heap row: 1.36-1.48x on this statement at 100k and 1M, identical rows;
-- docs/measurements.md, "Why these defaults"). A commoner companion costs more postings than the
-- rows it spares.
-- The phrase list is MATERIALIZED: inlined, phraseto_tsquery ran again for every candidate row, in the
-- join filter and in ts_rank_cd (1.19x on this statement at 100k, docs/measurements.md, "Why these defaults").
WITH phrase AS MATERIALIZED (
    SELECT p.ord, p.phrase, phraseto_tsquery('simple', p.phrase) AS q
    FROM unnest(%(phrases)s::text[]) WITH ORDINALITY AS p(phrase, ord)
), term_df AS MATERIALIZED (  -- each phrase's terms, rarest first (by the tenant's document frequency)
    SELECT t.ord, t.term, coalesce(d.df, 0) AS df,
           row_number() OVER (PARTITION BY t.ord ORDER BY coalesce(d.df, 0), t.term) AS rarity
    FROM unnest(%(term_phrase)s::int[], %(terms)s::text[]) AS t(ord, term)
    LEFT JOIN LATERAL (
        SELECT sum(b.df) AS df FROM memoria.bm25_terms b
        WHERE b.tenant = current_setting('memoria.tenant') AND b.term = t.term
    ) d ON true
), candidate AS (  -- the anchor's (rarest term's) postings
    SELECT a.ord, p.memory_id, p.memory_type
    FROM term_df a
    CROSS JOIN LATERAL (
        SELECT mt.memory_id, mt.memory_type
        FROM memoria.memory_terms mt
        WHERE mt.tenant = current_setting('memoria.tenant') AND mt.term = a.term
          AND (%(memory_type)s::text IS NULL OR mt.memory_type = %(memory_type)s::text)
        ORDER BY mt.impact DESC, mt.memory_id DESC
        LIMIT %(per_phrase)s
    ) p
    WHERE a.rarity = 1
), companion AS (  -- the second-rarest term of a phrase, where its postings are few enough to read
    SELECT c.ord, c.term FROM term_df c WHERE c.rarity = 2 AND c.df <= %(companion_df)s
), holding AS MATERIALIZED (  -- the memories holding a companion
    SELECT c.ord, mt.memory_id
    FROM companion c
    JOIN memoria.memory_terms mt ON mt.tenant = current_setting('memoria.tenant') AND mt.term = c.term
    WHERE (%(memory_type)s::text IS NULL OR mt.memory_type = %(memory_type)s::text)
), kept AS (
    SELECT k.* FROM candidate k
    WHERE NOT EXISTS (SELECT 1 FROM companion c WHERE c.ord = k.ord)
       OR (k.ord, k.memory_id) IN (SELECT h.ord, h.memory_id FROM holding h)
)
SELECT m.id AS memory_id, m.memory_type,
       count(*) AS matched,
       array_agg(p.phrase ORDER BY p.ord) AS phrases,
       sum(ts_rank_cd(m.tsv, p.q)) AS score
FROM kept c
JOIN phrase p USING (ord)
JOIN memoria.memories m ON m.id = c.memory_id AND m.memory_type = c.memory_type
WHERE m.tenant = current_setting('memoria.tenant')
  AND numnode(p.q) > 0
  AND m.tsv @@ p.q
GROUP BY m.id, m.memory_type
ORDER BY matched DESC, score DESC, m.id
LIMIT %(limit)s
