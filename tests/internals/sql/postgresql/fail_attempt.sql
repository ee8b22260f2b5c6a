SELECT set_config('lock_timeout', %(wait)s, %(set_config#1)s) AS set_config#2, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config#3)s) AS set_config#4, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock#1;

UPDATE a2_events SET failure_count=(a2_events.failure_count + %(failure_count#1)s::BIGINT), last_failed_at=greatest(%(now)s::TIMESTAMP WITH TIME ZONE, (SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1), a2_events.last_claimed_at), last_failed_attempt=%(attempt)s::BIGINT, last_error=%(error)s::VARCHAR, failed_at=CASE WHEN (%(max_failures)s <= a2_events.failure_count + %(failure_count#1)s::BIGINT) THEN greatest(%(now)s::TIMESTAMP WITH TIME ZONE, (SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1), a2_events.last_claimed_at) ELSE NULL END, claim_holder=NULL, claim_expires_at=CASE WHEN (%(max_failures)s <= a2_events.failure_count + %(failure_count#1)s::BIGINT) THEN NULL ELSE CAST(greatest(%(now)s::TIMESTAMP WITH TIME ZONE, (SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1), a2_events.last_claimed_at) + CAST(%(retry_after_ms)s::BIGINT AS FLOAT) * interval '1 millisecond' AS TIMESTAMP WITH TIME ZONE) END WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx = %(index)s::BIGINT AND a2_events.attempt_count = %(attempt)s::BIGINT AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_holder IS NOT NULL RETURNING a2_events.failure_count, a2_events.claim_expires_at AT TIME ZONE 'UTC' AS claim_expires_at;
