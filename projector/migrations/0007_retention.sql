-- Retention of finished jobs (projector.fold: a finished job leaves the state
-- ttl_seconds after it finished, in event time).

-- The fold's event-time clock: the latest envelope time folded so far, which is
-- what an existing projection's archive says it is.  Year 1 before any event.
ALTER TABLE projection_meta ADD COLUMN clock timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00';
UPDATE projection_meta
   SET clock = coalesce((SELECT max(time) FROM event_log WHERE seq <= projection_meta.seq), clock);

-- When the job finished (NULL while it has not); changes like phase.  Rows
-- written before this migration have none: their finished jobs stay until the
-- projection is rebuilt from the archive.
ALTER TABLE jobs ADD COLUMN finished_at timestamptz;

-- The TTL is fixed at submission: part of spec.  Jobs submitted before the
-- field existed have the archive's default (projector.fold.DEFAULT_TTL_SECONDS_AFTER_FINISHED).
UPDATE jobs SET spec = spec || '{"ttl_seconds": 3600}'::jsonb WHERE NOT spec ? 'ttl_seconds';

-- Snapshots of format 1 (no clock, no retention fields) cannot be read any
-- more; they are a cache of the archive's fold, so state_at folds from an
-- older snapshot or from the start instead.
DELETE FROM state_snapshots WHERE (state::jsonb ->> 'format') = '1';
