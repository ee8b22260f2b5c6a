SELECT set_config('lock_timeout', %(wait)s, %(set_config_2)s) AS set_config_1, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config_4)s) AS set_config_3, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock_1;

DELETE FROM a2_snapshots WHERE a2_snapshots.session_id = %(sid)s::VARCHAR COLLATE "C";

DELETE FROM a2_events WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C";
