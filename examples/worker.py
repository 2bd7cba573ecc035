"""An example worker: resize "images" (pretend), with the three outcomes a handler has.

Run it against a local stack (`tierq dev` in another terminal):

    tierq enqueue images '{"url": "https://example.com/cat.png", "width": 320}'
    tierq worker images examples.worker:resize --concurrency 8

or from Python: ``python examples/worker.py`` (same thing, TIERQ_URL or the local default).
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from tierq.client import Client
from tierq.client.worker import PermanentError, RetryableError, Worker
from tierq.models import ClaimedTask

log = logging.getLogger("examples.worker")


def resize(task: ClaimedTask) -> dict[str, Any]:
    """Return a result (acked and kept with the task), or raise:

    * PermanentError: the task can never succeed -> dead letters now (replay it later);
    * RetryableError: try again later (here in 5 s; default: the queue's backoff);
    * any other exception: retried with the queue's backoff, dead after max_attempts.
    """
    payload = task.payload if isinstance(task.payload, dict) else {}
    url, width = payload.get("url"), payload.get("width")
    if not isinstance(url, str) or not isinstance(width, int) or width <= 0:
        raise PermanentError(f"need a url and a positive integer width, got {payload!r}")
    if random.random() < 0.1:  # a flaky dependency
        raise RetryableError("image service busy", retry_in_seconds=5)
    time.sleep(0.05)  # the work
    log.info("resized %s to %dpx (attempt %d)", url, width, task.attempt)
    return {"url": url, "width": width, "thumbnail": f"{url}?w={width}"}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with Client.from_env() as api:
        stats = Worker(api, "images", resize, concurrency=8).run()  # until SIGTERM / Ctrl-C
    print(stats.as_dict())
