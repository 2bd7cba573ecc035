#!/usr/bin/env bash
# The test suite. Installs what it needs (.venv and packages, the AWS template tools, the
# PostgreSQL JDBC driver for Spark, Chromium for the dashboard test); each pytest session
# starts private PostgreSQL and Redis servers (or reuses DATABASE_URL / VALKEY_URL when they
# answer). Extra arguments go to pytest, e.g. `infra/local/test.sh tests/unit -x`.
set -euo pipefail
cd "$(dirname "$0")/../.."
infra/local/bootstrap.sh dev,spark,bench,browser
for setup in infra/tools/install-aws-tools.sh infra/tools/install-test-deps.sh; do
  if [ -x "$setup" ]; then "$setup"; fi
done
exec .venv/bin/python -m pytest "$@"
