"""The `dispatcher` function (EventBridge Scheduler once a minute, and woken by a task of a
queue with a consumer becoming ready while no dispatcher runs): claims batches of those
queues and invokes their consumer functions with SQS-shaped events until nothing is ready
for a few seconds or its minute is over, then waits for the invocations it started."""

from tierq.aws.scheduled.jobs import scheduled_handler

lambda_handler = scheduled_handler("dispatcher")
