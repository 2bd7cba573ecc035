"""The `cron_tick` function (EventBridge Scheduler, once a minute): every TIERQ_CRON_EVERY
seconds (default 10) within one invocation, keeps each cron schedule's next occurrences
installed as keyed delayed tasks and withdraws the pending occurrences of changed, disabled
or removed schedules (tierq.maintenance.cron_tick)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tierq.api.runtime import engine, logger, tracer
from tierq.maintenance.cron_tick import CronTickSummary
from tierq.scheduled import run_ticks


def cron_tick() -> CronTickSummary:
    summary = engine().run_cron_tick()
    if summary.failed:
        logger.warning("cron tick: some schedules failed", extra={"failed": summary.failed})
    return summary


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = run_ticks("cron_tick", cron_tick, every=engine().settings.cron_every,
                       event=event, context=context)
    return report.as_dict()
