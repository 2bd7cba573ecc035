#!/usr/bin/env bash
# The main job: an end-to-end demo on a local stack. Installs what it needs, reuses
# DATABASE_URL / VALKEY_URL when they answer, otherwise starts private servers and stops them
# afterwards. Extra arguments go to `tierq demo` (see `tierq demo --help`).
set -euo pipefail
cd "$(dirname "$0")/../.."
infra/local/bootstrap.sh cli
exec .venv/bin/tierq demo "$@"
