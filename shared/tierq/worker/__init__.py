"""Workers: claim tasks over HTTP, run a handler on threads, heartbeat, ack or nack, and
stop cleanly on SIGTERM. See :class:`tierq.worker.Worker`."""

from tierq.worker.errors import PermanentError, RetryableError
from tierq.worker.loading import load_handler
from tierq.worker.worker import Handler, Worker, WorkerStats

__all__ = ["Handler", "PermanentError", "RetryableError", "Worker", "WorkerStats",
           "load_handler"]
