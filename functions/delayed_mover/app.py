"""The `delayed_mover` function (EventBridge Scheduler, once a minute): makes due delayed
tasks ready every TIERQ_DELAYED_EVERY seconds (default 1) within one invocation."""

from tierq.core.cold_start import initialising

with initialising():
    from tierq.aws.scheduled.jobs import scheduled_handler

    lambda_handler = scheduled_handler("delayed_mover")
