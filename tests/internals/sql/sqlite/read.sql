BEGIN;

SELECT a2_events.session_id, a2_events.idx, a2_events.event_type, a2_events.payload, a2_events.event_id, a2_events.created_at, a2_events.cause, a2_events.lane, a2_events.lane_ready, a2_events.processed_at, a2_events.processed_by_attempt, a2_events.returned_event_ids, a2_events.first_claimed_at, a2_events.last_claimed_at, a2_events.attempt_count, a2_events.failure_count, a2_events.last_failed_at, a2_events.last_failed_attempt, a2_events.last_error, a2_events.failed_at, a2_events.claim_holder, a2_events.claim_expires_at, a2_events.wake_on
FROM a2_events
WHERE a2_events.session_id = ? AND a2_events.idx > ? AND a2_events.idx <= ? ORDER BY a2_events.idx;
