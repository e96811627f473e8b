-- Cheaper commits for the projector (PostgreSQL CPU per archived event).
-- Nothing stored changes: only how values are compressed, and what indexes hold.

-- The state snapshot (~6.5 MB of JSON at 60k events) is compressed on insert:
-- pglz took ~110 ms a snapshot on PostgreSQL 15, lz4 ~45 ms (most of which is
-- the json input check).  lz4 only exists in servers built --with-lz4 (the
-- embedded test server is not): there the columns keep the default.  Only new
-- values are affected; existing rows stay readable either way.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings
                WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE state_snapshots ALTER COLUMN state SET COMPRESSION lz4;
        ALTER TABLE event_log ALTER COLUMN data SET COMPRESSION lz4;
    END IF;
END
$$;

-- `replay explain` finds a job's own events by the job they name (replay/store.py,
-- _JOB_HISTORY).  The expression indexes of 0003 parsed the json of every such row
-- on insert, ~3.5 us of the ~14.5 us/event COPY into event_log cost.  The projector now
-- writes the job id alongside (null for the other types), and one plain partial
-- index replaces both.  The column is derived from data, which the hash covers,
-- and projector.reconstruct.verify_chain reports a row where the two disagree.
ALTER TABLE event_log ADD COLUMN job text;
UPDATE event_log
   SET job = CASE type WHEN 'tephra.job.submitted.v1' THEN (data ->> 'namespace') || '/' || (data ->> 'name')
                       ELSE data ->> 'job_id' END
 WHERE type IN ('tephra.job.submitted.v1', 'tephra.job.cancelled.v1', 'tephra.job.rejected.v1',
                'tephra.task.started.v1', 'tephra.task.finished.v1');
CREATE INDEX event_log_job ON event_log (job) WHERE job IS NOT NULL;
DROP INDEX event_log_job_submitted;
DROP INDEX event_log_job_events;
-- Without statistics on the new column the planner guessed it unselective and
-- combined its index with event_log_type_time (every row of those types).  Only
-- an archive with rows: statistics of an empty table say "empty" (reltuples 0,
-- where never-analysed is -1), and the generic plan of the projector's duplicate
-- check, made in its first seconds, then stayed a sequential scan for the whole
-- run (100k events: seconds per query, 1k events/s).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM event_log) THEN
        ANALYZE event_log (job);
    END IF;
END
$$;
