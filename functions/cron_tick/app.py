"""The `cron_tick` function (EventBridge Scheduler, once a minute): every TIERQ_CRON_EVERY
seconds (default 10) within one invocation, keeps each cron schedule's next occurrences
installed as keyed delayed tasks and withdraws the pending occurrences of changed, disabled
or removed schedules (tierq.maintenance.cron_tick)."""

from tierq.core.cold_start import initialising

with initialising():
    from tierq.aws.scheduled.jobs import scheduled_handler

    lambda_handler = scheduled_handler("cron_tick")
