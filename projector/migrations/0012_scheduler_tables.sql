-- The scheduler's own tables, created here rather than by the scheduler at the
-- start of each leadership term: the scheduler's role may not create tables
-- (projector.roles).  IF NOT EXISTS: a database where an earlier scheduler
-- created them keeps them and their rows.

-- One row per leadership term (scheduler.service.leader).
CREATE TABLE IF NOT EXISTS scheduler_leaders (
    cluster     text        NOT NULL,
    epoch       bigint      NOT NULL CHECK (epoch > 0),
    holder      text        NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, epoch)
);

-- What the SessionCommitted event does not carry: durations, counts
-- (scheduler.service.records).
CREATE TABLE IF NOT EXISTS scheduler_session_timings (
    session_id      text             PRIMARY KEY,
    cluster         text             NOT NULL,
    leader_epoch    bigint           NOT NULL,
    input_seq       bigint           NOT NULL,
    applied_seq     bigint           NOT NULL,
    decisions       integer          NOT NULL,
    accepted        integer          NOT NULL,
    pending_jobs    integer          NOT NULL,
    pending_digest  text             NOT NULL,
    read_seconds    double precision NOT NULL,
    compute_seconds double precision NOT NULL,
    publish_seconds double precision NOT NULL,
    apply_seconds   double precision NOT NULL,
    recorded_at     timestamptz      NOT NULL DEFAULT now()
);
ALTER TABLE scheduler_session_timings
    ADD COLUMN IF NOT EXISTS collect_seconds double precision NOT NULL DEFAULT 0;
