BEGIN IMMEDIATE;

UPDATE a2_events SET failure_count=(a2_events.failure_count + ?), last_failed_at=?, last_failed_attempt=?, last_error=?, failed_at=CASE WHEN (? <= a2_events.failure_count + ?) THEN ? ELSE NULL END, claim_holder=NULL, claim_expires_at=CASE WHEN (? <= a2_events.failure_count + ?) THEN NULL ELSE ? END WHERE a2_events.session_id = ? AND a2_events.idx = ? AND a2_events.attempt_count = ? AND a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_holder IS NOT NULL RETURNING failure_count;
