"""Workers: claim tasks over HTTP, run a handler, heartbeat, ack or nack, and stop cleanly on
SIGTERM. :class:`tierq.client.worker.Worker` runs a function on threads over a ``Client``;
:class:`tierq.client.worker.AsyncWorker` a coroutine function on an event loop over an
``AsyncClient``."""

from tierq.client.worker.aio import AsyncHandler, AsyncWorker, is_coroutine_handler
from tierq.client.worker.errors import PermanentError, RetryableError
from tierq.client.worker.loading import load_handler
from tierq.client.worker.task import WorkerTask
from tierq.client.worker.worker import Handler, Worker, WorkerStats

__all__ = ["AsyncHandler", "AsyncWorker", "Handler", "PermanentError", "RetryableError",
           "Worker", "WorkerStats", "WorkerTask", "is_coroutine_handler", "load_handler"]
