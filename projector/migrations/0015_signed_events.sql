-- Who produced each archived event, and their signature (docs/archive-format.md).
-- principal is a member of the canonical bytes (the hash covers it); signature is the
-- principal's Ed25519 signature of those bytes.  NULL for unsigned events (development's
-- unsigned intents, and every event archived before signing existed).
ALTER TABLE event_log
    ADD COLUMN principal text,
    ADD COLUMN signature text;

-- The current leadership's public key (LeaderElected), beside its epoch; '' before the first.
ALTER TABLE projection_meta ADD COLUMN leader_key text NOT NULL DEFAULT '';
