-- Retention of finished jobs (projector.fold: a finished job leaves the state
-- ttl_seconds after it finished, in event time).

-- The fold's event-time clock: the latest envelope time folded so far.  Year 1
-- before any event.
ALTER TABLE projection_meta ADD COLUMN clock timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00';

-- When the job finished (NULL while it has not); changes like phase.
ALTER TABLE jobs ADD COLUMN finished_at timestamptz;

-- A projection written before retention is not what the fold now derives from
-- its archive: finished_at, and which jobs have retired, depend on the fold's
-- state at every event (a job may finish at a NodeRemoved that names no job),
-- so SQL cannot derive them exactly.  The projection is marked instead, and the
-- projector rebuilds it from the archive with the fold before it takes events
-- (projector.reconstruct.rebuild_projection); until then nobody loads it.
ALTER TABLE projection_meta ADD COLUMN rebuild boolean NOT NULL DEFAULT false;
UPDATE projection_meta SET rebuild = true WHERE seq > 0;

-- Snapshots of format 1 (no clock, no retention fields) cannot be read any
-- more; they are a cache of the archive's fold, so state_at folds from an
-- older snapshot or from the start instead.
DELETE FROM state_snapshots WHERE (state::jsonb ->> 'format') = '1';
