#!/usr/bin/env bash
# Print the URL of the tests' PostgreSQL database reached through PgBouncer in
# transaction mode (how most production PostgreSQL is reached), starting a
# PgBouncer of the tests' own on a port of its own when none answers there.
# Installs Debian's pgbouncer when it is missing and apt-get can. Takes the
# database's URL (from tools/test-postgres.sh) as its argument; prints
# nothing when PgBouncer cannot be had (those tests then skip, or fail under
# CI=true). The PgBouncer it starts runs on as a daemon (its pid in
# $PGBOUNCER_DIR_FOR_TESTS/pgbouncer.pid): make test runs it through
# tools/with-test-pgbouncer.sh, which stops it when the tests end.
set -uo pipefail

direct=${1:-}
[ -n "$direct" ] || exit 0
if [ -n "${A2SQL_TEST_PGBOUNCER_URL:-}" ]; then
  echo "$A2SQL_TEST_PGBOUNCER_URL"
  exit 0
fi

port=${PGBOUNCER_PORT_FOR_TESTS:-6439}
dir=${PGBOUNCER_DIR_FOR_TESTS:-/tmp/a2sql-test-pgbouncer}
# postgresql://user@host:port/db, as test-postgres.sh prints it
rest=${direct#postgresql://}
user=${rest%%@*}
hostport=${rest#*@}; hostport=${hostport%%/*}
db=${rest##*/}
host=${hostport%%:*}
pgport=${hostport##*:}

ready() { psql -h 127.0.0.1 -p "$port" -U "$user" -d "$db" -Atqc 'select 1' >/dev/null 2>&1; }

if ! ready; then
  if ! command -v pgbouncer >/dev/null 2>&1 && [ -x /usr/sbin/pgbouncer ]; then
    PATH="$PATH:/usr/sbin"
  fi
  if ! command -v pgbouncer >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "test-pgbouncer: installing Debian's pgbouncer" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer; } >&2 || true
    PATH="$PATH:/usr/sbin"
  fi
  if ! command -v pgbouncer >/dev/null 2>&1; then
    echo "test-pgbouncer: pgbouncer not found; the tests through a pooler will not run" >&2
    exit 0
  fi
  # PgBouncer refuses to run as root: it runs as the database's system user.
  owner=postgres
  id "$owner" >/dev/null 2>&1 || owner=$(id -un)
  mkdir -p "$dir"
  rm -f "$dir/pgbouncer.pid"  # none answers on the port: a pid file left is stale
  cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$pgport

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 2
max_client_conn = 400
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  printf '"%s" ""\n' "$user" >"$dir/users.txt"
  chown -R "$owner" "$dir" 2>/dev/null || true
  echo "test-pgbouncer: starting PgBouncer (transaction mode) on 127.0.0.1:$port" >&2
  if [ "$(id -u)" = 0 ] && [ "$owner" != root ]; then
    runuser -u "$owner" -- pgbouncer -d "$dir/pgbouncer.ini" >&2 || true
  else
    pgbouncer -d "$dir/pgbouncer.ini" >&2 || true
  fi
  for _ in $(seq 1 20); do ready && break; sleep 0.5; done
fi
if ! ready; then
  echo "test-pgbouncer: no PgBouncer answers on 127.0.0.1:$port; the tests through a pooler will not run" >&2
  exit 0
fi
echo "postgresql://$user@127.0.0.1:$port/$db"
