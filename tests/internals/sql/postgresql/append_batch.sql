SELECT set_config('lock_timeout', %(wait)s, %(set_config#1)s) AS set_config#2, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config#3)s) AS set_config#4, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock#1, pg_notify('a2sql_events', %(sid)s) AS pg_notify#1;

SELECT coalesce((SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY a2_events.session_id DESC, a2_events.idx DESC
 LIMIT 1), %(coalesce#1)s::INTEGER) AS coalesce#2, (SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.processed_at IS NULL ORDER BY a2_events.session_id, a2_events.idx
 LIMIT 1) IS NOT NULL AS anon#1, coalesce((SELECT a2_retired_attempts.last_attempt
FROM a2_retired_attempts
WHERE a2_retired_attempts.session_id = %(sid)s::VARCHAR COLLATE "C"), %(coalesce#3)s::INTEGER) AS coalesce#4, greatest(%(now)s::TIMESTAMP WITH TIME ZONE, (SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1)) AT TIME ZONE 'UTC' AS anon#2, EXISTS (SELECT *
FROM a2_events
WHERE a2_events.event_id IN (%(ids_1)s::VARCHAR COLLATE "C", %(ids_2)s::VARCHAR COLLATE "C")) AS anon#3;

SELECT DISTINCT a2_events.lane
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.lane IN (%(lanes_1)s::VARCHAR COLLATE "C") AND a2_events.processed_at IS NULL;

INSERT INTO a2_events (session_id, idx, event_type, payload, event_id, created_at, cause, lane, lane_ready, processed_at, attempt_count) VALUES (%(session_id)s::VARCHAR COLLATE "C", %(idx)s::BIGINT, %(event_type)s::VARCHAR COLLATE "C", CAST(%(payload)s AS JSON), %(event_id)s::VARCHAR COLLATE "C", %(created_at)s::TIMESTAMP WITH TIME ZONE, %(cause)s::VARCHAR, %(lane)s::VARCHAR COLLATE "C", %(lane_ready)s, %(processed_at)s::TIMESTAMP WITH TIME ZONE, %(attempt_count)s::BIGINT);
