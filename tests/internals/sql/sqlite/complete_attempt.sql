BEGIN IMMEDIATE;

UPDATE a2_events SET lane_ready=0, processed_at=max(?, coalesce((SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = ? ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1 OFFSET ?), ?), coalesce(a2_events.last_claimed_at, ?)), processed_by_attempt=?, returned_event_ids=?, claim_holder=NULL, claim_expires_at=NULL WHERE a2_events.session_id = ? AND a2_events.idx = ? AND a2_events.attempt_count = ? AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_holder IS NOT NULL RETURNING lane, (SELECT last_event.idx
FROM a2_events AS last_event
WHERE session_id = ? ORDER BY session_id DESC, idx DESC
 LIMIT 1 OFFSET ?) AS last_index, coalesce((SELECT a2_retired_attempts.last_attempt
FROM a2_retired_attempts
WHERE session_id = ?), ?) AS retired_attempts, processed_at AS now;

INSERT INTO a2_events (session_id, idx, event_type, payload, event_id, created_at, cause, lane, lane_ready, processed_at, attempt_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);
