-- HyperNodes (HyperNodeUpserted / HyperNodeDeleted): the network topology tree, one
-- document per hyperNode (the event's data), as queues and priority classes are kept.
-- Empty until the first HyperNodeUpserted: archives from before the event replay as they did.
CREATE TABLE hypernodes (
    name text   PRIMARY KEY,
    seq  bigint NOT NULL,
    doc  jsonb  NOT NULL
);
