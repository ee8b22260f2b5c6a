SELECT claimable.session_id
FROM (SELECT never_held.session_id AS session_id, never_held.created_at AS created_at
FROM (SELECT a2_events.session_id AS session_id, a2_events.created_at AS created_at
FROM a2_events
WHERE a2_events.lane_ready = true AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_expires_at IS NULL ORDER BY a2_events.created_at, a2_events.session_id
 LIMIT %(param#1)s::INTEGER) AS never_held UNION ALL SELECT due.session_id AS session_id, due.created_at AS created_at
FROM (SELECT a2_events.session_id AS session_id, a2_events.created_at AS created_at
FROM a2_events
WHERE a2_events.lane_ready = true AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_expires_at IS NOT NULL AND a2_events.claim_expires_at <= %(now)s::TIMESTAMP WITH TIME ZONE ORDER BY a2_events.created_at, a2_events.session_id
 LIMIT %(param#2)s::INTEGER) AS due) AS claimable ORDER BY claimable.created_at, claimable.session_id
 LIMIT %(param#3)s::INTEGER;

SELECT pg_try_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_try_advisory_xact_lock#1;

UPDATE a2_events SET first_claimed_at=coalesce(a2_events.first_claimed_at, greatest(session_clock.now, a2_events.last_failed_at, a2_events.last_claimed_at, CASE WHEN (a2_events.lane IS NOT NULL AND a2_events.first_claimed_at IS NULL) THEN coalesce((SELECT lane_before.processed_at
FROM a2_events AS lane_before
WHERE lane_before.session_id = %(sid)s::VARCHAR COLLATE "C" AND lane_before.lane = a2_events.lane AND lane_before.idx < a2_events.idx AND lane_before.idx >= a2_events.idx - %(idx#1)s::BIGINT ORDER BY lane_before.session_id DESC, lane_before.idx DESC
 LIMIT 1), (SELECT max(any_lane.processed_at) AS max#1
FROM a2_events AS any_lane
WHERE any_lane.session_id = %(sid)s::VARCHAR COLLATE "C" AND any_lane.lane IS NOT NULL)) ELSE NULL END)), last_claimed_at=greatest(session_clock.now, a2_events.last_failed_at, a2_events.last_claimed_at, CASE WHEN (a2_events.lane IS NOT NULL AND a2_events.first_claimed_at IS NULL) THEN coalesce((SELECT lane_before.processed_at
FROM a2_events AS lane_before
WHERE lane_before.session_id = %(sid)s::VARCHAR COLLATE "C" AND lane_before.lane = a2_events.lane AND lane_before.idx < a2_events.idx AND lane_before.idx >= a2_events.idx - %(idx#1)s::BIGINT ORDER BY lane_before.session_id DESC, lane_before.idx DESC
 LIMIT 1), (SELECT max(any_lane.processed_at) AS max#1
FROM a2_events AS any_lane
WHERE any_lane.session_id = %(sid)s::VARCHAR COLLATE "C" AND any_lane.lane IS NOT NULL)) ELSE NULL END), attempt_count=(a2_events.attempt_count + %(attempt_count#1)s::BIGINT), claim_holder=%(holder)s::VARCHAR COLLATE "C", claim_expires_at=coalesce(%(expires_at)s::TIMESTAMP WITH TIME ZONE, CAST(greatest(session_clock.now, a2_events.last_failed_at, a2_events.last_claimed_at, CASE WHEN (a2_events.lane IS NOT NULL AND a2_events.first_claimed_at IS NULL) THEN coalesce((SELECT lane_before.processed_at
FROM a2_events AS lane_before
WHERE lane_before.session_id = %(sid)s::VARCHAR COLLATE "C" AND lane_before.lane = a2_events.lane AND lane_before.idx < a2_events.idx AND lane_before.idx >= a2_events.idx - %(idx#1)s::BIGINT ORDER BY lane_before.session_id DESC, lane_before.idx DESC
 LIMIT 1), (SELECT max(any_lane.processed_at) AS max#1
FROM a2_events AS any_lane
WHERE any_lane.session_id = %(sid)s::VARCHAR COLLATE "C" AND any_lane.lane IS NOT NULL)) ELSE NULL END) + CAST(%(lease_ms)s::BIGINT AS FLOAT) * interval '1 millisecond' AS TIMESTAMP WITH TIME ZONE)), wake_on=NULL FROM (SELECT %(sid)s::VARCHAR COLLATE "C" AS sid, greatest(%(now)s::TIMESTAMP WITH TIME ZONE, (SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1)) AS now) AS session_clock WHERE a2_events.session_id = session_clock.sid AND a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx = ANY (array((SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.lane_ready = true AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND (a2_events.claim_expires_at IS NULL OR a2_events.claim_expires_at <= %(now)s::TIMESTAMP WITH TIME ZONE) ORDER BY a2_events.session_id, a2_events.idx
 LIMIT %(limit)s))) RETURNING a2_events.idx, a2_events.event_type, CAST(a2_events.payload AS TEXT) AS payload, a2_events.event_id, a2_events.created_at AT TIME ZONE 'UTC' AS created_at, a2_events.cause, a2_events.lane, a2_events.processed_by_attempt, a2_events.returned_event_ids, a2_events.first_claimed_at AT TIME ZONE 'UTC' AS first_claimed_at, a2_events.attempt_count, a2_events.failure_count, a2_events.last_failed_at AT TIME ZONE 'UTC' AS last_failed_at, a2_events.last_failed_attempt, a2_events.last_error, a2_events.last_claimed_at AT TIME ZONE 'UTC' AS last_claimed_at, a2_events.claim_expires_at AT TIME ZONE 'UTC' AS claim_expires_at;
