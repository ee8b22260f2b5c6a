SELECT set_config('lock_timeout', %(wait)s, %(set_config_2)s) AS set_config_1, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config_4)s) AS set_config_3, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock_1, pg_notify('a2sql_events', %(sid)s) AS pg_notify_1;

UPDATE a2_events SET lane_ready=false, processed_at=%(now)s::TIMESTAMP WITH TIME ZONE, processed_by_attempt=%(attempt)s::BIGINT, returned_event_ids=%(returned)s::VARCHAR, claim_holder=NULL, claim_expires_at=NULL WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx = %(index)s::BIGINT AND a2_events.attempt_count = %(attempt)s::BIGINT AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_holder IS NOT NULL RETURNING a2_events.lane, (SELECT last_event.idx
FROM a2_events AS last_event
WHERE last_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY last_event.session_id DESC, last_event.idx DESC
 LIMIT 1) AS anon_1;

INSERT INTO a2_events (session_id, idx, event_type, payload, event_id, created_at, cause, lane, lane_ready, processed_at) VALUES (%(session_id)s::VARCHAR COLLATE "C", %(idx)s::BIGINT, %(event_type)s::VARCHAR COLLATE "C", CAST(%(payload)s AS JSON), %(event_id)s::VARCHAR COLLATE "C", %(created_at)s::TIMESTAMP WITH TIME ZONE, %(cause)s::VARCHAR, %(lane)s::VARCHAR COLLATE "C", %(lane_ready)s, %(processed_at)s::TIMESTAMP WITH TIME ZONE);
