#!/usr/bin/env bash
# Run a command (the tests) with A2SQL_TEST_PGBOUNCER_URL set, and stop the
# PgBouncer started for it when the command ends, whatever its exit code.
#
#   tools/with-test-pgbouncer.sh DATABASE_URL COMMAND [ARGS...]
#
# A PgBouncer given in A2SQL_TEST_PGBOUNCER_URL, or one already answering on
# PGBOUNCER_PORT_FOR_TESTS, is used and left alone. Otherwise
# tools/test-pgbouncer.sh starts one: on PGBOUNCER_PORT_FOR_TESTS, else on a
# free port, in PGBOUNCER_DIR_FOR_TESTS, else in a temporary folder deleted
# afterwards. Exits with the command's exit code.
set -uo pipefail

direct=${1:-}
shift || true
[ "$#" -gt 0 ] || { echo "usage: $0 DATABASE_URL COMMAND [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)

if [ -n "${A2SQL_TEST_PGBOUNCER_URL:-}" ] || [ -z "$direct" ]; then
  "$@"
  exit
fi

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

port=${PGBOUNCER_PORT_FOR_TESTS:-}
if [ -z "$port" ]; then
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
dir=${PGBOUNCER_DIR_FOR_TESTS:-}
made_dir=
if [ -z "$dir" ]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/a2sql-test-pgbouncer.XXXXXX")
  made_dir=$dir
fi
answered_before=
answers "$port" && answered_before=yes

stop() {
  # Only the PgBouncer started here: its pid file names a pgbouncer running our ini.
  if [ -z "$answered_before" ] && [ -f "$dir/pgbouncer.pid" ]; then
    pid=$(cat "$dir/pgbouncer.pid" 2>/dev/null)
    if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/pgbouncer.ini"; then
      kill -TERM "$pid" 2>/dev/null
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
      echo "test-pgbouncer: stopped the PgBouncer on 127.0.0.1:$port" >&2
    fi
  fi
  [ -z "$made_dir" ] || rm -rf "$made_dir"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

url=$(PGBOUNCER_PORT_FOR_TESTS=$port PGBOUNCER_DIR_FOR_TESTS=$dir "$here/test-pgbouncer.sh" "$direct")
A2SQL_TEST_PGBOUNCER_URL=$url "$@"
