-- Snapshots stored in pieces (projector.state_json.state_to_stored): one
-- document of the whole state cost, at every snapshot, its JSON value, its
-- text and the driver's copy of that text at once (~70 MiB of peak RSS on a
-- 10k-job state).  state_snapshots.state keeps the head (format 4: clocks,
-- config, queues, priority classes); the items of the sections that grow with
-- the state (nodes, jobs, tasks, sessions, buffers) are rows here, in chunks of
-- about 64 KiB of JSON text, written and read one chunk at a time.
CREATE TABLE state_snapshot_chunks (
    seq     bigint  REFERENCES state_snapshots (seq) ON DELETE CASCADE,
    idx     integer,
    section text    COLLATE "C" NOT NULL,
    items   json    NOT NULL,
    PRIMARY KEY (seq, idx)
);

-- As the snapshots' documents were (0004): lz4 where the server has it.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings
                WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE state_snapshot_chunks ALTER COLUMN items SET COMPRESSION lz4;
    END IF;
END
$$;

-- Snapshots are a cache (state_at folds from an older one, or from the start):
-- those in one document (format 3) are dropped rather than read in two forms.
DELETE FROM state_snapshots WHERE (state::jsonb ->> 'format') = '3';
