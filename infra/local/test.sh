#!/usr/bin/env bash
# The test suite. Installs what it needs (.venv and packages, the AWS template tools, the
# PostgreSQL JDBC driver for Spark, Chromium for the dashboard test); each pytest session
# starts private PostgreSQL and Redis servers (or reuses DATABASE_URL / VALKEY_URL when they
# answer). ruff and mypy run first, on the whole code; extra arguments go to pytest, e.g.
# `infra/local/test.sh tests/unit -x`.
set -euo pipefail
cd "$(dirname "$0")/../.."
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
exec .venv/bin/python -m pytest "$@"
