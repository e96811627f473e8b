-- The anchored chain (docs/archive-format.md): chain format 2 and signed checkpoints.

-- Which bytes a row's hash covers.  Format 1 (every row archived before this
-- migration) hashed the event's canonical bytes alone; format 2 hashes every
-- column of the row (topic, partition, kafka_offset, recorded_at, seq, job,
-- traceparent too).  History is never rewritten: the rows already archived keep
-- format 1 and their hashes, and the writer archives format 2 from now on.  A
-- verifier accepts format 1 only before the first format-2 row.  No default
-- after this statement: whoever inserts a row says which format its hash is.
ALTER TABLE event_log ADD COLUMN chain_format smallint NOT NULL DEFAULT 1
    CHECK (chain_format IN (1, 2));
ALTER TABLE event_log ALTER COLUMN chain_format DROP DEFAULT;

-- The checkpoints the projector signed and published (projector.checkpoints): at
-- seq, the chain head was `head`.  A copy for convenience: an auditor trusts the
-- published copies (the checkpoint topic, or a file kept elsewhere), which the
-- database cannot rewrite, not this table.
CREATE TABLE checkpoints (
    seq        bigint      PRIMARY KEY CHECK (seq > 0),
    cluster    text        NOT NULL,
    head       bytea       NOT NULL CHECK (length(head) = 32),
    time       timestamptz NOT NULL,
    public_key text        NOT NULL,
    signature  text        NOT NULL,
    -- The record exactly as published (JSON text).
    record     text        NOT NULL
);
