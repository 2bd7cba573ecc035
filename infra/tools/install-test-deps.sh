#!/usr/bin/env bash
# System packages some tests need, installed from Debian when missing (as root):
#   chromium                  the dashboard test drives it headless (playwright, no download)
#   libpostgresql-jdbc-java   the Spark feeder's JDBC source
#   java 17                   PySpark 3.5
# Without root or apt, prints what is missing; the tests that need it skip with a reason.
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[test-deps] installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null 2>&1
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  }
else
  echo "[test-deps] missing (tests needing them will skip): ${missing[*]}" >&2
fi
