"""``Client.wait`` and ``get_task(wait_seconds=...)`` of both clients against the local API
(real HTTP, real stores): answered by the ack, as the task stands after ``timeout``, a
deleted task ``NotFoundError``, and bad arguments refused before anything is sent."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.support.local_api import QueueNames
from tierq.client import Client, InvalidInputError, NotFoundError


def later(seconds: float, call: Any) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), call()), daemon=True)
    thread.start()
    return thread


def test_wait_answers_when_the_task_is_acked(api: Any, api_url: str,
                                             names: QueueNames) -> None:
    queue = names["work"]
    api.enqueue_one(queue, {"n": 1})
    [task] = api.claim(queue)
    with Client(api_url) as other:
        acker = later(0.5, lambda: other.ack(queue, [{"id": task.id,
                                                      "lease_token": task.lease_token,
                                                      "result": {"ok": True}}]))
        started = time.monotonic()
        done = api.wait(queue, task.id, timeout=30)
        acker.join()
    assert done.state == "done" and done.result == {"ok": True}
    assert time.monotonic() - started < 10


def test_wait_answers_the_task_as_it_stands_after_its_timeout(api: Any,
                                                              names: QueueNames) -> None:
    queue = names["work"]
    made = api.enqueue_one(queue, {"n": 1})
    started = time.monotonic()
    task = api.wait(queue, made.id, timeout=1)
    assert task.state == "warm" and 0.9 <= time.monotonic() - started < 5
    assert api.get_task(queue, made.id, wait_seconds=0.3).state == "warm"


def test_a_task_deleted_while_waited_for_is_not_found(api: Any, api_url: str,
                                                      names: QueueNames) -> None:
    queue = names["work"]
    made = api.enqueue_one(queue, {"n": 1})
    with Client(api_url) as other:
        deleter = later(0.5, lambda: other.delete_task(queue, made.id))
        with pytest.raises(NotFoundError):
            api.wait(queue, made.id, timeout=30)
        deleter.join()


@pytest.mark.parametrize("seconds", [0, -1, 21])
def test_a_wait_outside_the_apis_bounds_is_refused_before_sending(api: Any,
                                                                  seconds: float) -> None:
    with pytest.raises(InvalidInputError) as refused:
        api.get_task("q", "0190a000-0000-7000-8000-000000000000", wait_seconds=seconds)
    assert "wait_seconds" in str(refused.value)
    with pytest.raises(InvalidInputError):
        api.wait("q", "0190a000-0000-7000-8000-000000000000", timeout=-1)
