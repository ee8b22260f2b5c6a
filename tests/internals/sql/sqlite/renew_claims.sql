BEGIN IMMEDIATE;

SELECT a2_events.idx, a2_events.attempt_count
FROM a2_events
WHERE a2_events.session_id = ? AND a2_events.idx IN (?);

UPDATE a2_events SET claim_expires_at=? WHERE a2_events.session_id = ? AND (a2_events.idx, a2_events.attempt_count) IN (VALUES (?, ?)) AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_holder = ? AND a2_events.claim_expires_at > ? RETURNING idx, attempt_count;
