-- Phrase worker: positional full-text match (words adjacent and in order) of each query phrase;
-- a memory matching more phrases ranks first, then by cover density.
SELECT m.id AS memory_id, m.memory_type,
       count(*) AS matched,
       array_agg(p.phrase ORDER BY p.ord) AS phrases,
       sum(ts_rank_cd(m.tsv, p.q)) AS score
FROM unnest(%(phrases)s::text[]) WITH ORDINALITY AS ph(phrase, ord)
CROSS JOIN LATERAL (SELECT ph.phrase, ph.ord, phraseto_tsquery('simple', ph.phrase) AS q) p
JOIN memoria.memories m ON m.tsv @@ p.q
WHERE m.tenant = current_setting('memoria.tenant')
  AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
  AND numnode(p.q) > 0
GROUP BY m.id, m.memory_type
ORDER BY matched DESC, score DESC, m.id
LIMIT %(limit)s
