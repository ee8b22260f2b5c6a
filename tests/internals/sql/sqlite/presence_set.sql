BEGIN IMMEDIATE;

INSERT INTO a2_presence (ns, participant, field, value, seen, at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (ns, participant, field) DO UPDATE SET value = excluded.value, seen = excluded.seen, at = excluded.at, expires_at = excluded.expires_at WHERE a2_presence.at <= excluded.at OR a2_presence.expires_at <= ?;

DELETE FROM a2_presence WHERE a2_presence.ns = ? AND a2_presence.expires_at <= ? AND (a2_presence.ns, a2_presence.participant, a2_presence.field) IN (SELECT a2_presence.ns, a2_presence.participant, a2_presence.field
FROM a2_presence
WHERE a2_presence.ns = ? AND a2_presence.expires_at <= ? ORDER BY a2_presence.ns, a2_presence.participant, a2_presence.field
 LIMIT 500 OFFSET ?);
