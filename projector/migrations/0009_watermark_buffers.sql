-- Retention by a watermark, bounded buffers stored row by row (projector.fold).

-- The latest envelope time folded per topic role; NULL for a role that has
-- sent nothing.  The fold retires jobs and expires buffers by the watermark of
-- these and projection_meta.clock.
ALTER TABLE projection_meta
    ADD COLUMN intents_clock timestamptz,
    ADD COLUMN observations_clock timestamptz,
    ADD COLUMN decisions_clock timestamptz;

-- The buffers were two jsonb documents rewritten whole at every batch, so a
-- batch cost as much as everything buffered.  Now one row per buffered entry,
-- written only when a batch changes that entry.
ALTER TABLE projection_meta DROP COLUMN session_parts, DROP COLUMN early_observations;

-- Observations of a job not in the state (by job id, as the fold buffers them),
-- since the fold's clock when the first arrived; events: the event documents.
CREATE TABLE early_observations (
    job_id text        COLLATE "C" PRIMARY KEY,
    since  timestamptz NOT NULL,
    seq    bigint      NOT NULL,
    events jsonb       NOT NULL
);

-- Parts of a session whose SessionCommitted has not arrived; items: the part's
-- decisions, then its pending jobs (projector.state_json.part_to_json).
CREATE TABLE session_parts (
    session_id text        COLLATE "C",
    idx        integer,
    since      timestamptz NOT NULL,
    seq        bigint      NOT NULL,
    items      jsonb       NOT NULL,
    PRIMARY KEY (session_id, idx)
);

-- Buffered entries the watermark expired (their events stay archived; they
-- will never apply): the operator's record, with the seq of the event whose
-- time expired them.
CREATE TABLE expired_buffers (
    id          bigserial   PRIMARY KEY,
    seq         bigint      NOT NULL,
    code        text        NOT NULL,
    key         text        NOT NULL,
    since       timestamptz NOT NULL,
    event_ids   text[]      NOT NULL,
    detail      text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX expired_buffers_seq ON expired_buffers (seq);

-- Which jobs have retired, and what is buffered, now depend on the watermark:
-- the projection is rebuilt from the archive with the fold before the projector
-- takes events (as after 0007), and snapshots without role clocks (format 2)
-- are dropped (state_at folds from an older one or from the start).
UPDATE projection_meta SET rebuild = true WHERE seq > 0;
DELETE FROM state_snapshots WHERE (state::jsonb ->> 'format') = '2';
