-- The keyring: which principal may produce which event types, for which queues and
-- namespaces, under which Ed25519 public key (projector.trust, docs/producers.md).
-- Written by `tephra producer add|remove`, read by the projector before each batch.
CREATE TABLE keyring (
    name       text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9._@-]{1,128}$'),
    -- 32 raw bytes, URL-safe base64 without padding.
    public_key text        NOT NULL CHECK (public_key ~ '^[A-Za-z0-9_-]{43}$'),
    -- Event types (tephra.job.submitted.v1 ...); at least one.
    may        text[]      NOT NULL CHECK (cardinality(may) > 0),
    -- Empty: any queue / any namespace.
    queues     text[]      NOT NULL DEFAULT '{}',
    namespaces text[]      NOT NULL DEFAULT '{}',
    added_at   timestamptz NOT NULL DEFAULT now()
);
