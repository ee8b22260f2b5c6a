SELECT set_config('a2sql.granted', CAST(pg_try_advisory_xact_lock(24882, hashtext(%(sid)s)) AS TEXT), %(set_config#1)s) AS set_config#2, set_config('lock_timeout', %(wait)s, %(set_config#3)s) AS set_config#4, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config#5)s) AS set_config#6;

WITH done AS
(UPDATE a2_events SET lane_ready=false, processed_at=%(now)s::TIMESTAMP WITH TIME ZONE, processed_by_attempt=%(attempt)s::BIGINT, returned_event_ids=%(returned)s::VARCHAR, claim_holder=NULL, claim_expires_at=NULL WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx = %(index)s::BIGINT AND a2_events.attempt_count = %(attempt)s::BIGINT AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_holder IS NOT NULL AND current_setting('a2sql.granted', true) = 'true' AND a2_events.last_claimed_at <= %(now)s::TIMESTAMP WITH TIME ZONE AND coalesce((SELECT latest.created_at
FROM a2_events AS latest
WHERE latest.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest.session_id DESC, latest.idx DESC
 LIMIT 1), %(now)s::TIMESTAMP WITH TIME ZONE) <= %(now)s::TIMESTAMP WITH TIME ZONE RETURNING a2_events.lane, (SELECT last_event.idx
FROM a2_events AS last_event
WHERE last_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY last_event.session_id DESC, last_event.idx DESC
 LIMIT 1) AS last_index, coalesce((SELECT a2_retired_attempts.last_attempt
FROM a2_retired_attempts
WHERE a2_retired_attempts.session_id = %(sid)s::VARCHAR COLLATE "C"), %(coalesce#1)s::INTEGER) AS retired_attempts),
promoted AS
(UPDATE a2_events SET lane_ready=true WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx = (SELECT lane_event.idx
FROM a2_events AS lane_event, done
WHERE lane_event.session_id = %(sid)s::VARCHAR COLLATE "C" AND lane_event.lane = done.lane AND lane_event.processed_at IS NULL AND lane_event.idx != %(index)s::BIGINT ORDER BY lane_event.session_id, lane_event.lane, lane_event.idx
 LIMIT 1)),
returned AS
(INSERT INTO a2_events (attempt_count, session_id, idx, event_type, payload, event_id, created_at, cause, lane, lane_ready, processed_at) SELECT done.retired_attempts AS retired_attempts, %(sid)s::VARCHAR COLLATE "C" AS anon#1, done.last_index + 1 AS anon#2, %(new_type)s::VARCHAR COLLATE "C" AS anon#3, CAST(%(new_payload)s::VARCHAR AS JSON) AS anon#4, %(new_id)s::VARCHAR COLLATE "C" AS anon#5, %(now)s::TIMESTAMP WITH TIME ZONE AS anon#6, %(caused_by)s::VARCHAR AS anon#7, NULL AS anon#8, true AS anon#9, CASE WHEN %(new_settled)s THEN %(now)s::TIMESTAMP WITH TIME ZONE ELSE NULL END AS anon#10
FROM done)
 SELECT done.last_index, done.retired_attempts
FROM done;

SELECT pg_notify('a2sql_events', %(sid)s) AS pg_notify#1;
