-- Staging tables for one ingest batch: created once per connection, emptied at every commit (ON COMMIT
-- DELETE ROWS; a transaction that touches no temporary table pays nothing for that). Creating them per
-- transaction cost ~2.5 ms of catalog work, a tenth of a one-memory update (results/lifecycle/). A memory's BM25 terms and
-- entities travel with it as arrays (one COPY row per memory, unnested by the statements that read
-- them): a row per posting would be ~15 rows per memory, each scanned once per tenant of the batch.
CREATE TEMP TABLE IF NOT EXISTS stage_memories (
    row_no integer NOT NULL,
    tenant text NOT NULL,
    memory_type text NOT NULL,
    external_id text,
    dedup_key text NOT NULL,
    content text NOT NULL,
    context text,
    metadata jsonb NOT NULL,
    importance real NOT NULL,
    pinned boolean NOT NULL,
    created_at timestamptz NOT NULL,
    valid_from timestamptz,       -- NULL: created_at
    valid_to timestamptz,         -- NULL: it holds
    embedding vector(384) NOT NULL,
    doc_len integer NOT NULL,
    terms text[] NOT NULL,        -- distinct BM25 terms
    tfs integer[] NOT NULL,       -- their frequencies, in the same order
    entity_names text[] NOT NULL, -- distinct entity names
    entity_norms text[] NOT NULL, -- their normalized forms, in the same order
    late boolean NOT NULL,        -- inserted after the others (a batch in flight inserts its key too)
    memory_id bigint
) WITH (toast_tuple_target = 8160) ON COMMIT DELETE ROWS;  -- the row inline (the vector is 1.5 kB): no TOAST table writes
CREATE TEMP TABLE IF NOT EXISTS stage_attributes (row_no integer NOT NULL, subject text NOT NULL, attribute text NOT NULL, value text NOT NULL) ON COMMIT DELETE ROWS;
-- Empty when they already existed (an earlier batch in the same transaction). DELETE, not TRUNCATE:
-- truncating a temp table swaps its files and takes an exclusive lock each time.
DELETE FROM stage_memories;
DELETE FROM stage_attributes;
