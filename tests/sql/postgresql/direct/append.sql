SELECT set_config('a2sql.granted', CAST(pg_try_advisory_xact_lock(24882, hashtext(%(sid)s)) AS TEXT), %(set_config_2)s) AS set_config_1, set_config('lock_timeout', %(wait)s, %(set_config_4)s) AS set_config_3, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config_6)s) AS set_config_5;

INSERT INTO a2_events (attempt_count, session_id, idx, event_type, payload, event_id, created_at, cause, lane, lane_ready, processed_at) SELECT coalesce((SELECT a2_retired_attempts.last_attempt
FROM a2_retired_attempts
WHERE a2_retired_attempts.session_id = %(sid)s::VARCHAR COLLATE "C"), %(coalesce_2)s::INTEGER) AS coalesce_1, %(sid)s::VARCHAR COLLATE "C" AS anon_2, coalesce((SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY a2_events.session_id DESC, a2_events.idx DESC
 LIMIT 1), %(coalesce_3)s::INTEGER) + 1 AS anon_3, %(new_type)s::VARCHAR COLLATE "C" AS anon_4, CAST(%(new_payload)s::VARCHAR AS JSON) AS anon_5, %(new_id)s::VARCHAR COLLATE "C" AS anon_6, %(now)s::TIMESTAMP WITH TIME ZONE AS anon_7, NULL AS anon_8, NULL AS anon__1, true AS anon_9, CASE WHEN %(new_settled)s THEN %(now)s::TIMESTAMP WITH TIME ZONE ELSE NULL END AS anon_10
WHERE NOT (EXISTS (SELECT *
FROM a2_events
WHERE a2_events.event_id = %(new_id)s::VARCHAR COLLATE "C")) AND current_setting('a2sql.granted', true) = 'true' AND coalesce((SELECT latest.created_at
FROM a2_events AS latest
WHERE latest.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest.session_id DESC, latest.idx DESC
 LIMIT 1), %(now)s::TIMESTAMP WITH TIME ZONE) <= %(now)s::TIMESTAMP WITH TIME ZONE RETURNING a2_events.idx, (SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.processed_at IS NULL ORDER BY a2_events.session_id, a2_events.idx
 LIMIT 1) IS NOT NULL AS anon_1, a2_events.attempt_count;

SELECT pg_notify('a2sql_events', %(sid)s) AS pg_notify_1;
