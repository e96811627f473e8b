-- Cheaper commits for the projector, third round (PostgreSQL CPU per archived
-- event; bench/projector_sql.py --events 100000, figures in docs/projector.md).
-- Nothing stored changes: how keys compare, and what one index holds.

-- Keys compare byte by byte.  Every text key here is an identifier (event ids,
-- types, job and task ids, session ids, node names), and under a server's
-- default collation (C.UTF-8 on the test machine, en_US.UTF-8 on many servers)
-- every index comparison went through strcoll, with a copy of both strings:
-- ~7 % of the backend's samples during the projector's commits, plus part of
-- _bt_compare's 6 % (perf).  "C" is also the order Python's sorted() gives,
-- which the scheduler's core uses, so an ORDER BY over these columns now
-- agrees with it on every server.  Each ALTER rebuilds the indexes on the
-- column (not the table).  A comparison with a column in the default collation
-- (another table's, an ad hoc query's) is made in "C", which wins over the
-- default; the projector's staging tables (projector.projection_rows) declare
-- it all the same, to say so.
ALTER TABLE event_log
    ALTER COLUMN event_id TYPE text COLLATE "C",
    ALTER COLUMN type TYPE text COLLATE "C",
    ALTER COLUMN job TYPE text COLLATE "C";
ALTER TABLE tasks
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN job_id TYPE text COLLATE "C";
ALTER TABLE transitional_tasks ALTER COLUMN id TYPE text COLLATE "C";
ALTER TABLE jobs
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN queue TYPE text COLLATE "C",
    ALTER COLUMN phase TYPE text COLLATE "C";
ALTER TABLE sessions ALTER COLUMN session_id TYPE text COLLATE "C";
ALTER TABLE nodes ALTER COLUMN name TYPE text COLLATE "C";

-- event_log_type_time (0001) took an entry for every event, and only ever
-- served lookups by type, all of them for sessions (replay/store.py: markers in
-- a seq range, a session or its parts by id, a job's history).  A partial index
-- of the session types' seqs serves those (the queries name the types as
-- literals, which a partial index needs) and is written for about a quarter of
-- the events, with an integer key: the event_log COPY ~11.5 -> ~8.5 us/event.
DROP INDEX IF EXISTS event_log_type_time;
CREATE INDEX IF NOT EXISTS event_log_sessions ON event_log (seq)
    WHERE type IN ('tephra.session.committed.v1', 'tephra.session.part.v1');
