BEGIN IMMEDIATE;

UPDATE a2_events SET failure_count=(a2_events.failure_count + ?), last_failed_at=max(?, coalesce((SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = ? ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1 OFFSET ?), ?), coalesce(a2_events.last_claimed_at, ?)), last_failed_attempt=?, last_error=?, failed_at=CASE WHEN (? <= a2_events.failure_count + ?) THEN max(?, coalesce((SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = ? ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1 OFFSET ?), ?), coalesce(a2_events.last_claimed_at, ?)) ELSE NULL END, claim_holder=NULL, claim_expires_at=CASE WHEN (? <= a2_events.failure_count + ?) THEN NULL ELSE max(?, coalesce((SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = ? ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1 OFFSET ?), ?), coalesce(a2_events.last_claimed_at, ?)) + ? END WHERE a2_events.session_id = ? AND a2_events.idx = ? AND a2_events.attempt_count = ? AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_holder IS NOT NULL RETURNING failure_count, claim_expires_at;
