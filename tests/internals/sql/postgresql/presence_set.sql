INSERT INTO a2_presence (ns, participant, field, value, seen, at, expires_at) VALUES (%(ns)s::VARCHAR COLLATE "C", %(participant)s::VARCHAR COLLATE "C", %(field)s::VARCHAR COLLATE "C", CAST(%(value)s AS JSON), %(seen)s::BIGINT, %(at)s::TIMESTAMP WITH TIME ZONE, %(expires_at)s::TIMESTAMP WITH TIME ZONE) ON CONFLICT (ns, participant, field) DO UPDATE SET value = excluded.value, seen = excluded.seen, at = excluded.at, expires_at = excluded.expires_at WHERE a2_presence.at <= excluded.at OR a2_presence.expires_at <= %(now)s::TIMESTAMP WITH TIME ZONE;

DELETE FROM a2_presence WHERE a2_presence.ns = %(ns)s::VARCHAR COLLATE "C" AND a2_presence.expires_at <= %(now)s::TIMESTAMP WITH TIME ZONE AND (a2_presence.ns, a2_presence.participant, a2_presence.field) IN (SELECT a2_presence.ns, a2_presence.participant, a2_presence.field
FROM a2_presence
WHERE a2_presence.ns = %(ns)s::VARCHAR COLLATE "C" AND a2_presence.expires_at <= %(now)s::TIMESTAMP WITH TIME ZONE ORDER BY a2_presence.ns, a2_presence.participant, a2_presence.field
 LIMIT 500 FOR UPDATE SKIP LOCKED);
