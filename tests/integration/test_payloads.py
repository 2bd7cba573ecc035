"""Big payloads on the real stores, moto standing in for S3 alone: a pointer is checked at
enqueue (this deployment's bucket, the task's tenant's prefix; refused otherwise, nothing
written), claimed as it was enqueued, and its object deleted by the reaper once no task
that named it has a row left: at once for a task acked without a result, after its
retention for one kept with its result."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import orjson
import pytest
import requests

from tests.integration.helpers import count_rows
from tierq.config import Settings, SettingsError
from tierq.core.pointers import POINTER_CLASS, Pointer
from tierq.dal.payload_store import S3PayloadStore, use_payload_store
from tierq.errors import Forbidden, InvalidInput, PayloadTooLarge, TooManyRequests
from tierq.logic import payloads
from tierq.maintenance import reaper

BUCKET = "tierq-payloads-test"
DAY = 86_400.0


@pytest.fixture
def s3_store(aws_credentials: None) -> Iterator[S3PayloadStore]:
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    store = S3PayloadStore(BUCKET, "us-east-1")
    use_payload_store(store)
    try:
        yield store
    finally:
        use_payload_store(None)


def _put(tq: Any, store: S3PayloadStore, tenant: str, value: Any) -> list[Any]:
    """An object uploaded as the client does: a key handed out (recorded pending), then
    its bytes written."""
    data = orjson.dumps(value)
    key = payloads.new_upload(tq.ctx, tenant, len(data)).pointer.key
    store.write(key, data)
    return Pointer(BUCKET, key).payload()


def _registered(pg: Any) -> int:
    row = pg.execute("SELECT count(*) FROM tierq_payload_objects").fetchone()
    return int(row[0])


def test_a_pointer_round_trips_and_its_object_goes_when_no_task_needs_it(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore) -> None:
    tq = make_tq()
    kept = _put(tq, s3_store, "acme", {"big": "kept with its result"})
    acked = _put(tq, s3_store, "acme", {"big": "acked without a result"})
    outcomes = tq.enqueue("files", [{"payload": kept, "tenant": "acme"},
                                    {"payload": acked, "tenant": "acme"}])
    assert [o.outcome for o in outcomes] == ["created", "created"]
    assert _registered(pg) == 2
    claimed = {str(t.id): t for t in tq.claim("files", max=2)}
    first, second = (claimed[str(o.id)] for o in outcomes)
    assert first.payload == kept and second.payload == acked  # the claim carries the pointer
    tq.ack("files", [{"id": first.id, "lease_token": first.lease_token, "result": "ok"}])
    tq.ack("files", [second])  # its row deleted

    summary = reaper.run(tq.ctx)
    assert summary.payloads_deleted == 1
    assert not s3_store.exists(acked[1]["s3Key"]) and s3_store.exists(kept[1]["s3Key"])

    tq.ctx.clock.advance(8 * DAY)  # past the default retention (7 days): the row is purged
    summary = reaper.run(tq.ctx)
    assert summary.purged == 1 and summary.payloads_deleted == 1
    assert not s3_store.exists(kept[1]["s3Key"])
    assert _registered(pg) == 0


@pytest.mark.parametrize(("payload", "error", "says"), [
    (Pointer(BUCKET, "tenants/other/x").payload(), Forbidden, "outside tenant 'acme'"),
    # a tuple is a JSON array once serialised: a Python caller's pointer is checked too
    (tuple(Pointer(BUCKET, "tenants/other/x").payload()), Forbidden, "outside tenant 'acme'"),
    (Pointer(BUCKET, "tenants/acme-evil/x").payload(), Forbidden, "outside tenant 'acme'"),
    (Pointer(BUCKET, "tenants/acme").payload(), Forbidden, "outside tenant 'acme'"),
    (Pointer("someone-elses", "tenants/acme/x").payload(), Forbidden, "bucket"),
    ([POINTER_CLASS, {"s3BucketName": BUCKET}], InvalidInput, "s3Key"),
    ([POINTER_CLASS, {"s3BucketName": BUCKET, "s3Key": "tenants/acme/../other/x"}],
     InvalidInput, ".."),
])
def test_a_pointer_outside_the_callers_prefix_is_refused_and_nothing_written(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore, payload: Any,
        error: type[Exception], says: str) -> None:
    tq = make_tq()
    with pytest.raises(error, match=says) as raised:
        tq.enqueue("files", [{"payload": "fine", "tenant": "acme"},
                             {"payload": payload, "tenant": "acme"}])
    assert "tasks[1].payload" in str(raised.value)
    assert count_rows(pg) == 0 and _registered(pg) == 0


def test_without_a_store_a_pointer_is_refused(make_tq: Any, pg: Any) -> None:
    tq = make_tq()
    with pytest.raises(InvalidInput, match="TIERQ_PAYLOAD_BUCKET"):
        tq.enqueue("files", [{"payload": Pointer(BUCKET, "tenants/_/x").payload()}])
    assert count_rows(pg) == 0


def test_presigned_urls_upload_and_download_through_s3(
        make_tq: Any, s3_store: S3PayloadStore) -> None:
    """The URLs over HTTP (moto answers ``requests`` to S3's hosts): the upload URL signs
    the size, the download URL reads the object back; a tenant caller may not fetch
    another's object, and an upload over the limit is refused."""
    tq = make_tq(max_offloaded_payload_bytes=1_000_000)
    data = orjson.dumps({"blob": "x" * 300_000})
    upload = payloads.new_upload(tq.ctx, "acme", len(data))
    assert upload.pointer.key.startswith("tenants/acme/")
    assert "X-Amz-SignedHeaders=content-length%3Bhost" in upload.transfer.url
    put = requests.request(upload.transfer.method, upload.transfer.url, data=data,
                           headers=upload.transfer.headers, timeout=10)
    assert put.status_code == 200, put.text
    transfer, _ = payloads.new_download(tq.ctx, "acme", upload.pointer.payload())
    got = requests.request(transfer.method, transfer.url, timeout=10)
    assert got.status_code == 200 and got.content == data
    assert payloads.new_download(tq.ctx, None, upload.pointer.payload())  # an admin
    with pytest.raises(Forbidden):  # another tenant's caller
        payloads.new_download(tq.ctx, "other", upload.pointer.payload())
    with pytest.raises(PayloadTooLarge):
        payloads.new_upload(tq.ctx, "acme", 1_000_001)


def test_a_consumer_record_gets_its_object_as_its_body(s3_store: S3PayloadStore) -> None:
    from tierq.aws.payloads import PayloadUnavailable, resolve_records

    s3_store.write("tenants/acme/consumed", orjson.dumps({"big": True}))
    pointer = Pointer(BUCKET, "tenants/acme/consumed").payload()
    body = orjson.dumps(pointer).decode()
    event = {"Records": [{"messageId": "1", "body": body, "attributes": {"SenderId": "acme"}},
                         {"messageId": "2", "body": '{"small": 1}',
                          "attributes": {"SenderId": "acme"}}]}
    records = resolve_records(event)
    assert [orjson.loads(r["body"]) for r in records] == [{"big": True}, {"small": 1}]
    stolen = {"Records": [{"messageId": "3", "body": body,
                           "attributes": {"SenderId": "other"}}]}
    with pytest.raises(PayloadUnavailable, match="tenant 'other'"):
        resolve_records(stolen)
    unsigned = {"Records": [{"messageId": "4", "body": body, "attributes": {}}]}
    with pytest.raises(PayloadUnavailable, match=r"no attributes\.SenderId"):
        resolve_records(unsigned)  # no tenant to check the pointer against


def test_a_flows_objects_are_recorded_and_a_schedule_keeps_its_payload_inline(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore) -> None:
    tq = make_tq()
    pointer = _put(tq, s3_store, "_", {"big": "flow"})
    tq.flow({"tasks": [{"queue": "files", "ref": "a", "payload": pointer},
                       {"queue": "files", "ref": "b", "payload": 1, "after": ["a"]}]})
    assert _registered(pg) == 1
    with pytest.raises(InvalidInput, match="kept inline"):
        tq.put_schedule("nightly", {"queue": "files", "every_seconds": 60,
                                    "payload": pointer})
    foreign = Pointer(BUCKET, "tenants/other/x").payload()
    with pytest.raises(Forbidden):
        tq.flow({"tasks": [{"queue": "files", "ref": "a", "payload": foreign}]})


class _Unreachable(S3PayloadStore):
    def delete(self, keys: Any) -> list[str]:
        raise ConnectionError("S3 does not answer")


def test_a_store_that_fails_leaves_its_objects_for_the_next_pass(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore) -> None:
    tq = make_tq()
    pointer = _put(tq, s3_store, "_", {"big": 1})
    [made] = tq.enqueue("files", [{"payload": pointer}])
    tq.ack("files", tq.claim("files", max=1))
    use_payload_store(_Unreachable(BUCKET, client=s3_store.client))
    summary = reaper.run(tq.ctx)  # the pass itself is done
    assert (summary.payloads_deleted, summary.payloads_failed) == (0, 1)
    assert _registered(pg) == 1 and s3_store.exists(pointer[1]["s3Key"])
    use_payload_store(s3_store)
    assert reaper.run(tq.ctx).payloads_deleted == 1
    assert _registered(pg) == 0 and not s3_store.exists(pointer[1]["s3Key"])
    assert made.outcome == "created"


def _tasks(pg: Any) -> int:
    return int(pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()[0])


def test_a_pointer_enqueued_again_keeps_its_object_and_a_deleted_one_is_refused(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore) -> None:
    """One pointer, two tasks (README: upload_payload, then enqueue by hand): the object
    stays while either task has a row; once swept, its key is a tombstone and an enqueue
    naming it is refused (422), nothing written."""
    tq = make_tq()
    pointer = _put(tq, s3_store, "acme", {"big": "shared"})
    key = pointer[1]["s3Key"]
    tq.enqueue("files", [{"payload": pointer, "tenant": "acme"}])
    tq.ack("files", tq.claim("files", max=1))  # the first task's row deleted
    tq.enqueue("files", [{"payload": pointer, "tenant": "acme"}])
    assert reaper.run(tq.ctx).payloads_deleted == 0 and s3_store.exists(key)
    tq.ack("files", tq.claim("files", max=1))
    assert reaper.run(tq.ctx).payloads_deleted == 1 and not s3_store.exists(key)
    with pytest.raises(InvalidInput, match=f"payload object '{key}' was deleted"):
        tq.enqueue("files", [{"payload": pointer, "tenant": "acme"}])
    assert _tasks(pg) == 0
    with pytest.raises(InvalidInput, match="was deleted"):
        tq.flow({"tenant": "acme",
                 "tasks": [{"queue": "files", "ref": "a", "payload": pointer}]})


def _tombstones(pg: Any) -> int:
    row = pg.execute("SELECT count(*) FROM tierq_payload_keys WHERE state = 'deleted'"
                     ).fetchone()
    return int(row[0])


def test_a_deleted_objects_key_is_forgotten_after_its_days(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore) -> None:
    """A deleted object's key is refused as deleted while its tombstone lasts
    (``payload_tombstone_days``), then its row goes and the key is refused as unknown: the
    table keeps the live keys and a bounded tail, whatever the uploads ever made. Only the
    old tombstones go, a slice at a time, live keys between them untouched."""
    tq = make_tq()
    old = [_put(tq, s3_store, "acme", {"n": n}) for n in range(5)]
    tq.enqueue("files", [{"payload": pointer, "tenant": "acme"} for pointer in old])
    tq.ack("files", tq.claim("files", max=5))
    live = _put(tq, s3_store, "acme", {"live": True})
    tq.enqueue("files", [{"payload": live, "tenant": "acme"}])  # its task keeps it
    assert reaper.run(tq.ctx).payloads_deleted == 5 and _tombstones(pg) == 5
    tq.ctx.clock.advance(2 * DAY)
    young = _put(tq, s3_store, "acme", {"young": True})
    tq.enqueue("files", [{"payload": young, "tenant": "acme"}])
    tq.ack("files", [task for task in tq.claim("files", max=2)
                     if task.payload == young])
    assert reaper.run(tq.ctx, payload_tombstone_days=3).payloads_deleted == 1
    assert _tombstones(pg) == 6  # none past 3 days yet
    with pytest.raises(InvalidInput, match="was deleted"):
        tq.enqueue("files", [{"payload": old[0], "tenant": "acme"}])

    tq.ctx.clock.advance(1.5 * DAY)  # the first five are 3.5 days old, the last 1.5
    forgotten = [reaper.run(tq.ctx, payload_tombstone_days=3, payload_slice=2,
                            payload_slices=2).payload_tombstones_forgotten
                 for _ in range(3)]
    assert forgotten == [4, 1, 0] and _tombstones(pg) == 1  # two slices of two a pass at most
    with pytest.raises(InvalidInput, match="is not known here"):
        tq.enqueue("files", [{"payload": old[0], "tenant": "acme"}])
    with pytest.raises(InvalidInput, match="was deleted"):
        tq.enqueue("files", [{"payload": young, "tenant": "acme"}])
    live_key = live[1]["s3Key"]
    assert pg.execute("SELECT state FROM tierq_payload_keys WHERE object_key = %s",
                      (live_key,)).fetchone()[0] == "used" and s3_store.exists(live_key)


def test_a_sweep_during_an_enqueue_never_leaves_a_task_without_its_object(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep runs after the enqueue's insert, before it commits. Either the sweep
    deleted the object first (the enqueue is then refused, nothing written) or it leaves
    the object (the enqueue holds its key); never a task whose object is gone."""
    from tierq.logic import enqueue as enqueue_logic

    tq = make_tq()
    pointer = _put(tq, s3_store, "acme", {"big": "raced"})
    key = pointer[1]["s3Key"]
    tq.enqueue("files", [{"payload": pointer, "tenant": "acme"}])
    tq.ack("files", tq.claim("files", max=1))  # nothing needs the object now
    real_insert = enqueue_logic._insert

    def insert_then_sweep(*args: Any, **kwargs: Any) -> Any:
        out = real_insert(*args, **kwargs)
        payloads.sweep(tq.ctx, 100, 1)  # on connections of its own
        return out

    monkeypatch.setattr(enqueue_logic, "_insert", insert_then_sweep)
    try:
        tq.enqueue("files", [{"payload": pointer, "tenant": "acme"}])
    except InvalidInput as exc:
        assert "was deleted" in str(exc)
    assert _tasks(pg) == 0 or s3_store.exists(key)
    assert _tasks(pg) == 0  # (here the sweep came first: the enqueue was refused)


def test_the_sweep_skips_an_object_an_enqueue_holds(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Once an enqueue has recorded its object (its key's row locked until it commits), a
    sweep leaves that object: the task that commits has it."""
    tq = make_tq()
    pointer = _put(tq, s3_store, "acme", {"big": "held"})
    key = pointer[1]["s3Key"]
    tq.enqueue("files", [{"payload": pointer, "tenant": "acme"}])
    tq.ack("files", tq.claim("files", max=1))
    real_use = payloads.use
    swept: list[payloads.Swept] = []

    def use_then_sweep(*args: Any, **kwargs: Any) -> None:
        real_use(*args, **kwargs)
        swept.append(payloads.sweep(tq.ctx, 100, 1))

    monkeypatch.setattr(payloads, "use", use_then_sweep)
    [made] = tq.enqueue("files", [{"payload": pointer, "tenant": "acme"}])
    assert made.outcome == "created" and swept[0].deleted == 0 and s3_store.exists(key)
    monkeypatch.setattr(payloads, "use", real_use)
    assert reaper.run(tq.ctx).payloads_deleted == 0 and s3_store.exists(key)


def test_a_key_this_shard_never_handed_out_is_refused(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore) -> None:
    """A pointer belongs to the shard whose upload route made it: one under the tenant's
    prefix that this shard's store does not know (another shard's upload, or a made-up
    key) is refused, 422, nothing written."""
    tq = make_tq()
    s3_store.write("tenants/acme/elsewhere", b"1")
    with pytest.raises(InvalidInput, match="is not known here"):
        tq.enqueue("files", [{"payload": Pointer(BUCKET, "tenants/acme/elsewhere").payload(),
                              "tenant": "acme"}])
    assert _tasks(pg) == 0 and _registered(pg) == 0


def test_an_upload_never_enqueued_goes_after_the_grace_and_counts_against_its_tenant(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore) -> None:
    tq = make_tq(max_pending_payloads=2)
    first = _put(tq, s3_store, "acme", {"n": 1})
    used = _put(tq, s3_store, "acme", {"n": 2})
    with pytest.raises(TooManyRequests, match="tenant 'acme' has 2 uploads"):
        payloads.new_upload(tq.ctx, "acme", 10)
    assert payloads.new_upload(tq.ctx, "other", 10)  # another tenant's count
    tq.enqueue("files", [{"payload": used, "tenant": "acme"}])  # no longer pending
    assert payloads.new_upload(tq.ctx, "acme", 10)
    assert reaper.run(tq.ctx).payloads_deleted == 0  # young: the producer may enqueue it
    tq.ctx.clock.advance(DAY + 60)
    summary = reaper.run(tq.ctx)
    assert summary.payloads_deleted == 3  # the pending ones (one never even uploaded)
    assert not s3_store.exists(first[1]["s3Key"]) and s3_store.exists(used[1]["s3Key"])
    with pytest.raises(InvalidInput, match="was deleted"):
        tq.enqueue("files", [{"payload": first, "tenant": "acme"}])


def test_the_pending_grace_must_outlive_an_upload_url() -> None:
    with pytest.raises(SettingsError, match="TIERQ_PAYLOAD_PENDING_SECONDS"):
        Settings(payload_url_seconds=900, payload_pending_seconds=600)


def test_a_fetch_naming_its_task_must_be_that_tasks_object(
        make_tq: Any, s3_store: S3PayloadStore) -> None:
    tq = make_tq()
    pointer = _put(tq, s3_store, "acme", {"big": "mine"})
    other = _put(tq, s3_store, "acme", {"big": "not this task's"})
    [made] = tq.enqueue("files", [{"payload": pointer, "tenant": "acme"}])
    assert payloads.new_download(tq.ctx, None, pointer, str(made.id))  # an admin Worker
    with pytest.raises(Forbidden, match="does not carry"):
        payloads.new_download(tq.ctx, None, other, str(made.id))
    with pytest.raises(Forbidden, match="not one of the caller's"):
        payloads.new_download(tq.ctx, None, Pointer(BUCKET, "loose/x").payload())


def test_a_bulk_loads_pointers_are_checked_and_recorded(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore) -> None:
    from tierq.logic import bulk

    tq = make_tq()
    pointer = _put(tq, s3_store, "acme", {"big": "bulk"})
    foreign = Pointer(BUCKET, "tenants/other/x").payload()
    rows = [(0, "acme", "a", 0, orjson.dumps(pointer).decode(), None),
            (1, "acme", "b", 0, orjson.dumps(foreign).decode(), None)]
    with pytest.raises(Forbidden, match="outside tenant 'acme'"), \
            tq.bulk_load("fed", rows=2, tenants=["acme"]) as load, \
            tq.bulk_writer(load) as writer:
        writer.write(bulk.copy_text(rows), tenants=["acme"])
    assert _tasks(pg) == 0 and _registered(pg) == 0
    with tq.bulk_load("fed", rows=1, tenants=["acme"]) as load, \
            tq.bulk_writer(load) as writer:
        assert writer.write(bulk.copy_text(rows[:1]), tenants=["acme"]) == 1
    assert _registered(pg) == 1


def test_a_replace_records_its_new_object_with_the_live_task(
        make_tq: Any, pg: Any, s3_store: S3PayloadStore) -> None:
    tq = make_tq()
    [made] = tq.enqueue("files", [{"payload": "inline", "key": "k", "tenant": "acme"}])
    pointer = _put(tq, s3_store, "acme", {"big": "replaced in"})
    [again] = tq.enqueue("files", [{"payload": pointer, "key": "k", "tenant": "acme",
                                    "on_conflict": "replace"}])
    assert (again.outcome, again.id) == ("updated", made.id) and _registered(pg) == 1
    assert reaper.run(tq.ctx).payloads_deleted == 0 and s3_store.exists(pointer[1]["s3Key"])
