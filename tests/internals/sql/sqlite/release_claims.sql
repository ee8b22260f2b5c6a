BEGIN IMMEDIATE;

SELECT a2_events.idx, a2_events.attempt_count
FROM a2_events
WHERE a2_events.session_id = ? AND a2_events.idx IN (?);
