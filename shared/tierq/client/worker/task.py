"""The task a worker's handler gets: the claimed task, and a way to tell how far it got."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import PrivateAttr

from tierq.models.leases import MAX_PROGRESS_BYTES, ClaimedTask, progress_size


class WorkerTask(ClaimedTask):
    """A claimed task as :class:`~tierq.client.worker.Worker` and
    :class:`~tierq.client.worker.AsyncWorker` hand it to their handler: every field of
    :class:`~tierq.models.leases.ClaimedTask`, and :meth:`set_progress`."""

    _progress_to: Callable[[Any], None] | None = PrivateAttr(default=None)

    @classmethod
    def of(cls, task: ClaimedTask, progress_to: Callable[[Any], None]) -> WorkerTask:
        """``task`` as its handler gets it; ``progress_to`` takes what it reports."""
        made = cls.model_construct(_fields_set=set(task.model_fields_set), **dict(task))
        made._progress_to = progress_to
        return made

    def set_progress(self, value: Any) -> None:
        """Tell how far the task got: any JSON value, at most 4 KiB encoded. It does not
        block (a thread's handler and a coroutine alike call it as it is): the worker sends
        the last value set with the lease's next heartbeat, within about a second, and the
        task's view and the running leases show it with when it came; the task's row keeps
        the last one once the attempt ends. ``ValueError`` for a value that is not JSON or
        is larger."""
        try:
            size = progress_size(value)
        except TypeError as exc:
            raise ValueError(f"progress is not JSON: {exc}") from None
        if size > MAX_PROGRESS_BYTES:
            raise ValueError(f"progress is {size} bytes encoded as JSON, at most "
                             f"{MAX_PROGRESS_BYTES}")
        if self._progress_to is not None:
            self._progress_to(value)


__all__ = ["WorkerTask"]
