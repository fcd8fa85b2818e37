-- Graph worker (Apache AGE): the same bounded walk and the same rows as workers/graph.sql, over the AGE
-- graph memoria_graph (mirrored by memoria_pg/graph_age.py) instead of the plain tables:
--   seeds    = (:Entity) vertices of the current tenant whose norm_name is a query entity
--   walk     = breadth-first over (:Entity)-[:RELATED]-(:Entity) (one edge per pair, from the smaller
--              entity_id, read from both ends: migration 0017), entity hops < depth, each entity
--              following at most `fanout` edges (RELATED weight desc, then entity_id)
--   mentions = each reached entity's `entity_memories` most recent memories (memory id desc), read
--              from memoria.memory_entities: a MENTIONS edge carries no memory id to order by (its
--              start vertex ids follow the sync's order, not the memories' ids)
--   result   = hops = min entity hops + 1 over the entities that offered the memory, entity_hits =
--              how many of them; hops, then entity_hits desc, then memory id desc
-- The walk is the SECURITY DEFINER function memoria.graph_walk, whose SQL lives in migration 0007
-- (migrations/versions/0007_bounded_graph_walk_attribute_subject.py; 0003 made the graph functions;
-- 0017 and 0019 edit it):
-- the label tables cannot have row-level security (PostgreSQL would then refuse AGE's non-leakproof graphid and agtype
-- operators as index conditions), so memoria_app has no privilege on them and the function reads them
-- for the tenant of the transaction (memoria.tenant), which it checks on the seeds, on the reached
-- entities and on the memories (memory_entities is also under row-level security for the owner).
-- It is SQL over AGE's label tables, not Cypher: a Cypher variable-length match enumerates every
-- path instead of a breadth-first frontier (and AGE takes no parameter in its bounds), and a Cypher
-- property filter is a scan of the whole label. There every step is a btree probe (indexes from
-- migration 0001: Entity (tenant, norm_name), RELATED (start_id, end_id), Entity (id); RELATED (end_id)
-- from 0017; memory_entities' primary key (tenant, entity_id, memory_id) INCLUDE (memory_type) from
-- 0019 for an untyped walk, and (entity_id, memory_type, memory_id) from 0007 for a typed one),
-- written as LATERAL subqueries behind OFFSET 0 so the plan is a parameterized nested loop whatever
-- the (often missing) statistics on agtype expressions say.
SELECT memory_id, memory_type, hops, entity_hits
FROM memoria.graph_walk(%(entities)s::text[], %(depth)s::integer, %(memory_type)s::text, %(limit)s::integer,
                        %(fanout)s::integer, %(entity_memories)s::integer)
