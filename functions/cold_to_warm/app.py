"""The `cold_to_warm` function (EventBridge Scheduler, once a minute): promotes cold tasks to
the warm tier every TIERQ_COLD_TO_WARM_EVERY seconds (default 5) within one invocation."""

from tierq.core.cold_start import initialising

with initialising():
    from tierq.aws.scheduled.jobs import scheduled_handler

    lambda_handler = scheduled_handler("cold_to_warm")
