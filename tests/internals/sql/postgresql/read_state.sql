SELECT a2_snapshots.up_to_index, CAST(a2_snapshots.state AS TEXT) AS state
FROM a2_snapshots
WHERE a2_snapshots.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_snapshots.reducer_name = %(reducer)s::VARCHAR COLLATE "C";

SELECT a2_events.event_id, a2_events.event_type, CAST(a2_events.payload AS TEXT) AS payload, a2_events.idx, a2_events.session_id, a2_events.created_at AT TIME ZONE 'UTC' AS created_at
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.idx > %(after)s::BIGINT ORDER BY a2_events.idx;
