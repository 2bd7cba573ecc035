"""``tierq flow FILE.json`` and ``Client.flow`` against the local API: a flow is created in
one request, its waiting task released once its parent is acked, with the parent's result in
its claim; bad files exit 2 sending nothing, a cycle is refused by the API (exit 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_commands import Tierq, json_of, nothing_in, tierq  # noqa: F401
from tests.support.local_api import QueueNames
from tierq.client import Client
from tierq.client.errors import InvalidInputError


def test_a_flow_file_is_created_and_its_child_waits_for_its_parent(
        tierq: Tierq, api: Client, names: QueueNames, tmp_path: Path) -> None:  # noqa: F811
    queue = names["flow"]
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps({"tenant": "acme", "tasks": [
        {"ref": "fetch", "queue": queue, "payload": {"url": "u"}},
        {"ref": "report", "queue": queue, "payload": 2, "after": ["fetch"]},
    ]}))
    result = tierq("flow", str(flow), "--json")
    assert result.exit_code == 0, result.output
    tasks = json_of(result)["tasks"]
    assert (tasks["fetch"]["state"], tasks["report"]["state"]) == ("warm", "waiting")
    [fetch] = api.claim(queue, tenant="acme")
    assert str(fetch.id) == tasks["fetch"]["id"]
    api.ack(queue, [{"id": fetch.id, "lease_token": fetch.lease_token, "result": "page"}])
    [report] = api.claim(queue, tenant="acme")
    assert str(report.id) == tasks["report"]["id"]
    assert [(str(p.id), p.result) for p in report.parents or []] == [
        (tasks["fetch"]["id"], "page")]


def test_client_flow_names_the_field_of_a_cycle(api: Client, names: QueueNames) -> None:
    queue = names["cycle"]
    with pytest.raises(InvalidInputError) as caught:
        api.flow([{"ref": "a", "queue": queue, "payload": 0, "after": ["b"]},
                  {"ref": "b", "queue": queue, "payload": 0, "after": ["a"]}])
    assert caught.value.status == 422
    assert caught.value.details[0]["field"] == "tasks[1].after[0]"
    assert nothing_in(api, queue)


def test_bad_flow_files_exit_2_and_a_refused_flow_exits_1(
        tierq: Tierq, names: QueueNames, tmp_path: Path) -> None:  # noqa: F811
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert tierq("flow", str(bad)).exit_code == 2
    bad.write_text(json.dumps({"tasks": [{"ref": "a", "payload": 1}]}))  # no queue
    result = tierq("flow", str(bad))
    assert result.exit_code == 2 and "queue" in result.output
    assert tierq("flow", str(tmp_path / "missing.json")).exit_code == 2
    cycle = tmp_path / "cycle.json"
    cycle.write_text(json.dumps([
        {"ref": "a", "queue": names["c"], "payload": 0, "after": ["a"]}]))
    refused = tierq("flow", str(cycle))
    assert refused.exit_code == 1
    assert "tasks[0].after[0]" in refused.output
