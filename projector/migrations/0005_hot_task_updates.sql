-- Cheaper commits for the projector, second round (PostgreSQL CPU per archived
-- event; bench/projector_sql.py --events 100000, figures in docs/projector.md).
-- Nothing stored changes but the type of sessions.doc; the rest is what indexes
-- hold and where the simulated cluster finds its work.

-- Indexes no query reads (api/, kube/, replay/, scheduler/, projector/), each an
-- index insert per row: event_log_subject one per event (replay finds a job's
-- events through event_log.job, 0004); bindings_task one per binding, ~1.3
-- us/event; tasks_node one per task update that sets a node (the node views
-- aggregate over every task with a node, a sequential scan by the planner's
-- choice).  Ad hoc queries by these columns still work, as scans.
DROP INDEX IF EXISTS event_log_subject;
DROP INDEX IF EXISTS bindings_task;
DROP INDEX IF EXISTS tasks_node;

-- The tasks upsert was ~11-13 us/event: every update changes status, and
-- tasks_sim_work (0002) has status in its predicate, so no update was HOT and
-- each one wrote a new entry into every index of tasks.  The tasks the
-- simulated cluster polls for (kube/sim_service.py, SIM_WORK_QUERY: Bound to
-- start, Releasing to stop) are now rows of their own table, which the
-- projector keeps in the same statement as the upsert
-- (projector.projection._UPSERT_TASKS); no index of tasks covers a column a
-- task update changes.  With room left on each page for the new versions
-- (fillfactor; it applies to pages filled from now on), 52k of 60k updates in
-- the bench are HOT (1.6k before): upsert plus this table ~7.5 us/event.
CREATE TABLE IF NOT EXISTS transitional_tasks (
    id text PRIMARY KEY
);
INSERT INTO transitional_tasks (id)
SELECT id FROM tasks WHERE status IN ('Bound', 'Releasing')
    ON CONFLICT (id) DO NOTHING;
DROP INDEX IF EXISTS tasks_sim_work;
ALTER TABLE tasks SET (fillfactor = 80);

-- sessions.doc is read whole (projector.projection.load_projection, api/views.py)
-- or for its pending list (api/views.py, api/demo.py), never searched through an
-- index: json is stored as written and only validated, where jsonb is parsed into
-- its binary form on every insert (the sessions' staging COPY 3.6 -> 1.7 us/event).
-- Rewrites the table once.
ALTER TABLE sessions ALTER COLUMN doc TYPE json USING doc::json;
