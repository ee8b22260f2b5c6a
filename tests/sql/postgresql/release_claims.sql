SELECT set_config('lock_timeout', %(wait)s, %(set_config_2)s) AS set_config_1, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config_4)s) AS set_config_3, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock_1, pg_notify('a2sql_events', %(sid)s) AS pg_notify_1;

SELECT a2_events.idx, a2_events.attempt_count
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx IN (%(indexes_1)s::BIGINT);
