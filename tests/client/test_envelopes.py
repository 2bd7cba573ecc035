"""The client reads the server's own response envelopes (tierq.models.envelopes, defined
once) and ignores what it does not know, so a newer server does not break an older client."""

from __future__ import annotations

import uuid

from pydantic import BaseModel

from tests.client.scripted_server import Reply, ScriptedServer
from tierq.aws.http.routes import dlq, queues
from tierq.client import Client, ReplayResult
from tierq.models import envelopes


def test_server_and_client_share_one_definition_of_each_envelope() -> None:
    assert dlq.DeadLetterPage is envelopes.DeadLetterPage
    assert queues.QueueList is envelopes.QueueList
    assert ReplayResult is envelopes.ReplayResult
    for name in ("EnqueueResults", "ClaimResults", "QueueList", "DeadLetterPage",
                 "ReplayResult", "PurgeResult", "DetailedMetrics", "RunningMetrics"):
        model = getattr(envelopes, name)
        assert issubclass(model, BaseModel)
        assert model.model_config.get("extra") == "ignore", name


def test_fields_a_newer_server_adds_are_ignored(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    replayed = str(uuid.uuid4())
    scripted.script(
        Reply(200, {"queues": [], "next": "a", "total": 3, "region": "eu-west-1"}),
        Reply(200, {"replayed": [replayed], "skipped": [], "more": False,
                    "replayed_at": "2030-01-01T00:00:00Z"}),
    )
    with client_class(scripted.url, timeout=5) as api:
        page = api.list_queues_page()
        assert page.queues == [] and page.next == "a"
        result = api.dlq_replay("q", all=True)
        assert [str(i) for i in result.replayed] == [replayed] and result.skipped == []
