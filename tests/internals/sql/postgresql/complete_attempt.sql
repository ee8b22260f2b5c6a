SELECT set_config('lock_timeout', %(wait)s, %(set_config#1)s) AS set_config#2, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config#3)s) AS set_config#4, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock#1, pg_notify('a2sql_events', %(sid)s) AS pg_notify#1;

WITH done AS
(UPDATE a2_events SET lane_ready=false, processed_at=greatest(%(now)s::TIMESTAMP WITH TIME ZONE, (SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1), a2_events.last_claimed_at), processed_by_attempt=%(attempt)s::BIGINT, returned_event_ids=%(returned)s::VARCHAR, claim_holder=NULL, claim_expires_at=NULL WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx = %(index)s::BIGINT AND a2_events.attempt_count = %(attempt)s::BIGINT AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_holder IS NOT NULL RETURNING a2_events.lane, (SELECT last_event.idx
FROM a2_events AS last_event
WHERE last_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY last_event.session_id DESC, last_event.idx DESC
 LIMIT 1) AS last_index, coalesce((SELECT a2_retired_attempts.last_attempt
FROM a2_retired_attempts
WHERE a2_retired_attempts.session_id = %(sid)s::VARCHAR COLLATE "C"), %(coalesce#1)s::INTEGER) AS retired_attempts, a2_events.processed_at AS now),
promoted AS
(UPDATE a2_events SET lane_ready=true WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx = (SELECT lane_event.idx
FROM a2_events AS lane_event, done
WHERE lane_event.session_id = %(sid)s::VARCHAR COLLATE "C" AND lane_event.lane = done.lane AND lane_event.processed_at IS NULL AND lane_event.idx != %(index)s::BIGINT ORDER BY lane_event.session_id, lane_event.lane, lane_event.idx
 LIMIT 1)),
returned AS
(INSERT INTO a2_events (attempt_count, session_id, idx, event_type, payload, event_id, created_at, cause, lane, lane_ready, processed_at) SELECT done.retired_attempts AS retired_attempts, %(sid)s::VARCHAR COLLATE "C" AS anon#1, done.last_index + 1 AS anon#2, %(new_type)s::VARCHAR COLLATE "C" AS anon#3, CAST(%(new_payload)s::VARCHAR AS JSON) AS anon#4, %(new_id)s::VARCHAR COLLATE "C" AS anon#5, done.now AS now, %(caused_by)s::VARCHAR AS anon#6, NULL AS anon#7, true AS anon#8, CASE WHEN %(new_settled)s THEN done.now ELSE NULL END AS anon#9
FROM done)
 SELECT done.last_index, done.retired_attempts, done.now AT TIME ZONE 'UTC' AS now
FROM done;
