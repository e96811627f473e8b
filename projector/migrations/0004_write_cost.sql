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

