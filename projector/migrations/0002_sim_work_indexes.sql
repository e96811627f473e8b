-- The simulated cluster polls for tasks with something to do (kube/sim_service.py,
-- SIM_WORK_QUERY) every 0.1 s.  Without these indexes each poll reads the whole
-- tasks and jobs tables, although on a busy cluster almost every task is Running
-- with nothing due.  Both are partial: they hold only the rows the poll wants.

-- Tasks to start (Bound) or to stop (Releasing): few at any time.
CREATE INDEX tasks_sim_work ON tasks (id) WHERE status IN ('Bound', 'Releasing');

-- Jobs whose Running tasks finish after a simulated runtime.
CREATE INDEX jobs_sim_runtime ON jobs (id) WHERE spec -> 'annotations' ? 'tephra.dev/sim-runtime';
