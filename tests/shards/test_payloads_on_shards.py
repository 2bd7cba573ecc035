"""Big payloads over shards: an upload's key is recorded on the shard of its (queue,
tenant) pair's home, where that pair's enqueues go; a pointer belongs to that shard, and
another shard refuses it (422), nothing written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.shards.conftest import ShardedFactory
from tierq.dal.payload_store import LocalPayloadStore, use_payload_store
from tierq.errors import InvalidInput
from tierq.logic import payloads


@pytest.fixture
def local_store(tmp_path: Path) -> Iterator[LocalPayloadStore]:
    store = LocalPayloadStore(tmp_path, lambda: "http://127.0.0.1:1")
    use_payload_store(store)
    try:
        yield store
    finally:
        use_payload_store(None)


def test_a_pointer_belongs_to_the_shard_of_its_upload(
        make_sharded: ShardedFactory, local_store: LocalPayloadStore) -> None:
    tq = make_sharded()
    homes: dict[str, str] = {}
    for i in range(40):  # two queues of one tenant homed on different shards
        queue = f"q{i}"
        homes.setdefault(str(tq.homes.home_of(queue, "acme", create=True)), queue)
        if len(homes) > 1:
            break
    assert len(homes) > 1
    here, there = list(homes.values())[:2]
    home = tq.engine_of(here, "acme")
    assert home is not None
    upload = payloads.new_upload(home.ctx, "acme", 3)  # as the upload route does
    local_store.write(upload.pointer.key, b"[1]")
    pointer = upload.pointer.payload()
    [made] = tq.enqueue(here, [{"payload": pointer}], tenant="acme")
    assert made.outcome == "created"
    with pytest.raises(InvalidInput, match="is not known here"):
        tq.enqueue(there, [{"payload": pointer}], tenant="acme")
    counts = tq.get_queue(there).counts
    assert counts.warm + counts.cold + counts.delayed == 0
