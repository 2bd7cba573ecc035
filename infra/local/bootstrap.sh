#!/usr/bin/env bash
# Prepare this checkout to run: a virtual environment in .venv with tierq and its packages.
# Idempotent and quick when nothing changed. Usage: infra/local/bootstrap.sh [extras]
#   extras: a comma-separated list of pyproject extras (default: dev, which includes cli,
#   client, local and aws). Plain `tierq` is only the Lambda runtime's packages; see
#   pyproject.toml for what each extra adds.
# Servers are not started here: tierq starts what it needs (see tierq.local.services).
set -euo pipefail
cd "$(dirname "$0")/../.."
extras="${1:-dev}"

say() { printf '[bootstrap] %s\n' "$*" >&2; }

pick_python() {
  for candidate in "${TIERQ_PYTHON:-}" python3.11 python3.12 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

if [ ! -x .venv/bin/python ]; then
  python="$(pick_python)" || {
    say "Python >= 3.11 is required (set TIERQ_PYTHON to its path)"; exit 1; }
  if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "installing python3-venv"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null
    fi
  fi
  say "creating .venv with $("$python" --version)"
  "$python" -m venv .venv
fi

# The stamp holds the pyproject.toml digest and the extras installed with it: a run that
# asks for extras already installed (e.g. demo.sh's cli after test.sh's dev) installs nothing.
stamp=".venv/.tierq-installed"
digest="$(sha256sum pyproject.toml | cut -c1-16)"
installed=""
if [ -f "$stamp" ]; then
  read -r stamp_digest stamp_extras < "$stamp" || true
  [ "${stamp_digest:-}" = "$digest" ] && installed="${stamp_extras:-}"
fi
# dev includes these (pyproject.toml: "tierq[cli,client,local,aws]")
case ",${installed}," in *",dev,"*) installed="${installed},cli,client,local,aws" ;; esac
missing=""
for extra in ${extras//,/ }; do
  case ",${installed}," in *",${extra},"*) ;; *) missing="${missing:+$missing,}${extra}" ;; esac
done
if [ ! -f "$stamp" ] || [ -z "$installed" ] || [ -n "$missing" ]; then
  say "installing tierq and its packages (extras: ${extras}); this takes a minute the first time"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -e ".[${extras}]" 2>&1 | grep -v -e '^WARNING: Location' -e 'is ignored' >&2 || true
  .venv/bin/python -c 'import tierq' || { say "installation failed"; exit 1; }
  echo "$digest ${installed:+$installed,}${extras}" > "$stamp"
fi
