-- queue_core on PostgreSQL, migration 11: the clock of a statement, written once.
-- A statement is given the store's time (now, and a new lease's end), or NULL
-- to read the server's: statement_timestamp(), one reading for the whole
-- statement. now is that time rounded down; a new lease ends at that time
-- rounded up plus its length, so that it lasts at least that long (the rule
-- of queue_core's lifecycle.lease_deadline, for the store's own clock).
-- Plain SQL functions: the planner inlines them into the statement.

CREATE FUNCTION queue_core_now(given BIGINT) RETURNS BIGINT
LANGUAGE SQL STABLE PARALLEL SAFE
AS $$ SELECT coalesce(given, CAST(floor(extract(epoch FROM statement_timestamp())) AS BIGINT)) $$;

CREATE FUNCTION queue_core_deadline(given BIGINT, lease_seconds BIGINT) RETURNS BIGINT
LANGUAGE SQL STABLE PARALLEL SAFE
AS $$ SELECT coalesce(given, CAST(ceil(extract(epoch FROM statement_timestamp())) AS BIGINT) + lease_seconds) $$;
