"""The `reaper` function (EventBridge Scheduler, once a minute): every TIERQ_REAPER_EVERY
seconds (default 5) expires leases, re-pushes warm tasks Valkey lost and purges rows past
retention; emits the per-queue gauges (EMF) once a minute."""

from tierq.core.cold_start import initialising

with initialising():
    from tierq.aws.scheduled.jobs import scheduled_handler

    lambda_handler = scheduled_handler("reaper")
