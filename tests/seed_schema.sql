-- The SQLite schema of the TypeScript store a2sql's file format is shared with:
-- its DDL, kept here as that store creates it, so that tests/test_schema_sqlite.py
-- can check a2sql's baseline revision against it (and a file of either store
-- opens in the other).
create table if not exists a2_events (
  session_id   text    not null,
  idx          integer not null,
  event_type   text    not null,
  payload      text    not null,
  event_id     text    not null,
  created_at   integer not null,
  cause        text,
  lane         text,
  lane_ready   integer not null default 0,
  processed_at integer,
  processed_by_attempt integer,
  returned_event_ids text,
  first_claimed_at integer,
  last_claimed_at integer,
  attempt_count integer not null default 0,
  failure_count integer not null default 0,
  last_failed_at integer,
  last_failed_attempt integer,
  last_error   text,
  failed_at    integer,
  claim_holder text,
  claim_expires_at integer,
  primary key (session_id, idx)
) strict;

create unique index if not exists a2_events_event_id on a2_events (event_id);
create index if not exists a2_events_unprocessed
  on a2_events (session_id, idx) where processed_at is null;
create index if not exists a2_events_lane_pending
  on a2_events (session_id, lane, idx) where processed_at is null;
create index if not exists a2_events_dispatch_ready
  on a2_events (session_id, idx)
  where lane_ready = 1 and processed_at is null and failed_at is null;
create index if not exists a2_events_claim_expiry
  on a2_events (session_id, claim_expires_at)
  where lane_ready = 1 and processed_at is null and failed_at is null;

create table if not exists a2_snapshots (
  session_id   text    not null,
  reducer_name text    not null,
  up_to_index  integer not null,
  state        text    not null,
  updated_at   integer not null,
  primary key (session_id, reducer_name)
) strict;

create table if not exists a2_presence (
  ns          text    not null,
  participant text    not null,
  field       text    not null,
  value       text    not null,
  seen        integer not null,
  at          integer not null,
  expires_at  integer not null,
  primary key (ns, participant, field)
) strict;
