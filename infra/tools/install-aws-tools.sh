#!/usr/bin/env bash
# Create (or reuse) the AWS tooling venv at <repo>/.local/tools-venv with pinned
# aws-sam-cli and cfn-lint. Kept apart from the project venv on purpose: both tools pin
# many packages (boto3, pydantic, jsonschema, ...) that would fight the project's own pins.
#
# Idempotent and fast when already installed: a stamp file records the pinned versions;
# when it matches and both executables run, the script exits at once.
#
# Usage: bash infra/tools/install-aws-tools.sh     (from anywhere)
# Env:   TIERQ_TOOLS_PYTHON  interpreter to build the venv with (default: python3.11, else python3)
set -euo pipefail

SAM_VERSION="1.170.0"
CFN_LINT_VERSION="1.58.0"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${repo_root}/.local/tools-venv"
stamp="${venv}/.tierq-tools-stamp"
want="aws-sam-cli==${SAM_VERSION} cfn-lint==${CFN_LINT_VERSION}"

if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]] \
   && "${venv}/bin/sam" --version >/dev/null 2>&1 \
   && "${venv}/bin/cfn-lint" --version >/dev/null 2>&1; then
  echo "tools-venv up to date: ${want}"
  exit 0
fi

py="${TIERQ_TOOLS_PYTHON:-}"
if [[ -z "${py}" ]]; then
  if command -v python3.11 >/dev/null 2>&1; then py=python3.11; else py=python3; fi
fi

mkdir -p "${repo_root}/.local"
if [[ ! -x "${venv}/bin/python" ]]; then
  "${py}" -m venv "${venv}"
fi
"${venv}/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
# shellcheck disable=SC2086
"${venv}/bin/python" -m pip install --quiet --disable-pip-version-check ${want}
"${venv}/bin/sam" --version
"${venv}/bin/cfn-lint" --version
echo "${want}" > "${stamp}"
