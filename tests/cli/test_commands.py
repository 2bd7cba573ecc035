"""The ``tierq`` commands that talk to the HTTP API, against the local API: each command's
success and its error exit codes (1: the API refused or could not be reached; 2: bad usage
or input, refused before sending anything)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from tests.support.local_api import QueueNames
from tierq.cli import app
from tierq.client import Client, NotFoundError
from tierq.local.services.process import free_port

REPO = Path(__file__).resolve().parents[2]


Tierq = Callable[..., Result]


@pytest.fixture
def tierq(api_url: str) -> Tierq:
    """Run a command in-process; commands that talk to the API get ``--url`` of the local
    API unless ``url`` says otherwise."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None,
            url: str | None = api_url) -> Result:
        extra = ["--url", url] if url and "--" not in args else []
        return runner.invoke(app, [*args, *extra], input=input, env=env,
                             catch_exceptions=False)

    return run


def dead_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def json_of(result: Result) -> Any:
    return json.loads(result.stdout)


def nothing_in(api: Client, queue: str) -> bool:
    try:
        api.get_queue(queue)
    except NotFoundError:
        return True
    return False


# -- enqueue ---------------------------------------------------------------------------


def test_enqueue_arguments(tierq: Tierq, api: Client, names: QueueNames) -> None:
    queue = names["emails"]
    result = tierq("enqueue", queue, '{"to": "a@example.com"}', '"plain text"', "--priority",
                   "3", "--tenant", "acme", "--json")
    assert result.exit_code == 0, result.output
    outcomes = json_of(result)
    assert [(o["outcome"], o["state"], o["tenant"]) for o in outcomes] == [
        ("created", "warm", "acme")] * 2
    task = api.get_task(queue, outcomes[1]["id"])
    assert (task.payload, task.priority) == ("plain text", 3)
    keyed = tierq("enqueue", queue, "1", "--key", "k-1", "--delay", "60")
    assert keyed.exit_code == 0, keyed.output
    assert "delayed" in keyed.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["not json"], "payload #1 is not valid JSON"),
    (["{}", "--priority", "12"], "priority"),
    (["1", "2", "--key", "k"], "--key names one task"),
    ([], "give PAYLOADS or --file"),
    (["1", "--delay", "1", "--run-at", "2030-01-01"], "delay_seconds or run_at"),
])
def test_enqueue_bad_input_exits_2_and_writes_nothing(tierq: Tierq, api: Client, names: QueueNames,
                                                      args: list[str], message: str) -> None:
    result = tierq("enqueue", names["emails"], *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert nothing_in(api, names["emails"])


def test_enqueue_refused_by_the_api_exits_1(tierq: Tierq) -> None:
    result = tierq("enqueue", "not a valid queue name!", "1")
    assert result.exit_code == 1
    assert "invalid_input" in result.stderr and "queue" in result.stderr


def test_enqueue_without_the_api_exits_1(tierq: Tierq) -> None:
    result = tierq("enqueue", "emails", "1", url=dead_port_url())
    assert result.exit_code == 1
    assert "cannot reach the tierq API" in result.stderr


def test_enqueue_a_json_lines_file(tierq: Tierq, api: Client, names: QueueNames,
                                   tmp_path: Path) -> None:
    queue = names["bulk"]
    lines = [json.dumps({"payload": {"n": i}, "key": f"k-{i}"}) for i in range(1200)]
    lines.insert(10, "")  # blank lines are skipped
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = tierq("enqueue", queue, "--file", str(path), "--priority", "2")
    assert result.exit_code == 0, result.output
    assert "1,200 task(s)" in result.stdout
    counts = api.get_queue(queue).counts
    assert counts.warm + counts.cold == 1200
    again = tierq("enqueue", queue, "--file", str(path), "--json")
    assert again.exit_code == 0
    assert {o["outcome"] for o in json_of(again)} == {"ignored"}  # the keys are taken
    task = api.get_task(queue, json_of(again)[0]["id"])
    assert task.priority == 2


def test_enqueue_payload_lines_from_stdin(tierq: Tierq, api: Client, names: QueueNames) -> None:
    queue = names["stdin"]
    result = tierq("enqueue", queue, "--file", "-", "--payloads", "--json",
                   input='{"a": 1}\n[1, 2]\n"text"\n')
    assert result.exit_code == 0, result.output
    payloads = [api.get_task(queue, o["id"]).payload for o in json_of(result)]
    assert payloads == [{"a": 1}, [1, 2], "text"]


def test_a_file_with_bad_lines_enqueues_nothing(tierq: Tierq, api: Client, names: QueueNames,
                                                tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"payload": 1}\n{"payload": 2}\n{"payload": 3, "priority": 42}\n'
                    '{"payload": 4}\n{not json\n[1, 2]\n')
    result = tierq("enqueue", names["bulk"], "--file", str(path))
    assert result.exit_code == 2
    assert "line 3: priority" in result.stderr
    assert "line 5: not valid JSON" in result.stderr
    assert "line 6: expected a task object" in result.stderr
    assert nothing_in(api, names["bulk"])
    missing = tierq("enqueue", names["bulk"], "--file", str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 2 and "no such file" in missing.stderr


# -- claim, ack, nack, release -----------------------------------------------------------


def test_claim_ack_and_nack(tierq: Tierq, api: Client, names: QueueNames) -> None:
    queue = names["jobs"]
    empty = tierq("claim", queue)
    assert empty.exit_code == 0 and "no task ready" in empty.stderr
    api.enqueue(queue, [{"payload": {"n": i}} for i in range(3)])
    result = tierq("claim", queue, "--max", "2", "--worker", "me", "--json")
    assert result.exit_code == 0, result.output
    first, second = json_of(result)
    table = tierq("claim", queue)
    [third] = [t for t in api.running(queue) if str(t.id) not in (first["id"], second["id"])]
    assert table.exit_code == 0 and str(third.id) in table.stdout

    api.enqueue(queue, [{"payload": {"n": 3}}])
    acked = tierq("ack", queue, first["id"], first["lease_token"], "--result", '{"ok": true}',
                  "--claim", "2", "--json")
    assert acked.exit_code == 0, acked.output
    assert api.get_task(queue, first["id"]).result == {"ok": True}
    assert [t["payload"] for t in json_of(acked)] == [{"n": 3}]  # (the ack claimed it)
    again = tierq("ack", queue, first["id"], first["lease_token"])
    assert again.exit_code == 1 and "not_owner" in again.stderr

    nacked = tierq("nack", queue, second["id"], second["lease_token"], "--error", "broken",
                   "--dead")
    assert nacked.exit_code == 0 and "dead-lettered" in nacked.stderr
    dead = api.get_task(queue, second["id"])
    assert (dead.state, dead.last_error) == ("dead", "broken")
    wrong = tierq("nack", queue, second["id"], "_~bad~1")
    assert wrong.exit_code == 1


def test_release_gives_a_claimed_task_back(tierq: Tierq, api: Client,
                                           names: QueueNames) -> None:
    queue = names["jobs"]
    api.enqueue(queue, [{"payload": {"n": i}} for i in range(2)])
    [task] = json_of(tierq("claim", queue, "--json"))
    released = tierq("release", queue, task["id"], task["lease_token"])
    assert released.exit_code == 0, released.output
    assert "back in its place in line" in released.stderr
    [again] = api.claim(queue)
    assert (str(again.id), again.attempt) == (task["id"], 1)
    twice = tierq("release", queue, task["id"], task["lease_token"])
    assert twice.exit_code == 1 and "not_owner" in twice.stderr


def test_wait_prints_the_task_once_it_ends(tierq: Tierq, api: Client,
                                           names: QueueNames) -> None:
    queue = names["jobs"]
    made = api.enqueue_one(queue, {"n": 1})
    still = tierq("wait", queue, str(made.id), "--timeout", "0.5")
    assert still.exit_code == 1 and "did not end within 0.5 s" in still.stderr
    assert "warm" in still.stderr
    [task] = api.claim(queue)
    api.ack(queue, [{"id": task.id, "lease_token": task.lease_token, "result": {"ok": 1}}])
    done = tierq("wait", queue, str(made.id), "--timeout", "10", "--json")
    assert done.exit_code == 0, done.output
    assert (json_of(done)["state"], json_of(done)["result"]) == ("done", {"ok": 1})
    dead = api.enqueue_one(queue, {"n": 2})
    [task] = api.claim(queue)
    api.nack(queue, [{"id": task.id, "lease_token": task.lease_token, "dead": True}])
    assert tierq("wait", queue, str(dead.id)).exit_code == 1


def test_heartbeat_carries_progress_which_running_and_wait_show(
        tierq: Tierq, api: Client, names: QueueNames) -> None:
    queue = names["jobs"]
    made = api.enqueue_one(queue, {"n": 1})
    [task] = json_of(tierq("claim", queue, "--json"))
    beat = tierq("heartbeat", queue, task["id"], task["lease_token"], "--extend", "120",
                 "--progress", '{"page": 7}')
    assert beat.exit_code == 0 and "extended" in beat.stderr, beat.output
    [lease] = json_of(tierq("running", queue, "--json"))
    assert (lease["id"], lease["progress"]) == (task["id"], {"page": 7})
    assert tierq("running", queue).exit_code == 0  # (a table as wide as the terminal)
    too_big = tierq("heartbeat", queue, task["id"], task["lease_token"], "--progress",
                    '"' + "x" * 5000 + '"')
    assert too_big.exit_code != 0 and "4096" in too_big.output
    api.nack(queue, [{"id": made.id, "lease_token": task["lease_token"], "dead": True}])
    dead = tierq("wait", queue, str(made.id))
    assert dead.exit_code == 1 and 'progress: {"page":' in dead.stderr + dead.stdout


def test_cancel_marks_a_running_task_cancelled(tierq: Tierq, api: Client,
                                               names: QueueNames) -> None:
    queue = names["jobs"]
    made = tierq("enqueue", queue, '{"n": 1}', "--timeout", "30", "--json")
    assert made.exit_code == 0, made.output
    [task] = api.claim(queue)
    assert task.timeout_seconds == 30
    cancelled = tierq("cancel", queue, str(task.id), "--json")
    assert cancelled.exit_code == 0, cancelled.output
    assert json_of(cancelled)["state"] == "cancelled"
    beat = api.heartbeat(queue, [{"id": task.id, "lease_token": task.lease_token}])
    assert beat.cancelled == [task.id]
    assert tierq("cancel", queue, str(task.id)).exit_code == 0  # (already: as it is)
    assert tierq("wait", queue, str(task.id)).exit_code == 1  # (it ended cancelled)
    done = api.enqueue_one(queue, {"n": 2})
    [task] = api.claim(queue)
    api.ack(queue, [{"id": task.id, "lease_token": task.lease_token, "result": 1}])
    refused = tierq("cancel", queue, str(done.id))
    assert refused.exit_code == 1 and "task_finished" in refused.stderr
    assert tierq("cancel", queue, "01a2010d-0000-7000-8000-000000000001").exit_code == 1
    shown = tierq("queue", "set", queue, "--timeout", "120", "--json")
    assert shown.exit_code == 0, shown.output
    assert json_of(shown)["settings"]["timeout_seconds"] == 120
    assert tierq("queue", "set", queue, "--timeout", "0").exit_code == 2
    assert tierq("enqueue", queue, "1", "--timeout", "0").exit_code == 2


@pytest.mark.parametrize("args", [
    ["heartbeat", "q", "01a2010d-0000-7000-8000-000000000001", "t", "--progress", "{oops"],
    ["claim", "q", "--max", "0"],
    ["claim", "q", "--wait", "30"],
    ["ack", "q", "not-a-uuid", "token"],
    ["ack", "q", "01a2010d-0000-7000-8000-000000000001", "t", "--result", "{oops"],
    ["ack", "q", "01a2010d-0000-7000-8000-000000000001", "t", "--claim", "0"],
    ["nack", "q", "01a2010d-0000-7000-8000-000000000001", "t", "--retry-in", "-1"],
    ["release", "q", "not-a-uuid", "token"],
])
def test_lease_commands_bad_input_exits_2(tierq: Tierq, args: list[str]) -> None:
    assert tierq(*args).exit_code == 2


# -- stats -----------------------------------------------------------------------------


def test_stats(tierq: Tierq, api: Client, names: QueueNames) -> None:
    queue = names["stats"]
    first, _, _ = api.enqueue(queue, [{"payload": 1, "tenant": "acme"},
                                      {"payload": 2, "tenant": "acme"},
                                      {"payload": 3, "tenant": "globex",
                                       "delay_seconds": 600}])
    api.enqueue(queue, [{"payload": 4, "tenant": "acme", "after": [first.id]}])
    rows = json_of(tierq("stats", "--json", "--queue", queue))
    assert [(r["tenant"], r["warm"], r["waiting"], r["delayed"]) for r in rows] == [
        ("acme", 2, 1, 0), ("globex", 0, 0, 1)]
    grouped = json_of(tierq("stats", "--json", "--queue", queue, "--group-by-queue"))
    assert [(r["tenant"], r["warm"], r["waiting"], r["delayed"], r["total"])
            for r in grouped] == [("2 tenants", 2, 1, 1, 4)]
    table = tierq("stats", "--once", "--queue", queue)
    assert table.exit_code == 0 and queue in table.stdout and "acme" in table.stdout
    down = tierq("stats", "--once", url=dead_port_url())
    assert down.exit_code == 1


def test_stats_and_dead_letters_show_groups(tierq: Tierq, api: Client,
                                            names: QueueNames) -> None:
    queue = names["grouped"]
    api.enqueue(queue, [{"payload": i, "tenant": "acme", "group": g}
                        for g in ("x", "y") for i in range(3)])
    [row] = json_of(tierq("stats", "--json", "--queue", queue))
    assert (row["warm"], row["held"], row["groups"], row["total"]) == (2, 4, 2, 6)
    assert row["head_seconds"] is not None and 0 <= row["head_seconds"] < 60
    wide = {"COLUMNS": "220"}
    table = tierq("stats", "--once", "--queue", queue, env=wide)
    assert table.exit_code == 0 and "held" in table.stdout and "oldest head" in table.stdout
    shown = tierq("claim", queue, "--max", "5", env=wide)  # each group's head only
    assert shown.exit_code == 0 and "group" in shown.stdout
    assert " x " in shown.stdout and " y " in shown.stdout
    dead_queue = names["grouped-dead"]
    api.enqueue(dead_queue, [{"payload": 1, "group": "x"}, {"payload": 2}])
    claimed = api.claim(dead_queue, max=5)
    api.nack(dead_queue, [{"id": t.id, "lease_token": t.lease_token, "dead": True}
                          for t in claimed])
    listed = tierq("dlq", "list", dead_queue, env=wide)
    assert listed.exit_code == 0 and "group" in listed.stdout and " x " in listed.stdout


def _read_terminal(leader: int, output: bytearray, until: Callable[[bytes], bool],
                   timeout: float) -> bool:
    """Read what a process writes to its terminal into ``output`` until ``until(output)``
    holds (True), the process closes it or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while not until(bytes(output)):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([leader], [], [], left)[0]:
            return False
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer closed the terminal
            return False
        if not chunk:
            return False
        output += chunk
    return True


def test_stats_refreshes_live_until_interrupted(api_url: str, api: Client,
                                                names: QueueNames) -> None:
    """On a terminal the table is redrawn every interval; Ctrl-C (sent once it has been
    drawn twice, so not while Python is still starting) ends it with exit code 0."""
    queue = names["live"]
    api.enqueue_one(queue, 1)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 150, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-c", "from tierq.cli import app; app()", "stats", "--url", api_url,
         "--interval", "0.3", "--queue", queue],
        stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, cwd=REPO,
        env={**os.environ, "COLUMNS": "150", "TERM": "xterm-256color"})
    os.close(follower)
    output = bytearray()
    try:
        redrawn = _read_terminal(leader, output, lambda o: o.count(b"Ctrl-C to quit") >= 2,
                                 timeout=90)
        assert redrawn, f"not redrawn twice within 90 s: {output.decode(errors='replace')}"
        process.send_signal(signal.SIGINT)
        _read_terminal(leader, output, lambda o: False, timeout=20)
        returncode = process.wait(timeout=5)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    assert returncode == 0, output.decode(errors="replace")[-3000:]
    assert queue in output.decode(errors="replace")


# -- dead letters ----------------------------------------------------------------------


def test_dlq_list_replay_purge(tierq: Tierq, api: Client, names: QueueNames) -> None:
    queue = names["dlq"]
    none = tierq("dlq", "list", queue)
    assert none.exit_code == 0 and "no dead letters" in none.stderr
    ids = [o.id for o in api.enqueue(queue, [{"payload": i} for i in range(3)])]
    claimed = api.claim(queue, max=3)
    api.nack(queue, [{"id": t.id, "lease_token": t.lease_token, "error": "kaput",
                      "dead": True} for t in claimed])
    listed = tierq("dlq", "list", queue, "--json")
    assert listed.exit_code == 0
    assert {t["id"] for t in json_of(listed)["tasks"]} == {str(i) for i in ids}
    assert "kaput" in tierq("dlq", "list", queue).stdout

    assert tierq("dlq", "replay", queue).exit_code == 2
    assert tierq("dlq", "replay", queue, str(ids[0]), "--all").exit_code == 2
    one = tierq("dlq", "replay", queue, str(ids[0]))
    assert one.exit_code == 0 and "replayed 1" in one.stderr
    assert api.get_task(queue, ids[0]).state == "warm"
    skipped = tierq("dlq", "replay", queue, str(ids[0]))  # not dead any more
    assert skipped.exit_code == 1 and "skipped" in skipped.stderr

    declined = tierq("dlq", "purge", queue, "--all", input="n\n")
    assert declined.exit_code == 1
    assert len(api.dlq_list(queue).tasks) == 2
    purged = tierq("dlq", "purge", queue, "--all", "--yes")
    assert purged.exit_code == 0 and "deleted 2" in purged.stderr
    assert api.dlq_list(queue).tasks == []
    assert tierq("dlq", "replay", queue, "--all").exit_code == 0


# -- worker ----------------------------------------------------------------------------


def test_worker_runs_a_handler_by_name(tierq: Tierq, api: Client, names: QueueNames,
                                       tmp_path: Path) -> None:
    queue = names["work"]
    ids = [o.id for o in api.enqueue(queue, [{"payload": {"seconds": 0}} for _ in range(5)])]
    journal = tmp_path / "journal"
    result = tierq("worker", queue, "tests.worker.handlers:slow", "--burst", "--wait", "0.5",
                   "--app-dir", str(REPO), env={"TIERQ_TEST_JOURNAL": str(journal)})
    assert result.exit_code == 0, result.output
    assert all(api.get_task(queue, i).state == "done" for i in ids)
    assert len(journal.read_text().splitlines()) == 10  # a start and a finish each


@pytest.mark.parametrize(("handler", "message"), [
    ("tests.worker.handlers", "module:function"),
    ("tests.worker.nope:slow", "cannot import module"),
    ("tests.worker.handlers:missing", "has no attribute"),
    ("tests.worker.handlers:_lock", "is not callable"),
])
def test_worker_with_a_bad_handler_exits_2(tierq: Tierq, handler: str, message: str) -> None:
    result = tierq("worker", "q", handler, "--app-dir", str(REPO))
    assert result.exit_code == 2
    assert message in result.stderr


def test_worker_refused_by_the_api_exits_1(tierq: Tierq) -> None:
    result = tierq("worker", "bad queue!", "tests.worker.handlers:slow", "--app-dir",
                   str(REPO), "--lease-seconds", "5", "--burst")
    assert result.exit_code == 1
    assert "invalid_input" in result.stderr


# -- bench -----------------------------------------------------------------------------


def test_bench_passes_its_options_on(tierq: Tierq) -> None:
    unknown = tierq("bench", "--suite", "nope", url=None)
    assert unknown.exit_code == 2 and "no benchmark 'nope'" in unknown.stderr
    result = subprocess.run([sys.executable, "-c", "from tierq.cli import app; app()", "bench",
                             "--", "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "usage: python -m bench.engine" in result.stdout
    bad = subprocess.run([sys.executable, "-c", "from tierq.cli import app; app()", "bench",
                          "--", "--workers", "many"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2  # argparse's usage error, passed through
