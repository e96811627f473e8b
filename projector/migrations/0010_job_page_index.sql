-- A page of jobs filtered by queue and phase (GET /v1/jobs?queue=&phase=, the console's
-- job list) is read in id order.  With (queue, phase) alone PostgreSQL walked the primary
-- key in id order and skipped every job of another phase: with 40k of 50k jobs Inqueue
-- ahead of the Pending ones, 12-25 ms a page.  With id last, this index hands the
-- matching jobs over in id order and the page stops at its limit (under 1 ms).  It serves
-- every (queue) and (queue, phase) lookup the old one did.
CREATE INDEX jobs_queue_phase_id ON jobs (queue, phase, id);
DROP INDEX jobs_queue_phase;
