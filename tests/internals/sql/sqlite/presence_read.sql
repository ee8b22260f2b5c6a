BEGIN;

SELECT a2_presence.participant, a2_presence.field, a2_presence.value, a2_presence.seen, a2_presence.at, a2_presence.expires_at
FROM a2_presence
WHERE a2_presence.ns = ? AND a2_presence.expires_at > ? ORDER BY a2_presence.participant, a2_presence.field;
