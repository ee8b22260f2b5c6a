BEGIN IMMEDIATE;

SELECT claimable.session_id
FROM (SELECT never_held.session_id AS session_id, never_held.created_at AS created_at
FROM (SELECT a2_events.session_id AS session_id, a2_events.created_at AS created_at
FROM a2_events
WHERE a2_events.lane_ready = 1 AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_expires_at IS NULL ORDER BY a2_events.created_at, a2_events.session_id
 LIMIT ? OFFSET ?) AS never_held UNION ALL SELECT due.session_id AS session_id, due.created_at AS created_at
FROM (SELECT a2_events.session_id AS session_id, a2_events.created_at AS created_at
FROM a2_events
WHERE a2_events.lane_ready = 1 AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_expires_at IS NOT NULL AND a2_events.claim_expires_at <= ? ORDER BY a2_events.created_at, a2_events.session_id
 LIMIT ? OFFSET ?) AS due) AS claimable ORDER BY claimable.created_at, claimable.session_id
 LIMIT ? OFFSET ?;

UPDATE a2_events SET first_claimed_at=coalesce(a2_events.first_claimed_at, max(session_clock.now, coalesce(a2_events.last_failed_at, session_clock.now), coalesce(a2_events.last_claimed_at, session_clock.now), coalesce(CASE WHEN (a2_events.lane IS NOT NULL AND a2_events.first_claimed_at IS NULL) THEN coalesce((SELECT lane_before.processed_at
FROM a2_events AS lane_before
WHERE lane_before.session_id = ? AND lane_before.lane = a2_events.lane AND lane_before.idx < a2_events.idx AND lane_before.idx >= a2_events.idx - ? ORDER BY lane_before.session_id DESC, lane_before.idx DESC
 LIMIT 1 OFFSET ?), (SELECT max(any_lane.processed_at) AS max#1
FROM a2_events AS any_lane
WHERE any_lane.session_id = ? AND any_lane.lane IS NOT NULL)) ELSE NULL END, session_clock.now))), last_claimed_at=max(session_clock.now, coalesce(a2_events.last_failed_at, session_clock.now), coalesce(a2_events.last_claimed_at, session_clock.now), coalesce(CASE WHEN (a2_events.lane IS NOT NULL AND a2_events.first_claimed_at IS NULL) THEN coalesce((SELECT lane_before.processed_at
FROM a2_events AS lane_before
WHERE lane_before.session_id = ? AND lane_before.lane = a2_events.lane AND lane_before.idx < a2_events.idx AND lane_before.idx >= a2_events.idx - ? ORDER BY lane_before.session_id DESC, lane_before.idx DESC
 LIMIT 1 OFFSET ?), (SELECT max(any_lane.processed_at) AS max#1
FROM a2_events AS any_lane
WHERE any_lane.session_id = ? AND any_lane.lane IS NOT NULL)) ELSE NULL END, session_clock.now)), attempt_count=(a2_events.attempt_count + ?), claim_holder=?, claim_expires_at=coalesce(?, max(session_clock.now, coalesce(a2_events.last_failed_at, session_clock.now), coalesce(a2_events.last_claimed_at, session_clock.now), coalesce(CASE WHEN (a2_events.lane IS NOT NULL AND a2_events.first_claimed_at IS NULL) THEN coalesce((SELECT lane_before.processed_at
FROM a2_events AS lane_before
WHERE lane_before.session_id = ? AND lane_before.lane = a2_events.lane AND lane_before.idx < a2_events.idx AND lane_before.idx >= a2_events.idx - ? ORDER BY lane_before.session_id DESC, lane_before.idx DESC
 LIMIT 1 OFFSET ?), (SELECT max(any_lane.processed_at) AS max#1
FROM a2_events AS any_lane
WHERE any_lane.session_id = ? AND any_lane.lane IS NOT NULL)) ELSE NULL END, session_clock.now)) + ?), wake_on=NULL FROM (SELECT ? AS sid, max(?, coalesce((SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = ? ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1 OFFSET ?), ?)) AS now) AS session_clock WHERE a2_events.session_id = session_clock.sid AND a2_events.session_id = ? AND a2_events.idx IN (SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = ? AND a2_events.lane_ready = 1 AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND (a2_events.claim_expires_at IS NULL OR a2_events.claim_expires_at <= ?) ORDER BY a2_events.session_id, a2_events.idx
 LIMIT ? OFFSET ?) RETURNING idx, event_type, payload, event_id, created_at, cause, lane, processed_by_attempt, returned_event_ids, first_claimed_at, attempt_count, failure_count, last_failed_at, last_failed_attempt, last_error, last_claimed_at, claim_expires_at;
