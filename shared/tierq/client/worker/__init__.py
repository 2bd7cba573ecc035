"""Workers: claim tasks over HTTP, run a handler on threads, heartbeat, ack or nack, and
stop cleanly on SIGTERM. See :class:`tierq.client.worker.Worker`."""

from tierq.client.worker.errors import PermanentError, RetryableError
from tierq.client.worker.loading import load_handler
from tierq.client.worker.worker import Handler, Worker, WorkerStats

__all__ = ["Handler", "PermanentError", "RetryableError", "Worker", "WorkerStats",
           "load_handler"]
