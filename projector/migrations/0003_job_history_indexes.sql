-- `replay explain` reads a job's history (replay/store.py, _JOB_HISTORY): its
-- submission and its tasks' events.  Without these indexes the query parses the
-- data of every submission and every task event in the archive (0.32 s of an
-- explain at 1M events).  Partial, keyed by what the query compares.

CREATE INDEX event_log_job_submitted ON event_log ((data ->> 'namespace'), (data ->> 'name'))
    WHERE type = 'tephra.job.submitted.v1';

CREATE INDEX event_log_job_events ON event_log ((data ->> 'job_id'))
    WHERE type IN ('tephra.job.cancelled.v1', 'tephra.job.rejected.v1',
                   'tephra.task.started.v1', 'tephra.task.finished.v1');
