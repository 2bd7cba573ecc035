"""``tierq queue set`` / ``tierq queue show``: limits on claims set, cleared and shown with
their use, against the local API; bad values refused before anything is sent (exit 2)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result
from typer.testing import CliRunner

from tests.support.local_api import QueueNames
from tierq.cli import app
from tierq.client import Client

Tierq = Callable[..., Result]


@pytest.fixture
def tierq(api_url: str) -> Tierq:
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(app, [*args, "--url", api_url], catch_exceptions=False)

    return run


def test_set_show_and_clear_limits(tierq: Tierq, api: Client, names: QueueNames) -> None:
    queue = names["limits"]
    result = tierq("queue", "set", queue, "--max-leased", "5", "--rate", "20:5",
                   "--tenant-max-leased", "2", "--tenant-rate", "0.5:2", "--json")
    assert result.exit_code == 0, result.output
    settings = json.loads(result.stdout)["settings"]
    assert settings["max_leased"] == 5
    assert settings["rate"] == {"per_second": 20.0, "burst": 5}
    assert settings["tenant_max_leased"] == 2
    assert settings["tenant_rate"] == {"per_second": 0.5, "burst": 2}

    api.enqueue(queue, [{"payload": i} for i in range(3)])
    assert len(api.claim(queue, max=3)) == 2  # the tenant's limits allow 2
    shown = tierq("queue", "show", queue)
    assert shown.exit_code == 0, shown.output
    lines = {line.split("│")[1].strip(): line for line in shown.stdout.splitlines()
             if line.count("│") >= 3}
    assert "5" in lines["max_leased"] and lines["max_leased"].split("│")[3].strip() == "2"
    assert "20/s, burst 5" in lines["rate"]
    assert "busiest tenant 2" in lines["tenant_max_leased"]

    cleared = tierq("queue", "set", queue, "--rate", "none", "--json")
    assert cleared.exit_code == 0, cleared.output
    after = json.loads(cleared.stdout)["settings"]
    assert after["rate"] is None and after["max_leased"] == 5


def test_set_and_show_group_max_leased(tierq: Tierq, api: Client, names: QueueNames) -> None:
    queue = names["limits"]
    result = tierq("queue", "set", queue, "--group-max-leased", "3", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["settings"]["group_max_leased"] == 3
    shown = tierq("queue", "show", queue)
    lines = {line.split("│")[1].strip(): line for line in shown.stdout.splitlines()
             if line.count("│") >= 3}
    assert lines["group_max_leased"].split("│")[2].strip() == "3"
    refused = tierq("queue", "set", queue, "--group-max-leased", "1001")
    assert refused.exit_code != 0 and "group_max_leased" in refused.output
    restored = tierq("queue", "set", queue, "--group-max-leased", "none", "--json")
    assert json.loads(restored.stdout)["settings"]["group_max_leased"] == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--max-leased", "0"], "--max-leased"),
    (["--max-leased", "many"], "--max-leased"),
    (["--rate", "fast"], "--rate"),
    (["--rate", "0"], "--rate"),
    (["--tenant-rate", "5:0"], "--tenant-rate"),
    ([], "nothing to change"),
])
def test_bad_values_are_refused_before_sending(tierq: Tierq, api: Client, names: QueueNames,
                                               args: list[str], message: str) -> None:
    queue = names["limits"]
    result = tierq("queue", "set", queue, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert queue not in [q.queue for q in api.list_queues()]


def test_show_of_a_tenant_view_lists_what_workers_read() -> None:
    """With a tenant's token the API answers a tenant view: `queue show` prints its settings
    and counts (the CLI has no way to send the local gateway's claims header, so the table is
    rendered here from the view the client returns)."""
    from rich.console import Console

    from tierq.cli.queues import tenant_table
    from tierq.models import TenantQueueView

    view = TenantQueueView.model_validate({
        "view": "tenant", "queue": "jobs", "tenant": "acme", "mode": "cold",
        "settings": {"lease_seconds": 42, "max_attempts": 3, "paused": True,
                     "backoff": {"kind": "fixed", "base_seconds": 5, "cap_seconds": 5,
                                 "jitter": 0}},
        "counts": {"warm": 1, "cold": 2, "delayed": 3, "leased": 4, "dead": 5}})
    console = Console(width=120, record=True)
    console.print(tenant_table(view))
    rows = {line.split("│")[1].strip(): line for line in console.export_text().splitlines()
            if line.count("│") >= 3}
    assert set(rows) >= {"paused", "lease_seconds", "max_attempts", "backoff", "ready"}
    assert not {"max_leased", "rate", "consumer", "warm_max"} & set(rows)
    assert "42" in rows["lease_seconds"] and "4 leased" in rows["lease_seconds"]
    assert "yes" in rows["paused"] and "5 dead" in rows["max_attempts"]
    assert "fixed, 5s to 5s" in rows["backoff"] and "1 warm, 2 cold (cold)" in rows["ready"]
