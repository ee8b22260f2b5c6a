SELECT set_config('lock_timeout', %(wait)s, %(set_config#1)s) AS set_config#2, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config#3)s) AS set_config#4, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock#1;

INSERT INTO a2_events (attempt_count, session_id, idx, event_type, payload, event_id, created_at, cause, lane, lane_ready, processed_at) SELECT coalesce((SELECT a2_retired_attempts.last_attempt
FROM a2_retired_attempts
WHERE a2_retired_attempts.session_id = %(sid)s::VARCHAR COLLATE "C"), %(coalesce#1)s::INTEGER) AS coalesce#2, %(sid)s::VARCHAR COLLATE "C" AS anon#1, coalesce((SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY a2_events.session_id DESC, a2_events.idx DESC
 LIMIT 1), %(coalesce#3)s::INTEGER) + 1 AS anon#2, %(new_type)s::VARCHAR COLLATE "C" AS anon#3, CAST(%(new_payload)s::VARCHAR AS JSON) AS anon#4, %(new_id)s::VARCHAR COLLATE "C" AS anon#5, greatest(%(now)s::TIMESTAMP WITH TIME ZONE, (SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1)) AS anon#6, NULL AS anon#7, NULL AS anon_#1, true AS anon#8, CASE WHEN %(new_settled)s THEN greatest(%(now)s::TIMESTAMP WITH TIME ZONE, (SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1)) ELSE NULL END AS anon#9
WHERE NOT (EXISTS (SELECT *
FROM a2_events
WHERE a2_events.event_id = %(new_id)s::VARCHAR COLLATE "C")) RETURNING a2_events.idx, (SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.processed_at IS NULL ORDER BY a2_events.session_id, a2_events.idx
 LIMIT 1) IS NOT NULL AS anon#10, a2_events.attempt_count, a2_events.created_at AT TIME ZONE 'UTC' AS created_at;

SELECT pg_notify('a2sql_events', %(sid)s) AS pg_notify#1;
