SELECT set_config('lock_timeout', %(wait)s, %(set_config#1)s) AS set_config#2, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config#3)s) AS set_config#4, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock#1;

DELETE FROM a2_snapshots WHERE a2_snapshots.session_id = %(sid)s::VARCHAR COLLATE "C";

INSERT INTO a2_retired_attempts (session_id, last_attempt) SELECT a2_events.session_id, max(a2_events.attempt_count) AS max#1
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.attempt_count > 0 GROUP BY a2_events.session_id ON CONFLICT (session_id) DO UPDATE SET last_attempt = excluded.last_attempt WHERE excluded.last_attempt > a2_retired_attempts.last_attempt;

DELETE FROM a2_events WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C";
