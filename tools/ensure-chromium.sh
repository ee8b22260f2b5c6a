#!/usr/bin/env bash
# Make sure Debian's chromium is there for the browser tests (tests/ui), which drive
# it with Playwright: Playwright's own browser download (`playwright install`)
# needs a host this project's machines cannot reach. Installs it with apt-get
# when it is missing, only under CI=true or as root (a developer who is neither
# installs it themselves: the tests skip, saying why, outside CI). Never fails:
# when chromium cannot be had, the browser tests say so (and fail under CI=true).
set -uo pipefail

command -v chromium >/dev/null 2>&1 && exit 0
ci=$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')
case "$ci" in 1|true|yes) ;; *) [ "$(id -u)" = 0 ] || {
  echo "ensure-chromium: chromium not found; the browser tests will skip (apt-get install chromium)" >&2
  exit 0
}; esac
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: chromium not found and no apt-get to install it" >&2
  exit 0
fi
echo "ensure-chromium: installing Debian's chromium" >&2
{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >&2 \
  || echo "ensure-chromium: apt-get could not install chromium" >&2
exit 0
