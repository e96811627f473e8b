-- Retention of finished jobs (projector.fold: a finished job leaves the state
-- ttl_seconds after it finished, in event time).

-- The fold's event-time clock: the latest envelope time folded so far, which is
-- what an existing projection's archive says it is.  Year 1 before any event.
ALTER TABLE projection_meta ADD COLUMN clock timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00';
UPDATE projection_meta
   SET clock = coalesce((SELECT max(time) FROM event_log WHERE seq <= projection_meta.seq), clock);

-- When the job finished (NULL while it has not); changes like phase.  For the
-- jobs already finished (terminal, no task but Succeeded or Failed left): the
-- clock at the job's last archived event, which is the event that finished it
-- unless a node removal did (then the fold's value is later) or a moot
-- observation came after (then earlier).
ALTER TABLE jobs ADD COLUMN finished_at timestamptz;
UPDATE jobs
   SET finished_at = clocks.clock
  FROM (SELECT job, max(seq) AS seq FROM event_log WHERE job IS NOT NULL GROUP BY job) AS last,
       (SELECT seq, max(time) OVER (ORDER BY seq) AS clock FROM event_log) AS clocks
 WHERE last.job = jobs.id AND clocks.seq = last.seq
   AND jobs.phase IN ('Completed', 'Failed', 'Cancelled')
   AND NOT EXISTS (SELECT FROM tasks WHERE tasks.job_id = jobs.id
                    AND tasks.status NOT IN ('Succeeded', 'Failed'));

-- The TTL is fixed at submission: part of spec.  Jobs submitted before the
-- field existed have the archive's default (projector.fold.DEFAULT_TTL_SECONDS_AFTER_FINISHED).
UPDATE jobs SET spec = spec || '{"ttl_seconds": 3600}'::jsonb WHERE NOT spec ? 'ttl_seconds';

-- Snapshots of format 1 (no clock, no retention fields) cannot be read any
-- more; they are a cache of the archive's fold, so state_at folds from an
-- older snapshot or from the start instead.
DELETE FROM state_snapshots WHERE (state::jsonb ->> 'format') = '1';
