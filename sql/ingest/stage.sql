-- Staging tables for one ingest batch; they vanish with the transaction.
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
    embedding vector(384) NOT NULL,
    doc_len integer NOT NULL,
    memory_id bigint
) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS stage_terms (row_no integer NOT NULL, term text NOT NULL, tf integer NOT NULL) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS stage_entities (row_no integer NOT NULL, name text NOT NULL, norm_name text NOT NULL) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS stage_attributes (row_no integer NOT NULL, subject text NOT NULL, attribute text NOT NULL, value text NOT NULL) ON COMMIT DROP;
