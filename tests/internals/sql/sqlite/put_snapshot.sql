BEGIN IMMEDIATE;

SELECT coalesce((SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = ? ORDER BY a2_events.session_id DESC, a2_events.idx DESC
 LIMIT 1 OFFSET ?), ?) AS coalesce#1, (SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = ? AND a2_events.processed_at IS NULL ORDER BY a2_events.session_id, a2_events.idx
 LIMIT 1 OFFSET ?) IS NOT NULL AS anon#1;

INSERT INTO a2_snapshots (session_id, reducer_name, up_to_index, state, updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id, reducer_name) DO UPDATE SET up_to_index = excluded.up_to_index, state = excluded.state, updated_at = excluded.updated_at WHERE excluded.up_to_index > a2_snapshots.up_to_index;
