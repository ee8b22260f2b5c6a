BEGIN;

SELECT a2_events.session_id, count(*) AS count#1, sum(CASE WHEN (a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL) THEN 1 ELSE 0 END) AS sum#1, sum(CASE WHEN (a2_events.failed_at IS NOT NULL) THEN 1 ELSE 0 END) AS sum#2, sum(a2_events.attempt_count) - count(*) * coalesce((SELECT a2_retired_attempts.last_attempt
FROM a2_retired_attempts
WHERE a2_retired_attempts.session_id = a2_events.session_id), ?) AS anon#1, sum(a2_events.failure_count) AS sum#3, min(a2_events.created_at) AS min#1, max(max(a2_events.created_at, coalesce(a2_events.first_claimed_at, a2_events.created_at), coalesce(a2_events.last_claimed_at, a2_events.created_at), coalesce(a2_events.last_failed_at, a2_events.created_at), coalesce(a2_events.processed_at, a2_events.created_at), coalesce(a2_events.failed_at, a2_events.created_at))) AS max#1, sum(CASE WHEN (a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.claim_holder IS NOT NULL AND a2_events.claim_expires_at > ?) THEN 1 ELSE 0 END) AS sum#4, sum(CASE WHEN (a2_events.processed_at IS NULL AND a2_events.failed_at IS NOT NULL AND a2_events.lane IS NOT NULL) THEN (SELECT count(*) AS count#2
FROM a2_events AS behind
WHERE behind.session_id = a2_events.session_id AND behind.lane = a2_events.lane AND behind.processed_at IS NULL AND behind.idx > a2_events.idx) ELSE 0 END) AS sum#5, min(CASE WHEN (a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL) THEN a2_events.created_at END) AS min#2, sum(CASE WHEN (a2_events.processed_at IS NULL AND a2_events.wake_on IS NOT NULL AND a2_events.first_claimed_at IS NULL) THEN 1 ELSE 0 END) AS sum#6, sum(CASE WHEN (a2_events.processed_at IS NULL AND a2_events.failed_at IS NULL AND a2_events.wake_on IS NULL AND a2_events.claim_holder IS NULL AND a2_events.first_claimed_at IS NULL AND a2_events.claim_expires_at > ?) THEN 1 ELSE 0 END) AS sum#7
FROM a2_events
WHERE a2_events.session_id >= ? GROUP BY a2_events.session_id ORDER BY a2_events.session_id
 LIMIT ? OFFSET ?;
