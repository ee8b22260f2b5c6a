BEGIN IMMEDIATE;

DELETE FROM a2_snapshots WHERE a2_snapshots.session_id = ?;

DELETE FROM a2_events WHERE a2_events.session_id = ?;
