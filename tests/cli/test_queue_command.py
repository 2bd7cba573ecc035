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
