BEGIN;

SELECT a2_snapshots.up_to_index, a2_snapshots.state
FROM a2_snapshots
WHERE a2_snapshots.session_id = ? AND a2_snapshots.reducer_name = ?;

SELECT a2_events.event_id, a2_events.event_type, a2_events.payload, a2_events.idx, a2_events.session_id, a2_events.created_at
FROM a2_events
WHERE a2_events.session_id = ? AND a2_events.idx > ? ORDER BY a2_events.idx;
