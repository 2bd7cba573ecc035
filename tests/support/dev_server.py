"""``tierq dev --no-services`` as a subprocess over a test session's PostgreSQL and Valkey
(the e2e fixtures, the client's local API and the tests that start their own stack).

The scheduled functions run with short intervals (the ``TIERQ_*_EVERY`` values in
``TICKS``), each invocation lasting about ``TICK_MAX_SECONDS``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tierq.local.gateway.child import GatewayChild, start_gateway_child, tierq_command

REPO = Path(__file__).resolve().parents[2]
TICKS = {
    "TIERQ_COLD_TO_WARM_EVERY": "0.5",
    "TIERQ_DELAYED_EVERY": "0.2",
    "TIERQ_REAPER_EVERY": "0.5",
    "TIERQ_CRON_EVERY": "0.5",
}
TICK_MAX_SECONDS = "3"
SCHEDULE_PERIOD = "3"

DevServer = GatewayChild  # the name these tests know it by

__all__ = ["REPO", "DevServer", "start_dev_server", "tierq_command"]


def start_dev_server(database_url: str, valkey_url: str, log_path: Path, *,
                     extra_env: Mapping[str, str] | None = None,
                     args: tuple[str, ...] = ()) -> DevServer:
    env = {**os.environ, "DATABASE_URL": database_url, "VALKEY_URL": valkey_url,
           "TIERQ_TICK_MAX_SECONDS": TICK_MAX_SECONDS, **TICKS, **(extra_env or {})}
    env.pop("DB_SECRET_ARN", None)
    return start_gateway_child(env, log_path, cwd=REPO,
                               args=("--schedule-period", SCHEDULE_PERIOD, *args))
