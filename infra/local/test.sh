#!/usr/bin/env bash
# The test suite. Installs what it needs (.venv and packages, the AWS template tools, the
# PostgreSQL JDBC driver for Spark, Chromium for the dashboard test); each pytest session
# starts private PostgreSQL and Redis servers (or reuses DATABASE_URL / VALKEY_URL when they
# answer). ruff and mypy run first, on the whole code; extra arguments go to pytest, e.g.
# `infra/local/test.sh tests/unit -x`.
#
# `infra/local/test.sh --fast [pytest arguments]` is the edit loop's tier, under 3 minutes on
# a quiet 2-core machine: the same installation, ruff and mypy, then the folders tests/unit
# and tests/integration (one PostgreSQL server and one Valkey/Redis node, started by the test
# session) less the tests marked slow, spark, e2e or browser. The whole suite (CI: .ci/run)
# adds those and every other folder: cluster (a Redis Cluster), spark, e2e, client, cli,
# worker, local (a local stack), dashboard (Chromium), reliability, bench, handlers,
# maintenance, dispatch, shards, pooled (engines behind a transaction pooler) and template.
# A test of the fast folders that takes more than a few seconds alone is marked slow. `--fast` may stand anywhere; the other arguments
# go to pytest after the selection (`--fast -x`, `--fast -k claim`).
#
# pytest runs in parallel (pytest-xdist): the tests mostly wait on servers, subprocesses and
# clocks, so as many workers as cores, at least 2 and at most 8 (TIERQ_TEST_WORKERS overrides; `-n 0`
# runs in one process). Each worker is a test session with its own servers; work goes out a
# file at a time, in order, the Spark files as one unit (tests/support/parallel.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
FAST_FOLDERS=(tests/unit tests/integration)
FAST_MARKERS="not slow and not spark and not e2e and not browser"
fast=false
pytest_args=()
for arg in "$@"; do
  if [ "$arg" = "--fast" ]; then fast=true; else pytest_args+=("$arg"); fi
done

infra/local/bootstrap.sh dev,spark,bench,browser
for setup in infra/tools/install-aws-tools.sh infra/tools/install-test-deps.sh; do
  if [ -x "$setup" ]; then "$setup"; fi
done

# The code is checked before the behaviour, cheapest first, and the first failure stops the
# run: ruff (lint), then mypy (types; [tool.mypy] in pyproject.toml), then pytest.
check() {
  local name=$1; shift
  echo "test.sh: $name: $*"
  if ! "$@"; then
    echo "test.sh: $name failed (above); the suite did not run" >&2
    exit 1
  fi
}
check ruff .venv/bin/ruff check .
check mypy .venv/bin/mypy
cores="$(nproc)"
workers="${TIERQ_TEST_WORKERS:-$(( cores < 2 ? 2 : cores < 8 ? cores : 8 ))}"
parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
if $fast; then
  exec .venv/bin/python -m pytest "${parallel[@]}" "${FAST_FOLDERS[@]}" -m "$FAST_MARKERS" \
    "${pytest_args[@]}"
fi
exec .venv/bin/python -m pytest "${parallel[@]}" "${pytest_args[@]}"
