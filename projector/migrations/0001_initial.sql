-- Tephra projector schema v1: the event archive, consumer progress, the
-- dead-letter record, the projection of the folded state, and snapshots.
-- One database holds one cluster's archive and projection.

-- The archive.  seq is assigned by the single writer (the projector holding
-- the writer lock) in commit order, so readers tailing by seq see no gaps.
-- data is json, not jsonb: it is stored verbatim (canonical, sorted keys) so
-- the hash can be recomputed byte for byte; cast to jsonb to query it.
CREATE TABLE event_log (
    seq          bigint      PRIMARY KEY CHECK (seq > 0),
    event_id     text        NOT NULL UNIQUE,
    type         text        NOT NULL,
    cluster      text        NOT NULL,
    subject      text,
    source       text        NOT NULL,
    time         timestamptz NOT NULL,
    data         json        NOT NULL,
    topic        text        NOT NULL,
    partition    integer     NOT NULL,
    kafka_offset bigint      NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    -- hash = sha256(prev_hash || canonical JSON of the event); the first
    -- row's prev_hash is 32 zero bytes.
    prev_hash    bytea       NOT NULL,
    hash         bytea       NOT NULL
);
CREATE INDEX event_log_type_time ON event_log (type, time);
CREATE INDEX event_log_subject ON event_log (subject);

-- Where each consumer resumes: the next offset to read, written in the same
-- transaction as the rows that consumed the offsets before it.
CREATE TABLE consumer_offsets (
    consumer    text        NOT NULL,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    next_offset bigint      NOT NULL CHECK (next_offset >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition)
);

-- Records that are not events (malformed) or events the fold refused
-- (invalid), with the stable reason code.  Never archived in event_log.
CREATE TABLE rejected_events (
    id           bigserial   PRIMARY KEY,
    topic        text        NOT NULL,
    partition    integer     NOT NULL,
    kafka_offset bigint      NOT NULL,
    raw          bytea,
    error        text        NOT NULL,
    detail       text        NOT NULL,
    event_id     text,
    event_type   text,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rejected_events_position ON rejected_events (topic, partition, kafka_offset);
CREATE INDEX rejected_events_event_id ON rejected_events (event_id) WHERE event_id IS NOT NULL;

-- ---------------------------------------------------------------- projection
-- Written from the fold's results.  Every row carries the seq of the last
-- event that changed it; projection_meta.seq is the seq the whole projection
-- reflects (the last archived event).

CREATE TABLE projection_meta (
    singleton      boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    seq            bigint      NOT NULL,
    config         json,
    config_version integer     NOT NULL,
    leader_epoch   bigint      NOT NULL,
    session_parts  jsonb       NOT NULL,
    -- Task observations that arrived before the job they name (see projector.fold).
    early_observations jsonb   NOT NULL DEFAULT '{}',
    updated_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO projection_meta (seq, config, config_version, leader_epoch, session_parts)
VALUES (0, NULL, 0, 0, '{}');

CREATE TABLE queues (
    name text   PRIMARY KEY,
    seq  bigint NOT NULL,
    doc  jsonb  NOT NULL
);

CREATE TABLE priority_classes (
    name text   PRIMARY KEY,
    seq  bigint NOT NULL,
    doc  jsonb  NOT NULL
);

CREATE TABLE nodes (
    name          text    PRIMARY KEY,
    seq           bigint  NOT NULL,
    ready         boolean NOT NULL,
    unschedulable boolean NOT NULL,
    doc           jsonb   NOT NULL
);

-- spec is everything fixed at submission; phase and phase_reason change.
CREATE TABLE jobs (
    id           text        PRIMARY KEY,
    namespace    text        NOT NULL,
    name         text        NOT NULL,
    queue        text        NOT NULL,
    phase        text        NOT NULL,
    phase_reason text        NOT NULL,
    created      timestamptz NOT NULL,
    seq          bigint      NOT NULL,
    spec         jsonb       NOT NULL
);
CREATE INDEX jobs_queue_phase ON jobs (queue, phase);

-- Everything else about a task comes from its job's spec.
CREATE TABLE tasks (
    id     text    PRIMARY KEY,
    job_id text    NOT NULL,
    role   text    NOT NULL,
    idx    integer NOT NULL,
    status text    NOT NULL,
    node   text,
    seq    bigint  NOT NULL
);
CREATE INDEX tasks_job ON tasks (job_id);
CREATE INDEX tasks_node ON tasks (node) WHERE node IS NOT NULL;

-- Accepted decisions, append-only history (voided ones are in sessions.doc).
CREATE TABLE bindings (
    seq        bigint  NOT NULL,
    decision   integer NOT NULL,
    session_id text    NOT NULL,
    task_id    text    NOT NULL,
    job_id     text    NOT NULL,
    node       text    NOT NULL,
    PRIMARY KEY (seq, decision)
);
CREATE INDEX bindings_task ON bindings (task_id);

CREATE TABLE evictions (
    seq            bigint  NOT NULL,
    decision       integer NOT NULL,
    session_id     text    NOT NULL,
    task_id        text    NOT NULL,
    job_id         text    NOT NULL,
    node           text    NOT NULL,
    action         text    NOT NULL,
    preemptor_job  text    NOT NULL,
    preemptor_task text    NOT NULL,
    rule           text    NOT NULL,
    PRIMARY KEY (seq, decision)
);
CREATE INDEX evictions_task ON evictions (task_id);

-- Every applied session (the folded state keeps only the newest ones).
CREATE TABLE sessions (
    session_id     text        PRIMARY KEY,
    seq            bigint      NOT NULL UNIQUE,
    leader_epoch   bigint      NOT NULL,
    input_seq      bigint      NOT NULL,
    config_version integer     NOT NULL,
    now            timestamptz NOT NULL,
    accepted       integer     NOT NULL,
    voided         integer     NOT NULL,
    doc            jsonb       NOT NULL
);

-- The folded state (ClusterState.to_jsonable) at seq, every N events.
CREATE TABLE state_snapshots (
    seq        bigint      PRIMARY KEY,
    state      json        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
