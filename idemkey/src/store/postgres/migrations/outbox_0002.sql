-- The index on (scope, resource_id, effect) cost every enqueue a third
-- index entry for lookups that know the message better by its id: an
-- application that looks its message up keeps the id enqueue returns. The
-- step messages of a flow are still found by their flow's id.
DROP INDEX IF EXISTS outbox_resource;
CREATE INDEX outbox_flow_step ON outbox (scope, resource_id) WHERE effect = 'flow-step';
