-- The newest session's pending list, one row per job (projector.newest_pending).
-- It was kept in that session's sessions.doc, which the projector wrote whole at
-- every session: 24.4 MiB of JSON at 92k pending jobs, stored by PostgreSQL each
-- time although a backlog keeps most entries from one session to the next.  The
-- projector now writes only the entries that changed and the jobs that left the
-- list; the session's row marks, with "pending_rows": true, that its list is here.
-- Readers (api/views.py, api/demo.py, kube/bridge/status.py) look a job up by id.
CREATE TABLE newest_pending (
    job   text COLLATE "C" PRIMARY KEY,
    entry json NOT NULL
);

-- The list the newest row holds now, so readers find it before the projector
-- writes its next session (which rewrites the table whole after a restart).
INSERT INTO newest_pending (job, entry)
SELECT DISTINCT ON (p.value ->> 'job') p.value ->> 'job', p.value
  FROM (SELECT doc FROM sessions ORDER BY seq DESC LIMIT 1) AS s,
       json_array_elements(CASE WHEN json_typeof(s.doc -> 'pending') = 'array'
                                THEN s.doc -> 'pending' ELSE '[]'::json END) AS p(value)
 WHERE p.value ->> 'job' IS NOT NULL
 ORDER BY p.value ->> 'job';
