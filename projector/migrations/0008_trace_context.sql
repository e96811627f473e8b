-- The W3C trace context each event arrived with (the producer's `traceparent`
-- record header), so replay and the services find a job's trace without
-- re-reading Kafka.  Metadata beside the event, like topic and offset: the
-- hash chain does not cover it (docs/archive-format.md), and rows archived
-- before this column existed, or sent without trace context, hold NULL.
ALTER TABLE event_log ADD COLUMN traceparent text;
