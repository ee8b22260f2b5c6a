SELECT set_config('lock_timeout', %(wait)s, %(set_config#1)s) AS set_config#2, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config#3)s) AS set_config#4, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock#1, pg_notify('a2sql_events', %(sid)s) AS pg_notify#1;

SELECT a2_events.idx, a2_events.attempt_count
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx IN (%(indexes_1)s::BIGINT);
