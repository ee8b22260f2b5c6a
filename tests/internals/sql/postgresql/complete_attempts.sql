SELECT set_config('lock_timeout', %(wait)s, %(set_config#1)s) AS set_config#2, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config#3)s) AS set_config#4, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock#1, pg_notify('a2sql_events', %(sid)s) AS pg_notify#1;

UPDATE a2_events SET lane_ready=false, processed_at=greatest(%(now)s::TIMESTAMP WITH TIME ZONE, (SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1), a2_events.last_claimed_at), processed_by_attempt=%(attempt)s::BIGINT, returned_event_ids=%(returned)s::VARCHAR, claim_holder=NULL, claim_expires_at=NULL WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx = %(index)s::BIGINT AND a2_events.attempt_count = %(attempt)s::BIGINT AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_holder IS NOT NULL RETURNING a2_events.lane, (SELECT last_event.idx
FROM a2_events AS last_event
WHERE last_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY last_event.session_id DESC, last_event.idx DESC
 LIMIT 1) AS last_index, coalesce((SELECT a2_retired_attempts.last_attempt
FROM a2_retired_attempts
WHERE a2_retired_attempts.session_id = %(sid)s::VARCHAR COLLATE "C"), %(coalesce#1)s::INTEGER) AS retired_attempts, a2_events.processed_at AT TIME ZONE 'UTC' AS now;

UPDATE a2_events SET lane_ready=true WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx = (SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.lane = %(lane_name)s::VARCHAR COLLATE "C" AND a2_events.processed_at IS NULL ORDER BY a2_events.session_id, a2_events.lane, a2_events.idx
 LIMIT 1);
