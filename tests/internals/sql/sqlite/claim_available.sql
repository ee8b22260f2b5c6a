BEGIN IMMEDIATE;

UPDATE a2_events SET first_claimed_at=coalesce(a2_events.first_claimed_at, ?), last_claimed_at=?, attempt_count=(a2_events.attempt_count + ?), claim_holder=?, claim_expires_at=? WHERE a2_events.session_id = ? AND a2_events.idx IN (SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = ? AND a2_events.lane_ready = 1 AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND (a2_events.claim_expires_at IS NULL OR a2_events.claim_expires_at <= ?) ORDER BY a2_events.session_id, a2_events.idx
 LIMIT ? OFFSET ?) RETURNING idx, event_type, payload, event_id, created_at, cause, lane, processed_by_attempt, returned_event_ids, first_claimed_at, attempt_count, failure_count, last_failed_at, last_failed_attempt, last_error;
