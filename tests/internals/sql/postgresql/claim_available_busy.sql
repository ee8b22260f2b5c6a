SELECT set_config('lock_timeout', %(wait)s, %(set_config#1)s) AS set_config#2, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config#3)s) AS set_config#4, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock#1;

WITH claimed AS
(UPDATE a2_events SET first_claimed_at=coalesce(a2_events.first_claimed_at, greatest(session_clock.now, a2_events.last_failed_at, a2_events.last_claimed_at, CASE WHEN (a2_events.lane IS NOT NULL AND a2_events.first_claimed_at IS NULL) THEN coalesce((SELECT lane_before.processed_at
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
 LIMIT 1)) AS now) AS session_clock WHERE a2_events.session_id = session_clock.sid AND a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.lane_ready = true AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND (a2_events.claim_expires_at IS NULL OR a2_events.claim_expires_at <= %(now)s::TIMESTAMP WITH TIME ZONE) RETURNING a2_events.idx, a2_events.event_type, a2_events.payload, a2_events.event_id, a2_events.created_at, a2_events.cause, a2_events.lane, a2_events.processed_by_attempt, a2_events.returned_event_ids, a2_events.first_claimed_at, a2_events.attempt_count, a2_events.failure_count, a2_events.last_failed_at, a2_events.last_failed_attempt, a2_events.last_error, a2_events.last_claimed_at, a2_events.claim_expires_at)
 SELECT claimed.idx, claimed.event_type, CAST(claimed.payload AS TEXT) AS payload, claimed.event_id, claimed.created_at AT TIME ZONE 'UTC' AS created_at, claimed.cause, claimed.lane, claimed.processed_by_attempt, claimed.returned_event_ids, claimed.first_claimed_at AT TIME ZONE 'UTC' AS first_claimed_at, claimed.attempt_count, claimed.failure_count, claimed.last_failed_at AT TIME ZONE 'UTC' AS last_failed_at, claimed.last_failed_attempt, claimed.last_error, claimed.last_claimed_at AT TIME ZONE 'UTC' AS last_claimed_at, claimed.claim_expires_at AT TIME ZONE 'UTC' AS claim_expires_at, CAST(NULL AS TIMESTAMP WITH TIME ZONE) AT TIME ZONE 'UTC' AS retry_at
FROM claimed UNION ALL SELECT NULL AS idx, NULL AS event_type, NULL AS payload, NULL AS event_id, NULL AS created_at, NULL AS cause, NULL AS lane, NULL AS processed_by_attempt, NULL AS returned_event_ids, NULL AS first_claimed_at, NULL AS attempt_count, NULL AS failure_count, NULL AS last_failed_at, NULL AS last_failed_attempt, NULL AS last_error, NULL AS last_claimed_at, NULL AS claim_expires_at, (SELECT a2_events.claim_expires_at
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.lane_ready = true AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_expires_at > %(now)s::TIMESTAMP WITH TIME ZONE ORDER BY a2_events.session_id, a2_events.claim_expires_at
 LIMIT 1) AT TIME ZONE 'UTC' AS retry_at
WHERE NOT (EXISTS (SELECT claimable_event.idx
FROM a2_events AS claimable_event
WHERE claimable_event.session_id = %(sid)s::VARCHAR COLLATE "C" AND claimable_event.lane_ready = true AND claimable_event.processed_at IS NULL AND claimable_event.failed_at IS NULL AND (claimable_event.claim_expires_at IS NULL OR claimable_event.claim_expires_at <= %(now)s::TIMESTAMP WITH TIME ZONE)));
