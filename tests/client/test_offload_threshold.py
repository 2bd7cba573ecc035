"""The client's offload threshold (``offload_over``) against the local API's inline limit
(``TIERQ_MAX_PAYLOAD_BYTES``, 256 KiB by default): a payload the API refuses as too large
inline raises an error that says ``offload_over`` lowers the threshold; other refusals are
as the API sends them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.local_api import QueueNames
from tierq.client import InvalidInputError, NotFoundError
from tierq.client.errors import ApiError, PayloadTooLargeError
from tierq.core.pointers import INLINE_LIMIT

OVER = {"blob": "x" * (INLINE_LIMIT + 1024)}  # over the API's inline limit


@pytest.mark.parametrize("offload_over", [None, 1024 * 1024])
def test_a_payload_refused_as_too_large_inline_names_offload_over(
        api: Any, api_url: str, client_class: Callable[..., Any], names: QueueNames,
        offload_over: int | None) -> None:
    queue = names["inline"]
    with client_class(api_url, offload_over=offload_over) as client:
        with pytest.raises(PayloadTooLargeError) as enqueued:
            client.enqueue(queue, [{"payload": 1}, {"payload": OVER}])
        with pytest.raises(PayloadTooLargeError) as flowed:
            client.flow([{"queue": queue, "ref": "a", "payload": OVER}])
    for caught in (enqueued, flowed):
        text = str(caught.value)
        assert "tasks[1].payload" in text or "tasks[0]" in text
        assert f"offload_over={offload_over}" in text, text
        assert "the limit is 262144" in text  # the API's own message, kept
    if offload_over is not None:
        assert "give a lower offload_over" in str(enqueued.value)
    with pytest.raises(NotFoundError):  # nothing written
        api.get_queue(queue)


def test_a_task_no_request_can_carry_names_offload_over_too(
        api_url: str, client_class: Callable[..., Any], names: QueueNames) -> None:
    """Refused by the client itself (nothing sent): more than a Lambda request carries."""
    with client_class(api_url, offload_over=None) as client, \
            pytest.raises(ApiError, match="offload_over=None") as caught:
        client.enqueue_one(names["huge"], "y" * (7 * 1024 * 1024))
    assert (caught.value.status, caught.value.details[0]["field"]) == (413, "tasks[0]")


def test_other_refusals_carry_no_hint(api: Any, names: QueueNames) -> None:
    with pytest.raises(InvalidInputError) as caught:
        api.enqueue(names["bad"], [{"payload": "\u0000"}])
    assert "offload_over" not in str(caught.value)
