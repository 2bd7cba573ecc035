"""The `dispatcher` function: claims batches of the queues with a consumer and invokes their
consumer functions with SQS-shaped events.

EventBridge Scheduler starts it once a minute, and a task of such a queue becoming ready
while no dispatcher runs wakes it. It runs until nothing is ready for a few seconds or its
minute is over, then waits for the invocations it started."""

from tierq.core.cold_start import initialising

with initialising():
    from tierq.aws.scheduled.jobs import scheduled_handler

    lambda_handler = scheduled_handler("dispatcher")
