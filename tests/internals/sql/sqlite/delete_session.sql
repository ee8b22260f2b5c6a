BEGIN IMMEDIATE;

DELETE FROM a2_snapshots WHERE a2_snapshots.session_id = ?;

INSERT INTO a2_retired_attempts (session_id, last_attempt) SELECT a2_events.session_id, max(a2_events.attempt_count) AS max#1
FROM a2_events
WHERE a2_events.session_id = ? AND a2_events.attempt_count > 0 GROUP BY a2_events.session_id ON CONFLICT (session_id) DO UPDATE SET last_attempt = excluded.last_attempt WHERE excluded.last_attempt > a2_retired_attempts.last_attempt;

DELETE FROM a2_events WHERE a2_events.session_id = ?;
