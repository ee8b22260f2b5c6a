SELECT coalesce((SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY a2_events.session_id DESC, a2_events.idx DESC
 LIMIT 1), %(coalesce#1)s::INTEGER) AS coalesce#2, (SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.processed_at IS NULL ORDER BY a2_events.session_id, a2_events.idx
 LIMIT 1) IS NOT NULL AS anon#1;

SELECT a2_events.session_id, a2_events.idx, a2_events.event_type, CAST(a2_events.payload AS TEXT) AS payload, a2_events.event_id, a2_events.created_at AT TIME ZONE 'UTC' AS created_at, a2_events.cause, a2_events.lane, a2_events.lane_ready, a2_events.processed_at AT TIME ZONE 'UTC' AS processed_at, a2_events.processed_by_attempt, a2_events.returned_event_ids, a2_events.first_claimed_at AT TIME ZONE 'UTC' AS first_claimed_at, a2_events.last_claimed_at AT TIME ZONE 'UTC' AS last_claimed_at, a2_events.attempt_count, a2_events.failure_count, a2_events.last_failed_at AT TIME ZONE 'UTC' AS last_failed_at, a2_events.last_failed_attempt, a2_events.last_error, a2_events.failed_at AT TIME ZONE 'UTC' AS failed_at, a2_events.claim_holder, a2_events.claim_expires_at AT TIME ZONE 'UTC' AS claim_expires_at, a2_events.wake_on
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx > %(after)s::BIGINT AND a2_events.idx <= %(through)s::BIGINT ORDER BY a2_events.idx
 LIMIT %(limit)s;
