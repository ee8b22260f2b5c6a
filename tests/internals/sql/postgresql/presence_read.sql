SELECT a2_presence.participant, a2_presence.field, CAST(a2_presence.value AS TEXT) AS value, a2_presence.seen, a2_presence.at AT TIME ZONE 'UTC' AS at, a2_presence.expires_at AT TIME ZONE 'UTC' AS expires_at
FROM a2_presence
WHERE a2_presence.ns = %(ns)s::VARCHAR COLLATE "C" AND a2_presence.expires_at > %(now)s::TIMESTAMP WITH TIME ZONE ORDER BY a2_presence.participant, a2_presence.field;
