SELECT set_config('lock_timeout', %(wait)s, %(set_config#1)s) AS set_config#2, set_config('idle_in_transaction_session_timeout', %(wait)s, %(set_config#3)s) AS set_config#4, pg_advisory_xact_lock(24882, hashtext(%(sid)s)) AS pg_advisory_xact_lock#1;

SELECT coalesce((SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" ORDER BY a2_events.session_id DESC, a2_events.idx DESC
 LIMIT 1), %(coalesce#1)s::INTEGER) AS coalesce#2, (SELECT a2_events.idx
FROM a2_events
WHERE a2_events.session_id = %(sid)s::VARCHAR COLLATE "C" AND a2_events.processed_at IS NULL ORDER BY a2_events.session_id, a2_events.idx
 LIMIT 1) IS NOT NULL AS anon#1;

INSERT INTO a2_snapshots (session_id, reducer_name, up_to_index, state, updated_at) VALUES (%(session_id)s::VARCHAR COLLATE "C", %(reducer_name)s::VARCHAR COLLATE "C", %(up_to_index)s::BIGINT, CAST(%(state)s AS JSON), %(updated_at)s::TIMESTAMP WITH TIME ZONE) ON CONFLICT (session_id, reducer_name) DO UPDATE SET up_to_index = excluded.up_to_index, state = excluded.state, updated_at = excluded.updated_at WHERE excluded.up_to_index > a2_snapshots.up_to_index;
