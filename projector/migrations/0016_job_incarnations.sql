-- A job name is reused once its job finished (projector.fold): the live incarnation keeps
-- the row <namespace>/<name>, an earlier one still within its retention window the row
-- <namespace>/<name>#<submitted_seq>, with the same namespace and name columns.  Describing a
-- job lists its earlier incarnations by (namespace, name).
CREATE INDEX jobs_namespace_name ON jobs (namespace, name);
