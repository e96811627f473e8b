-- A job name is reused once its job finished (projector.fold): the live incarnation keeps
-- the row <namespace>/<name>, an earlier one still within its retention window the row
-- <namespace>/<name>#<submitted_seq>, with the same namespace and name columns.  Describing a
-- job lists its earlier incarnations by (namespace, name).
CREATE INDEX jobs_namespace_name ON jobs (namespace, name);

-- Jobs carry their incarnation (submitted_seq, the seq of their JobSubmitted) in the state and
-- the rows' spec, and the fold judges late sessions and observations by it: a projection written
-- before it (every job at 0) is rebuilt from the archive with the fold before the projector takes
-- events (as after 0007 and 0009), and the snapshots, a cache written without it, are dropped
-- (state_at folds from the start until new ones are stored).
UPDATE projection_meta SET rebuild = true WHERE seq > 0;
DELETE FROM state_snapshots;
