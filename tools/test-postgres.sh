#!/usr/bin/env bash
# Print the URL of a PostgreSQL database for the tests, starting the local
# server and creating the database when needed. Prints nothing when no
# PostgreSQL can be had here (the tests then skip, or fail under CI=true).
set -uo pipefail

if [ -n "${A2SQL_TEST_POSTGRES_URL:-}" ]; then
  echo "$A2SQL_TEST_POSTGRES_URL"
  exit 0
fi

host=${PGHOST_FOR_TESTS:-127.0.0.1}
port=${PGPORT_FOR_TESTS:-5432}
user=${PGUSER_FOR_TESTS:-postgres}
db=${A2SQL_TEST_DATABASE:-a2sql_test}

ready() { psql -h "$host" -p "$port" -U "$user" -d postgres -Atqc 'select 1' >/dev/null 2>&1; }

if ! command -v psql >/dev/null 2>&1; then
  echo "test-postgres: psql not found; PostgreSQL tests will not run" >&2
  exit 0
fi
if ! ready && command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
  echo "test-postgres: starting the local PostgreSQL cluster" >&2
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start >&2 || true
  for _ in $(seq 1 30); do ready && break; sleep 1; done
fi
if ! ready; then
  echo "test-postgres: no PostgreSQL at $host:$port; PostgreSQL tests will not run" >&2
  exit 0
fi
if [ "$(psql -h "$host" -p "$port" -U "$user" -d postgres -Atqc "select 1 from pg_database where datname = '$db'")" != "1" ]; then
  psql -h "$host" -p "$port" -U "$user" -d postgres -qc "create database \"$db\"" >&2
fi
echo "postgresql://$user@$host:$port/$db"
