BEGIN IMMEDIATE;

SELECT coalesce((SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = ? ORDER BY a2_events.session_id DESC, a2_events.idx DESC
 LIMIT 1 OFFSET ?), ?) AS coalesce#1, (SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = ? AND a2_events.processed_at IS NULL ORDER BY a2_events.session_id, a2_events.idx
 LIMIT 1 OFFSET ?) IS NOT NULL AS anon#1, coalesce((SELECT a2_retired_attempts.last_attempt
FROM a2_retired_attempts
WHERE a2_retired_attempts.session_id = ?), ?) AS coalesce#2, max(?, coalesce((SELECT latest_event.created_at
FROM a2_events AS latest_event
WHERE latest_event.session_id = ? ORDER BY latest_event.session_id DESC, latest_event.idx DESC
 LIMIT 1 OFFSET ?), ?)) AS anon#2, EXISTS (SELECT *
FROM a2_events
WHERE a2_events.event_id IN (?, ?)) AS anon#3;

SELECT DISTINCT a2_events.lane
FROM a2_events
WHERE a2_events.session_id = ? AND a2_events.lane IN (?) AND a2_events.processed_at IS NULL;

INSERT INTO a2_events (session_id, idx, event_type, payload, event_id, created_at, cause, lane, lane_ready, processed_at, attempt_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);
